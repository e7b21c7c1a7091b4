#!/usr/bin/env python3
"""Kernel-level profile of one benchmark run with Nsight Compute (ncu):
profiles the command twice, with --runs 1 and --runs 2 (no warm-up), and
subtracts, so what remains is exactly one run's kernels (the calibration
GEMMs and the float64 check cancel out). Prints time per kernel family.

    python3 scripts/kernel_profile.py build-gpu/bench/hessian --strategy rows --act silu \\
        --precision fp32 --mode hess
    python3 scripts/kernel_profile.py build-gpu/bench/laplacian --strategy laplacian --mode lap
"""
import collections
import csv
import io
import re
import subprocess
import sys

NCU = "/usr/local/cuda/bin/ncu"


def profile(cmd):
    out = subprocess.run([NCU, "--metrics", "gpu__time_duration.sum", "--csv", "--print-units", "base"]
                         + cmd, capture_output=True, text=True).stdout
    start = out.find('"ID"')
    times, counts = collections.Counter(), collections.Counter()
    for row in csv.DictReader(io.StringIO(out[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"]
        name = re.sub(r"\(.*", "", name)  # drop arguments
        name = re.sub(r"<.*", "", name) if "tg::" in name or "cuda" in name else name
        times[name] += float(row["Metric Value"].replace(",", "")) / 1e6  # ns -> ms
        counts[name] += 1
    return times, counts


def main():
    cmd = sys.argv[1:] + ["--warmup", "0"]
    if cmd[0].endswith("hessian"):  # its float64 check: cancels out, kept small
        cmd += ["--check", "2"]
    t1, c1 = profile(cmd + ["--runs", "1"])
    t2, c2 = profile(cmd + ["--runs", "2"])
    rows = [(t2[k] - t1[k], c2[k] - c1[k], k) for k in t2]
    rows = [r for r in rows if r[1] > 0]
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"one run: {sum(r[1] for r in rows)} kernels, {total:.2f} ms of kernel time")
    print(f"{'ms':>8} {'share':>6} {'launches':>8}  kernel")
    for ms, n, k in rows[:25]:
        print(f"{ms:8.3f} {100 * ms / total:5.1f}% {n:8d}  {k[:110]}")


if __name__ == "__main__":
    main()

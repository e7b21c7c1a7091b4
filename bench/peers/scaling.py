#!/usr/bin/env python3
"""How cost grows: the Hessian job, the Laplacian and the PINN step swept over
the batch B, the Laplacian over its input dimension n and the PINN step over
its width, tapegrad and the peers, on the GPU machine:

    python3 bench/peers/scaling.py [--build build-gpu] [--out DIR] [--sweeps hessian_b,laplacian_b,...]
        [--device cuda|cpu] [--points K | --values V1,V2] [--timeout S]
    python3 bench/peers/scaling.py --plot DIR      # the tables and PNGs from DIR's JSON

Each point is one run of the peer script (hessian_peers.py, laplacian_peers.py,
pinn_peers.py) with --out DIR/<sweep>_<value>.json, so a point that fails or
runs out of time leaves the others. --plot reads those files and writes, per
sweep, DIR/<sweep>.png (median time and peak memory against the swept value,
log-log, one line per framework and mode) and prints a markdown table.

Memory is what each script measures: tapegrad's and PyTorch's peak bytes
allocated above what was live before one call (a graphed PINN step: the
graph's pool); JAX's the device's peak bytes in use in its process.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# sweep -> (script, swept option, values, fixed options, label of the swept value);
# the values spread-first, so that --points K covers the range
SWEEPS = {
    "hessian_b": ("hessian_peers.py", "--batch", [1000, 10000, 40000, 4000],
                  ["--act", "silu", "--precision", "fp32", "--runs", "10", "--frameworks", "tapegrad,func,jax",
                   "--tapegrad-strategies", "general,taylor"], "B (points)"),
    "laplacian_b": ("laplacian_peers.py", "--batch", [1024, 16384, 4096],
                    ["--runs", "10", "--frameworks", "tapegrad,func,jax_fwdrev", "--tapegrad-strategies",
                     "laplacian,trace"], "B (points), n = 100"),
    "laplacian_n": ("laplacian_peers.py", "--n", [10, 100, 1000, 30, 300],
                    ["--batch", "1024", "--runs", "10", "--frameworks", "tapegrad,func,jax_fwdrev",
                     "--tapegrad-strategies", "laplacian,trace"], "n (input dimension), B = 1024"),
    "pinn_b": ("pinn_peers.py", "--batch", [1024, 8192, 131072, 32768],
               ["--optimizer", "adam", "--steps", "50", "--frameworks", "tapegrad,taylor,graph,jax"],
               "B (collocation points), width 64"),
    "pinn_width": ("pinn_peers.py", "--width", [32, 128, 256, 64],
                   ["--batch", "8192", "--optimizer", "adam", "--steps", "50", "--frameworks",
                    "tapegrad,taylor,graph,jax"], "hidden width, B = 8192"),
}


def run(args):
    os.makedirs(args.out, exist_ok=True)
    for sweep in args.sweeps.split(","):
        script, opt, values, fixed, _ = SWEEPS[sweep]
        chosen = values[:args.points] if not args.values else [v for v in values if str(v) in args.values.split(",")]
        for v in chosen:
            path = os.path.join(args.out, f"{sweep}_{v}.json")
            cmd = [sys.executable, os.path.join(HERE, script), "--device", args.device, "--build", args.build, opt, str(v),
                   *fixed, "--out", path]
            print(f"== {sweep} {opt} {v}", flush=True)
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                if r.returncode != 0:
                    print(f"   failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}", flush=True)
            except subprocess.TimeoutExpired:
                print(f"   over {args.timeout} s: left out", flush=True)


def points(out_dir, sweep):
    """{series name: [(value, ms, peak MiB)]} over the sweep's JSON files."""
    _, opt, _, _, _ = SWEEPS[sweep]
    key = {"--batch": "batch", "--n": "n", "--width": "width"}[opt]
    series = {}
    for path in glob.glob(os.path.join(out_dir, f"{sweep}_*.json")):
        with open(path) as f:
            doc = json.load(f)
        for r in doc["results"]:
            name = r["framework"]
            if r.get("mode"):
                name = f"{name} [{r['mode']}]"
            series.setdefault(name, []).append((doc[key], r["median_ms"], r["peak_mib"]))
    for s in series.values():
        s.sort()
    return series


def fmt(x, digits=2):
    return "—" if x is None or x != x else f"{x:.{digits}f}"


def plot(out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for sweep, (_, _, _, _, label) in SWEEPS.items():
        series = points(out_dir, sweep)
        if not series:
            continue
        values = sorted({v for s in series.values() for v, _, _ in s})
        print(f"\n{sweep}: median ms / peak MiB against {label}\n")
        print("| | " + " | ".join(str(v) for v in values) + " |")
        print("|---|" + "---:|" * len(values))
        for name, s in sorted(series.items()):
            at = {v: (ms, mib) for v, ms, mib in s}
            cells = [f"{fmt(at[v][0])} / {fmt(at[v][1], 0)}" if v in at else "—" for v in values]
            print(f"| {name} | " + " | ".join(cells) + " |")
        fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(13, 5))
        for name, s in sorted(series.items()):
            style = "-" if name.startswith("tapegrad") else "--"
            xs = [v for v, _, _ in s]
            ax_t.plot(xs, [ms for _, ms, _ in s], style, marker="o", label=name)
            mem = [(v, mib) for v, _, mib in s if mib == mib and mib is not None and mib > 0]
            if mem:
                ax_m.plot([v for v, _ in mem], [m for _, m in mem], style, marker="o", label=name)
        for ax, what in ((ax_t, "median ms"), (ax_m, "peak MiB")):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel(what)
            ax.grid(True, which="both", alpha=0.3)
        ax_t.legend(fontsize=7)
        fig.suptitle(f"{sweep}: tapegrad (solid) and the peers (dashed)")
        fig.tight_layout()
        png = os.path.join(out_dir, f"{sweep}.png")
        fig.savefig(png, dpi=90)
        plt.close(fig)
        print(f"\n({png})")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-gpu", help="tapegrad's build directory")
    p.add_argument("--out", default="scaling", help="where the JSON (and the PNGs) go")
    p.add_argument("--sweeps", default=",".join(SWEEPS))
    p.add_argument("--timeout", type=float, default=150, help="seconds per point (a Laplacian point takes ~90 on an H200)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--points", type=int, default=100, help="the first this many values of each sweep")
    p.add_argument("--values", help="only these values of each sweep (comma-separated, e.g. 4000,40000)")
    p.add_argument("--plot", metavar="DIR", help="only draw DIR's JSON")
    a = p.parse_args()
    if a.plot:
        plot(a.plot)
        return
    run(a)
    try:
        plot(a.out)
    except ImportError as e:  # matplotlib missing: the JSON is there for --plot elsewhere
        print(f"no plots here ({e}); run --plot {a.out} where matplotlib is", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log by kernel name:
total GPU time, kernel count, and per-name rows sorted by time."""
import csv
import sys
from collections import defaultdict

rows = []
with open(sys.argv[1]) as fh:
    lines = [l for l in fh if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(r.get("Metric Unit", ""), 1.0)
    rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * scale, r.get("Grid Size", "")))
by = defaultdict(lambda: [0.0, 0, set()])
for name, us, grid in rows:
    key = name[:110]
    by[key][0] += us
    by[key][1] += 1
    by[key][2].add(grid)
total = sum(us for _, us, _ in rows)
print(f"kernels: {len(rows)}  sum of kernel times: {total:.1f} us  mean {total / max(len(rows), 1):.2f} us")
for name, (us, n, grids) in sorted(by.items(), key=lambda kv: -kv[1][0]):
    print(f"{us:8.1f} us {n:4d}x {us / n:6.2f} us  {name}  grids {' '.join(sorted(grids))[:60]}")

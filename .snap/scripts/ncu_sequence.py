#!/usr/bin/env python3
"""Lists an `ncu --csv --metrics gpu__time_duration.sum` log kernel by kernel,
in launch order: index, us, grid, name (the order the step runs them)."""
import csv
import sys

with open(sys.argv[1]) as fh:
    lines = [l for l in fh if l.startswith('"')]
i = 0
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(r.get("Metric Unit", ""), 1.0)
    i += 1
    print(f"{i:4d} {float(r['Metric Value'].replace(',', '')) * scale:8.1f} {r.get('Grid Size', ''):>14s} {r['Kernel Name'][:100]}")

#!/usr/bin/env python3
"""Draws the Hessian benchmark's table as a PNG next to its JSON:

    scripts/plot_hessian.py RESULTS.json [PEERS.json]

RESULTS.json is what `bench/hessian --out` writes; PEERS.json (optional, by
default hessian_peers.json beside it when present) what
`bench/peers/hessian_peers.py --out` writes. Two panels, median time and
peak device memory, one group of bars per (activation, precision, mode), one
bar per tapegrad strategy and per peer. Writes RESULTS.png.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    with open(path) as f:
        doc = json.load(f)
    series = {}  # name -> {group: (ms, mib)}
    for r in doc["results"]:
        group = f"{r['act']}\n{r['precision']}\n{r['mode']}"
        series.setdefault(f"tapegrad {r['strategy']}", {})[group] = (r["median_ms"], r["peak_mib"])
    peers = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(path), "hessian_peers.json")
    if os.path.exists(peers):
        with open(peers) as f:
            for r in json.load(f)["results"]:
                if r["framework"].startswith("tapegrad"):
                    continue
                group = f"{r['act']}\n{r['precision']}\n{r['mode']}"
                series.setdefault(r["framework"], {})[group] = (r["median_ms"], r["peak_mib"])
    groups = list(dict.fromkeys(g for s in series.values() for g in s))
    names = list(series)
    width = 0.8 / max(len(names), 1)
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.2 * len(groups) * max(len(names), 3) / 3), 8))
    for ax, k, label in ((axes[0], 0, "median time (ms)"), (axes[1], 1, "peak memory (MiB)")):
        for i, name in enumerate(names):
            xs = [g + (i - (len(names) - 1) / 2) * width for g in range(len(groups))]
            ys = [series[name].get(g, (float("nan"),) * 2)[k] for g in groups]
            ax.bar(xs, ys, width, label=name)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups, fontsize=8)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, ncol=min(len(names), 4))
    axes[0].set_title(f"Per-sample Hessians on {doc['device']}: MLP 2 -> {doc['width']} x{doc['depth']} -> 3, "
                      f"B = {doc['batch']}")
    fig.tight_layout()
    out = os.path.splitext(path)[0] + ".png"
    fig.savefig(out, dpi=120)
    print(f"plot written to {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Hutchinson's stochastic Laplacian against the same estimator in JAX, as n grows:

    python3 bench/peers/stochastic_peers.py [--device cuda|cpu] [--build build-gpu] [--inputs 100,1000,10000,100000]
        [--batch 1024] [--samples 16] [--runs 20] [--mode lap,lap+bwd] [--exact-up-to 1000]
        [--frameworks tapegrad,jax_jet,jax_hvp]

Per-sample Laplacian estimates of an MLP n -> 256 x4 -> 1 (tanh), float32, B
points, k Rademacher directions per point drawn anew on every call: the
mean over the directions v of v^T H v. `lap` is the estimate; `lap+bwd`
then backpropagates its sum into the weights (a PINN loss step). tapegrad
runs build/bench/laplacian --strategy hutchinson (tg::autograd::
laplacian_estimate: one Taylor-mode pass of the k directions' second-order
jets), and its exact Taylor-mode Laplacian (`laplacian`, n directions) for
n up to --exact-up-to, in the same process. JAX (jit, each variant in its
own process): `jax_jet` the directions' second-order jets
(jax.experimental.jet, as the stochastic Taylor derivative estimator's
paper writes it), `jax_hvp` v . (forward over reverse Hessian-vector
product along v); both vmapped over the directions and the points, the
directions from jax.random inside the jitted function (a new key per call).
Prints per n and mode: median ms, peak device memory above what was
allocated before the first call (MiB; none on the CPU), and the ratio to
tapegrad's estimate; a failed row (out of memory) says so.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hessian_peers import ROOT, median_ms  # noqa: E402
from laplacian_peers import jax_mlp_point  # noqa: E402

WIDTH, DEPTH = 256, 4


def run_jax(kind, mode, n, batch, samples, runs, device):
    import jax
    import jax.numpy as jnp
    import numpy as np
    jax.config.update("jax_default_matmul_precision", "float32")
    rng = np.random.default_rng(7)
    sizes = [n] + [WIDTH] * DEPTH + [1]
    params = [(jnp.asarray((rng.standard_normal((sizes[i + 1], sizes[i])) / np.sqrt(sizes[i])).astype(np.float32)),
               jnp.asarray((rng.standard_normal(sizes[i + 1]) * 0.1).astype(np.float32)))
              for i in range(len(sizes) - 1)]
    x = jnp.asarray((rng.random((batch, n)) * 2 - 1).astype(np.float32))
    single = jax_mlp_point

    if kind == "jax_jet":
        from jax.experimental import jet

        def quad(p, xi, v):  # f(x + t v) = f0 + f1 t + f2 t^2 / 2 + ...: f2 = v^T H v
            _, (_, f2) = jet.jet(lambda z: single(p, z), (xi,), ((v, jnp.zeros_like(v)),))
            return f2
    else:
        def quad(p, xi, v):
            g = lambda z: jax.grad(single, argnums=1)(p, z)  # noqa: E731
            return jnp.dot(v, jax.jvp(g, (xi,), (v,))[1])

    def estimate(p, x, key):
        v = jax.random.rademacher(key, (samples,) + x.shape, dtype=x.dtype)  # [k, B, n]
        per_point = jax.vmap(lambda xi, vi: jax.vmap(lambda w: quad(p, xi, w))(vi).mean(), in_axes=(0, 1))
        return per_point(x, v)  # [B]

    base = jax.random.PRNGKey(0)
    if mode == "lap":
        fn = jax.jit(lambda p, x, i: estimate(p, x, jax.random.fold_in(base, i)))
    else:
        fn = jax.jit(jax.value_and_grad(lambda p, x, i: estimate(p, x, jax.random.fold_in(base, i)).sum()))
    jax.block_until_ready((params, x))

    def stats():
        return (jax.devices()[0].memory_stats() or {}) if device == "cuda" else {}
    before = stats().get("bytes_in_use", 0)
    calls = iter(range(10**9))
    ms = median_ms(lambda: jax.block_until_ready(fn(params, x, next(calls))), lambda: None, runs)
    peak = (stats().get("peak_bytes_in_use", float("nan")) - before) / 2**20 if device == "cuda" else float("nan")
    return ms, peak


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--build", default="build-gpu", help="tapegrad's build directory")
    p.add_argument("--inputs", default="100,1000,10000,100000")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--mode", default="lap,lap+bwd")
    p.add_argument("--exact-up-to", type=int, default=1000, help="tapegrad's exact Laplacian for n up to this")
    p.add_argument("--frameworks", default="tapegrad,jax_jet,jax_hvp")
    p.add_argument("--json", help="write every row here")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: kind:mode:n, one JAX variant, JSON out
    args = p.parse_args()
    if args.device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    if args.one:
        kind, mode, n = args.one.split(":")
        ms, peak = run_jax(kind, mode, int(n), args.batch, args.samples, args.runs, args.device)
        print(json.dumps({"ms": ms, "peak": peak}))
        return
    fw = args.frameworks.split(",")
    table = []  # (n, mode, label, ms, peak, note)

    def add(row):  # each row as it comes (a run cut short keeps what it measured)
        table.append(row)
        print("row: " + json.dumps(row), flush=True)
    for n in [int(v) for v in args.inputs.split(",")]:
        if "tapegrad" in fw:
            strategies = "hutchinson,laplacian" if n <= args.exact_up_to else "hutchinson"
            exe = os.path.join(ROOT, args.build, "bench", "laplacian")
            res = subprocess.run([exe, "--json", "--device", args.device, "--batch", str(args.batch), "--inputs", str(n),
                                  "--samples", str(args.samples), "--runs", str(args.runs), "--mode", args.mode,
                                  "--strategy", strategies], capture_output=True, text=True)
            if res.returncode != 0:
                print(f"tapegrad n = {n}: {res.stderr.strip()[-300:]}", file=sys.stderr, flush=True)
            else:
                r = json.loads(res.stdout.strip().splitlines()[-1])
                for e in r["results"]:
                    label = "tapegrad " + ("estimate" if e["strategy"] == "hutchinson" else "exact Taylor")
                    if "error" in e:
                        add((n, e["mode"], label, None, None, e["error"][:80]))
                    else:
                        add((n, e["mode"], label, e["median_ms"], e["peak_mib"], ""))
        for mode in args.mode.split(","):
            for kind in [f for f in fw if f.startswith("jax")]:
                label = {"jax_jet": "JAX jet", "jax_hvp": "JAX fwd-over-rev HVP"}[kind]
                res = subprocess.run([sys.executable, __file__, "--one", f"{kind}:{mode}:{n}", "--device", args.device,
                                      "--batch", str(args.batch), "--samples", str(args.samples), "--runs", str(args.runs)],
                                     capture_output=True, text=True)
                if res.returncode != 0:
                    err = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "failed"
                    add((n, mode, label, None, None, err[:80]))
                    continue
                d = json.loads(res.stdout.strip().splitlines()[-1])
                add((n, mode, label, d["ms"], d["peak"], ""))
        print(f"n = {n} done", flush=True)
    modes = args.mode.split(",")
    table.sort(key=lambda r: (r[0], modes.index(r[1])))  # stable: tapegrad's rows first in each block
    print(f"\nHutchinson, {args.samples} Rademacher directions: MLP n -> {WIDTH} x{DEPTH} -> 1 (tanh), "
          f"B = {args.batch}, fp32, {args.device}")
    print("| n | mode | | median ms | × tapegrad estimate | peak MiB |")
    print("|---:|---|---|---:|---:|---:|")
    for n, mode, label, ms, peak, note in table:
        ref = next((r[3] for r in table if r[0] == n and r[1] == mode and r[2] == "tapegrad estimate"), None)
        if ms is None:
            print(f"| {n} | {mode} | {label} | failed: {note} | | |")
            continue
        ratio = f"{ms / ref:.2f}×" if ref else "—"
        mem = f"{peak:.0f}" if peak == peak and peak is not None else "—"
        print(f"| {n} | {mode} | {label} | {ms:.3f} | {ratio} | {mem} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(zip(("n", "mode", "framework", "ms", "peak_mib", "note"), r)) for r in table], f, indent=1)


if __name__ == "__main__":
    main()

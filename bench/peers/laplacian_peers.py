#!/usr/bin/env python3
"""The Laplacian benchmark side by side, on the GPU machine:

    python3 bench/peers/laplacian_peers.py [--device cuda|cpu] [--build build-gpu] [--batch 4096]
        [--runs 20] [--mode lap,lap+bwd] [--frameworks tapegrad,eager,func,jax_hessian,jax_fwdrev,jax_jet]
        [--n 100] [--width 256] [--tapegrad-strategies laplacian,trace,rows] [--out FILE.json]

Per-sample Laplacians of an MLP 100 -> 256 x4 -> 1 (tanh), [B, 1]: `lap`, or
`lap+bwd` = then L.sum() backpropagated into the weights (a PINN loss step).
tapegrad runs build-gpu/bench/laplacian --json (strategies laplacian, trace,
rows); PyTorch eager the rows algorithm (autograd.grad of each gradient
column, create_graph); torch.func vmap(hessian) and its trace; JAX
jit(vmap(hessian)) trace, jit(vmap(jacfwd(grad))) diagonal (forward over
reverse), and jax.experimental.jet (second-order jets along each input
direction) when it imports. Each JAX variant runs in its own process, so
its peak memory is its own. Prints one table per mode: median ms, peak
device memory, the ratio to tapegrad's fastest, and (lap) each peer's
largest relative difference from the first peer's result (the peers share
weights and points; tapegrad draws its own, and checks its strategies
against each other). --device cpu: every framework on the host's CPUs
(PyTorch's and JAX's CPU backends; no memory column; `taskset` limits all
of them). --n and --width set the MLP's input dimension and hidden width;
--out writes the table as JSON (bench/peers/scaling.py reads it).
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hessian_peers import ROOT, jax_peak_mib, median_ms  # noqa: E402

N, WIDTH, DEPTH = 100, 256, 4
DEVICE = "cuda"  # --device


def sync():
    if DEVICE == "cuda":
        import torch
        torch.cuda.synchronize()


def params_and_x(torch, batch):
    g = torch.Generator().manual_seed(7)
    sizes = [N] + [WIDTH] * DEPTH + [1]
    ps = [((torch.randn(sizes[i + 1], sizes[i], generator=g) * (1.0 / sizes[i]) ** 0.5),
           torch.randn(sizes[i + 1], generator=g) * 0.1) for i in range(len(sizes) - 1)]
    x = torch.rand(batch, N, generator=g) * 2 - 1
    return ps, x


def run_torch(kind, mode, batch, runs):
    import torch
    ps, x0 = params_and_x(torch, batch)
    params = [(w.to(DEVICE).requires_grad_(), b.to(DEVICE).requires_grad_()) for w, b in ps]
    x0 = x0.to(DEVICE)
    bwd = mode == "lap+bwd"

    def mlp(p, x):
        for w, b in p[:-1]:
            x = torch.tanh(torch.nn.functional.linear(x, w, b))
        return torch.nn.functional.linear(x, *p[-1])

    def finish(lap):
        if bwd:
            lap.sum().backward()
            for w, b in params:
                w.grad = None
                b.grad = None
        return lap

    if kind == "eager":
        def step():
            x = x0.detach().requires_grad_()
            g = torch.autograd.grad(mlp(params, x).sum(), x, create_graph=True)[0]
            lap = sum(torch.autograd.grad(g[:, j].sum(), x, retain_graph=True, create_graph=bwd)[0][:, j]
                      for j in range(N))
            return finish(lap.unsqueeze(1))
    else:
        from torch.func import hessian, vmap

        def single(p, xi):
            return mlp(p, xi.unsqueeze(0)).squeeze()

        def step():
            h = vmap(hessian(single, argnums=1), in_dims=(None, 0))(params, x0)  # [B, n, n]
            return finish(h.diagonal(dim1=1, dim2=2).sum(1, keepdim=True))

    ms = median_ms(step, sync, runs)
    if DEVICE == "cpu":
        return ms, float("nan"), step().detach().numpy()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = step().detach().cpu().numpy()
    torch.cuda.synchronize()
    return ms, (torch.cuda.max_memory_allocated() - base) / 2**20, out


def jax_mlp_point(p, xi):
    """The tanh MLP at one point xi [n] in JAX (p: [(w, b)] per layer, no activation after the last): a scalar."""
    import jax.numpy as jnp
    h = xi
    for w, b in p[:-1]:
        h = jnp.tanh(w @ h + b)
    w, b = p[-1]
    return (w @ h + b)[0]


def run_jax(kind, mode, batch, runs):
    import jax
    import jax.numpy as jnp
    import torch
    jax.config.update("jax_default_matmul_precision", "float32")
    ps, x0 = params_and_x(torch, batch)
    params = [(jnp.asarray(w.numpy()), jnp.asarray(b.numpy())) for w, b in ps]
    x0 = jnp.asarray(x0.numpy())
    single = jax_mlp_point

    if kind == "jax_hessian":
        def lap1(p, xi):
            return jnp.trace(jax.hessian(single, argnums=1)(p, xi))
    elif kind == "jax_fwdrev":
        def lap1(p, xi):
            return jnp.diagonal(jax.jacfwd(jax.grad(single, argnums=1), argnums=1)(p, xi)).sum()
    else:
        from jax.experimental import jet

        def lap1(p, xi):
            eye = jnp.eye(N, dtype=xi.dtype)

            def second(v):  # f(x + t v) = f0 + f1 t + f2 t^2 / 2 + ...
                _, (_, f2) = jet.jet(lambda z: single(p, z), (xi,), ((v, jnp.zeros_like(v)),))
                return f2
            return jax.vmap(second)(eye).sum()

    lap = jax.vmap(lap1, in_axes=(None, 0))
    if mode == "lap":
        fn = jax.jit(lambda p, x: lap(p, x)[:, None])
    else:
        fn = jax.jit(jax.value_and_grad(lambda p, x: lap(p, x).sum()))
    ms = median_ms(lambda: jax.block_until_ready(fn(params, x0)), lambda: None, runs)
    peak = jax_peak_mib(jax) if DEVICE == "cuda" else float("nan")
    out = fn(params, x0)
    out = jax.numpy.asarray(out if mode == "lap" else out[0]).tolist()
    return ms, peak, out


def main():
    global DEVICE, N, WIDTH
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--build", default="build-gpu", help="tapegrad's build directory")
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--mode", default="lap,lap+bwd")
    p.add_argument("--frameworks", default="tapegrad,eager,func,jax_hessian,jax_fwdrev,jax_jet")
    p.add_argument("--n", type=int, default=N, help="input dimension")
    p.add_argument("--width", type=int, default=WIDTH, help="hidden width")
    p.add_argument("--tapegrad-strategies", default="laplacian,trace,rows")
    p.add_argument("--out", help="also write the tables as JSON there")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: one JAX variant, JSON out
    args = p.parse_args()
    DEVICE = args.device
    N, WIDTH = args.n, args.width
    if DEVICE == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"  # this process's JAX and its children's
    if args.one:
        kind, mode = args.one.split(":")
        ms, peak, out = run_jax(kind, mode, args.batch, args.runs)
        print(json.dumps({"ms": ms, "peak": peak, "out": out}))
        return
    import numpy as np
    fw = args.frameworks.split(",")
    rows = {}
    if "tapegrad" in fw:
        exe = os.path.join(ROOT, args.build, "bench", "laplacian")
        r = json.loads(subprocess.run([exe, "--json", "--device", DEVICE, "--batch", str(args.batch), "--runs", str(args.runs),
                                       "--mode", args.mode, "--inputs", str(N), "--width", str(WIDTH),
                                       "--strategy", args.tapegrad_strategies],
                                      check=True, capture_output=True, text=True).stdout)
        print(f"tapegrad on {r['device']}", flush=True)
        for e in r["results"]:
            rows.setdefault(e["mode"], {})[f"tapegrad {e['strategy']}"] = (e["median_ms"], e["peak_mib"], None)
    for mode in args.mode.split(","):
        row = rows.setdefault(mode, {})
        ref = None
        for name in fw:
            try:
                if name in ("eager", "func"):
                    ms, peak, out = run_torch(name, mode, args.batch, args.runs)
                    label = "PyTorch eager rows" if name == "eager" else "torch.func hessian trace"
                elif name.startswith("jax"):
                    res = subprocess.run([sys.executable, __file__, "--one", f"{name}:{mode}", "--device", DEVICE,
                                          "--batch", str(args.batch), "--runs", str(args.runs), "--n", str(N),
                                          "--width", str(WIDTH)],
                                         capture_output=True, text=True)
                    if res.returncode != 0:
                        raise RuntimeError(res.stderr.strip().splitlines()[-1] if res.stderr else "failed")
                    d = json.loads(res.stdout.strip().splitlines()[-1])
                    ms, peak, out = d["ms"], d["peak"], np.asarray(d["out"])
                    label = {"jax_hessian": "JAX hessian trace", "jax_fwdrev": "JAX jacfwd(grad) diag",
                             "jax_jet": "JAX jet"}[name]
                else:
                    continue
                if mode == "lap":
                    out = np.asarray(out).reshape(-1)
                    ref = out if ref is None else ref
                    row[label] = (ms, peak, float(np.abs(out - ref).max() / (np.abs(ref).max() + 1e-30)))
                else:
                    row[label] = (ms, peak, None)
            except Exception as e:  # report, keep going
                print(f"{name} {mode}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    for mode, row in rows.items():
        best = min((v[0] for k, v in row.items() if k.startswith("tapegrad")), default=None)
        print(f"\n{mode}: MLP {N} -> {WIDTH} x{DEPTH} -> 1 (tanh), B = {args.batch}, fp32, {DEVICE}")
        print("| | median ms | × tapegrad best | peak GiB | rel. diff from the first peer |")
        print("|---|---:|---:|---:|---:|")
        for k, (ms, peak, diff) in row.items():
            ratio = f"{ms / best:.2f}×" if best else "—"
            mem = f"{peak / 1024:.2f}" if peak == peak else "—"
            print(f"| {k} | {ms:.2f} | {ratio} | {mem} | {'' if diff is None else f'{diff:.1e}'} |")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"device": DEVICE, "batch": args.batch, "n": N, "width": WIDTH,
                       "results": [{"mode": mode, "framework": k, "median_ms": v[0], "peak_mib": v[1]}
                                   for mode, row in rows.items() for k, v in row.items()]}, fh, indent=2)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The Hessian benchmark side by side, on the GPU machine:

    python3 bench/peers/hessian_peers.py [--device cuda|cpu] [--build build-gpu] [--batch 10000]
        [--runs 20] [--act silu,tanh,relu] [--precision fp32,tf32] [--mode hess,hess+bwd]
        [--frameworks tapegrad,libtorch,eager,func,jax] [--out FILE]

Runs the identical workload (MLP 2 -> 512 x6 -> 3, per-sample input Hessian
[B, 3, 2, 2]; `hess`, or `hess+bwd` = then H.sum().backward() into the
weights) in tapegrad (build-gpu/bench/hessian --json, every strategy),
LibTorch C++ eager (build-peers/hessian_libtorch), PyTorch eager
(autograd.grad rows), torch.func (vmap(jacfwd(jacrev))) and JAX
(jit(vmap(hessian))), and prints one table: median ms over --runs after
warm-up, peak device memory, and each time's ratio to tapegrad's fastest.

--device cpu: every framework on the host CPU (PyTorch's and JAX's CPU
backends; fp32 only, no memory column). Each uses the CPUs the process may
run on, so `taskset -c 0-3 python3 ...` measures all of them on 4 cores.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDTH, DEPTH = 512, 6
DEVICE = "cuda"  # --device


def median_ms(fn, sync, runs, warmup=3):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def jax_peak_mib(jax):
    """The device's peak bytes in use so far, in MiB (NaN where JAX does not say)."""
    try:
        return jax.devices()[0].memory_stats().get("peak_bytes_in_use", float("nan")) / 2**20
    except Exception:
        return float("nan")


def torch_params(torch, seed=1234):
    g = torch.Generator().manual_seed(seed)
    sizes = [2] + [WIDTH] * DEPTH + [3]
    params = []
    for i in range(len(sizes) - 1):
        w = torch.randn(sizes[i + 1], sizes[i], generator=g) * (1.0 / sizes[i]) ** 0.5
        b = torch.randn(sizes[i + 1], generator=g) * 0.1
        params.append((w.to(DEVICE).requires_grad_(), b.to(DEVICE).requires_grad_()))
    return params


def run_torch(kind, act_name, precision, mode, batch, runs):
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    act = {"silu": F.silu, "tanh": torch.tanh, "relu": F.relu}[act_name]
    params = torch_params(torch)
    x0 = (torch.rand(batch, 2, generator=torch.Generator().manual_seed(99)) * 2 - 1).to(DEVICE)
    bwd = mode == "hess+bwd"

    def mlp(ps, x):
        for w, b in ps[:-1]:
            x = act(F.linear(x, w, b))
        w, b = ps[-1]
        return F.linear(x, w, b)

    def finish(h):  # hess+bwd: backpropagate into the weights, then reset them
        if bwd:
            h.sum().backward()
            for w, b in params:
                w.grad = None
                b.grad = None
        return h

    if kind == "eager":
        def step():
            x = x0.detach().requires_grad_()
            pred = mlp(params, x)
            ones = torch.ones(batch, device=DEVICE)
            jac = [torch.autograd.grad(pred[:, i], x, ones, create_graph=True)[0] for i in range(3)]
            rows = [torch.autograd.grad(jac[i][:, j], x, ones, retain_graph=True, create_graph=bwd)[0]
                    for i in range(3) for j in range(2)]
            return finish(torch.stack(rows, 1).view(batch, 3, 2, 2))
    else:
        from torch.func import jacfwd, jacrev, vmap

        def single(ps, xi):
            return mlp(ps, xi.unsqueeze(0)).squeeze(0)

        def step():
            return finish(vmap(jacfwd(jacrev(single, argnums=1), argnums=1), in_dims=(None, 0))(params, x0))

    if DEVICE == "cpu":
        return median_ms(step, lambda: None, runs), float("nan")
    torch.cuda.synchronize()
    ms = median_ms(step, torch.cuda.synchronize, runs)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return ms, peak


def run_jax(act_name, precision, mode, batch, runs):
    import jax
    import jax.numpy as jnp
    import numpy as np
    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if precision == "tf32" else "float32")
    act = {"silu": jax.nn.silu, "tanh": jnp.tanh, "relu": jax.nn.relu}[act_name]
    import torch  # the same initial weights as the torch runs
    params = [(jnp.asarray(w.detach().cpu().numpy()), jnp.asarray(b.detach().cpu().numpy()))
              for w, b in torch_params(torch)]
    x0 = jnp.asarray((torch.rand(batch, 2, generator=torch.Generator().manual_seed(99)) * 2 - 1).numpy())

    def single(ps, xi):
        h = xi
        for w, b in ps[:-1]:
            h = act(w @ h + b)
        w, b = ps[-1]
        return w @ h + b

    hess = jax.vmap(jax.hessian(single, argnums=1), in_axes=(None, 0))
    if mode == "hess":
        fn = jax.jit(hess)
    else:
        fn = jax.jit(jax.value_and_grad(lambda ps, x: hess(ps, x).sum()))
    out = lambda: fn(params, x0)
    ms = median_ms(lambda: jax.block_until_ready(out()), lambda: None, runs)
    return ms, jax_peak_mib(jax) if DEVICE == "cuda" else float("nan")


def run_tapegrad(args):
    exe = os.path.join(ROOT, args.build, "bench", "hessian")
    cmd = [exe, "--json", "--device", DEVICE, "--batch", str(args.batch), "--runs", str(args.runs), "--act", args.act,
           "--precision", args.precision, "--mode", args.mode, "--strategy", args.tapegrad_strategies]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def run_libtorch(act, precision, mode, batch, runs):
    if DEVICE == "cpu":
        raise RuntimeError("the LibTorch peer runs on CUDA only")
    exe = os.path.join(ROOT, "build-peers", "hessian_libtorch")
    out = subprocess.run([exe, act, precision, mode, str(batch), str(runs)], check=True,
                         capture_output=True, text=True).stdout
    r = json.loads(out)
    return r["median_ms"], r["peak_mib"]


def main():
    global DEVICE
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--build", default="build-gpu", help="tapegrad's build directory")
    p.add_argument("--tapegrad-strategies", default="rows,batched,forward,general,taylor")
    p.add_argument("--batch", type=int, default=10000)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--act", default="silu,tanh,relu")
    p.add_argument("--precision", default="fp32,tf32")
    p.add_argument("--mode", default="hess,hess+bwd")
    p.add_argument("--frameworks", default="tapegrad,libtorch,eager,func,jax")
    p.add_argument("--out", help="also write the results as JSON (scripts/plot_hessian.py draws it)")
    args = p.parse_args()
    DEVICE = args.device
    if DEVICE == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"  # before JAX is imported
        if "tf32" in args.precision.split(","):
            p.error("--device cpu: fp32 only (TF32 is a GPU format)")
        try:
            import torch
            peer = f"; PyTorch {torch.__version__} threads {torch.get_num_threads()}"
        except ImportError:
            peer = ""
        print(f"CPU: {os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} usable{peer}", flush=True)
    fw = args.frameworks.split(",")
    results = {}  # (act, prec, mode) -> {name: (ms, peak)}
    if "tapegrad" in fw:
        tg = run_tapegrad(args)
        print(f"tapegrad on {tg['device']}", flush=True)
        for r in tg["results"]:
            key = (r["act"], r["precision"], r["mode"])
            results.setdefault(key, {})[f"tapegrad {r['strategy']}"] = (r["median_ms"], r["peak_mib"])
    for act in args.act.split(","):
        for prec in args.precision.split(","):
            for mode in args.mode.split(","):
                key = (act, prec, mode)
                row = results.setdefault(key, {})
                for name in fw:
                    try:
                        if name == "libtorch":
                            row["LibTorch C++"] = run_libtorch(act, prec, mode, args.batch, args.runs)
                        elif name in ("eager", "func"):
                            label = "PyTorch eager" if name == "eager" else "torch.func"
                            row[label] = run_torch(name, act, prec, mode, args.batch, args.runs)
                        elif name == "jax":
                            row["JAX jit"] = run_jax(act, prec, mode, args.batch, args.runs)
                    except Exception as e:  # report, keep going
                        print(f"{name} {key}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    names = ["tapegrad rows", "tapegrad batched", "tapegrad forward", "tapegrad general", "tapegrad taylor", "LibTorch C++", "PyTorch eager", "torch.func", "JAX jit"]
    print("\n| act | prec | mode | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for (act, prec, mode), row in results.items():
        best = min((v[0] for k, v in row.items() if k.startswith("tapegrad")), default=None)
        cells = []
        for n in names:
            if n not in row:
                cells.append("—")
                continue
            ms, peak = row[n]
            ratio = f" ({ms / best:.2f}×)" if best else ""
            mem = f", {peak / 1024:.2f} GiB" if peak == peak else ""
            cells.append(f"{ms:.1f} ms{ratio}{mem}")
        print(f"| {act} | {prec} | {mode} | " + " | ".join(cells) + " |")
    print("\n(ratio = time / tapegrad's fastest strategy; memory = peak allocated during one run)")
    if args.out:
        rows = [{"act": a, "precision": p_, "mode": m, "framework": n, "median_ms": v[0], "peak_mib": v[1]}
                for (a, p_, m), row in results.items() for n, v in row.items()]
        with open(args.out, "w") as f:
            json.dump({"device": DEVICE, "batch": args.batch, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()

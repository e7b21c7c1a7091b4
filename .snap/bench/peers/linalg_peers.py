#!/usr/bin/env python3
"""The tg::linalg workloads side by side, on the GPU machine:

    python3 bench/peers/linalg_peers.py [--sizes 1024,4096,8192] [--batch 10000] [--runs 20]
        [--frameworks tapegrad,torch,jax] [--device cuda]

The workloads of bench/bench_linalg.cpp:
  gp_grad n       exact GP regression's negative log marginal likelihood (RBF
                  kernel, theta = (log ell, log sf2, log sn2), float64, n 1-D
                  points) and its gradient in theta;
  gp_hessian n    its 3 x 3 Hessian in theta by forward over reverse;
  chol B          B SPD 64 x 64 float32 matrices: L = cholesky(A),
                  x = cholesky_solve(b, L), logdet = 2 sum log diag L;
  chol+grad B     the same and the gradient of sum(x) + sum(logdet) in A, b.
tapegrad runs build-gpu/bench/bench_linalg (Google Benchmark, JSON, the
median of --runs repetitions; each timed up to a device synchronize).
PyTorch eager uses torch.linalg.cholesky and torch.cholesky_solve, its
Hessian torch.func.jacfwd(jacrev); JAX jit uses jax.scipy.linalg.cho_factor
and cho_solve (vmapped over the batch), its Hessian jit(jacfwd(jacrev)), with
float32 matmuls at "highest" precision (no TF32, as tapegrad and PyTorch's
default). Each framework runs in its own process (JAX without preallocation),
one warm-up call, then the median of --runs calls each synchronized
(torch.cuda.synchronize, block_until_ready). The peers draw their own data
(same recipe, other generators). Prints one table: median ms, and each
peer's ratio to tapegrad; with --memory a second one of each workload's peak
device memory (one call, inputs included: tapegrad's allocator peak,
torch.cuda.max_memory_allocated, JAX's peak_bytes_in_use in a process of its
own, which also counts what XLA's compilation and autotuning held).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

from timing import cuda_profiler  # bench/peers/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOG2PI = math.log(2 * math.pi)


def median_ms(fn, sync, runs, warmup=1, profile=None):
    """The median of `runs` synchronized calls; with `profile` (a pair of
    profiler start/stop functions) one call bracketed for ncu instead."""
    if profile:
        for _ in range(2):
            sync(fn())
        profile[0]()
        sync(fn())
        profile[1]()
        return 0.0
    for _ in range(warmup):
        sync(fn())
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sync(fn())
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def gp_data(n):
    """n points of a noisy sine on [-3, 3] (numpy, shared by the peers)."""
    import numpy as np
    rng = np.random.default_rng(46)
    x = rng.uniform(-3, 3, size=(n, 1))
    y = np.sin(x) + 0.1 * rng.standard_normal((n, 1))
    theta = np.array([0.0, 0.0, math.log(0.01)])
    return (x - x.T) ** 2, y, theta


def batch_data(B):
    import numpy as np
    rng = np.random.default_rng(7)
    M = rng.standard_normal((B, 64, 64)).astype(np.float32)
    A = M @ M.transpose(0, 2, 1) / 64 + np.eye(64, dtype=np.float32)
    b = rng.standard_normal((B, 64, 1)).astype(np.float32)
    return A, b


def worker_torch(args):
    import torch
    dev = torch.device(args.device)
    sync = (lambda _: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda _: None)
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {}

    prof = (torch.cuda.profiler.start, torch.cuda.profiler.stop) if args.profile else None

    def record(key, fn):
        if args.workloads and key.split(" ")[0] not in args.workloads:
            return
        try:
            out[key] = median_ms(fn, sync, args.runs, profile=prof)
            if dev.type == "cuda":  # one call's peak, inputs included
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                sync(fn())
                out["peak " + key] = torch.cuda.max_memory_allocated() / 2**20
        except Exception as e:  # report, keep going
            out[key] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        print(f"torch {key}: {out[key]}", file=sys.stderr, flush=True)

    gp = not args.workloads or any(w.startswith("gp") for w in args.workloads)
    chol_wanted = not args.workloads or any(w.startswith("chol") for w in args.workloads)
    for n in args.sizes if gp else []:
        sq, y, theta = (torch.tensor(a, dtype=torch.float64, device=dev) for a in gp_data(n))
        eye = torch.eye(n, dtype=torch.float64, device=dev)

        def nlml(t):
            K = torch.exp(t[1] - sq * (torch.exp(-2 * t[0]) * 0.5)) + eye * torch.exp(t[2])
            L = torch.linalg.cholesky(K)
            a = torch.cholesky_solve(y, L)
            return 0.5 * (y * a).sum() + torch.log(torch.diagonal(L)).sum() + 0.5 * n * LOG2PI

        def grad():
            t = theta.detach().requires_grad_()
            return torch.autograd.grad(nlml(t), t)[0]

        record(f"gp_grad {n}", grad)
        from torch.func import jacfwd, jacrev
        record(f"gp_hessian {n}", lambda: jacfwd(jacrev(nlml))(theta))
        del sq, eye
    if not chol_wanted:
        return out
    A0, b0 = (torch.tensor(a, device=dev) for a in batch_data(args.batch))

    def chol(A, b):
        L = torch.linalg.cholesky(A)
        x = torch.cholesky_solve(b, L)
        return x, 2 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)

    def fwd():
        with torch.no_grad():
            return chol(A0, b0)

    def fwd_bwd():
        A, b = A0.detach().requires_grad_(), b0.detach().requires_grad_()
        x, ld = chol(A, b)
        return torch.autograd.grad(x.sum() + ld.sum(), (A, b))

    record(f"chol {args.batch}", fwd)
    record(f"chol+grad {args.batch}", fwd_bwd)
    return out


def worker_jax(args):
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_default_matmul_precision", "highest")
    if args.device == "cpu":
        jax.config.update("jax_platform_name", "cpu")
    import jax.numpy as jnp
    from jax.scipy.linalg import cho_factor, cho_solve
    sync = jax.block_until_ready
    out = {}

    prof = None
    if args.profile:
        prof = cuda_profiler()

    def record(key, fn):
        if args.workloads and key.split(" ")[0] not in args.workloads:
            return
        try:
            out[key] = median_ms(fn, sync, args.runs, profile=prof)
            stats = jax.devices()[0].memory_stats() or {}
            if "peak_bytes_in_use" in stats:  # since the process began: one workload per process (--memory)
                out["peak " + key] = stats["peak_bytes_in_use"] / 2**20
        except Exception as e:
            out[key] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        print(f"jax {key}: {out[key]}", file=sys.stderr, flush=True)

    gp = not args.workloads or any(w.startswith("gp") for w in args.workloads)
    chol_wanted = not args.workloads or any(w.startswith("chol") for w in args.workloads)
    for n in args.sizes if gp else []:
        sq, y, theta = (jnp.asarray(a, dtype=jnp.float64) for a in gp_data(n))

        def nlml(t, sq, y):
            K = jnp.exp(t[1] - sq * (jnp.exp(-2 * t[0]) * 0.5)) + jnp.eye(y.shape[0], dtype=t.dtype) * jnp.exp(t[2])
            c = cho_factor(K, lower=True)
            a = cho_solve(c, y)
            return 0.5 * jnp.sum(y * a) + jnp.sum(jnp.log(jnp.diag(c[0]))) + 0.5 * y.shape[0] * LOG2PI

        vg = jax.jit(jax.value_and_grad(nlml))
        hess = jax.jit(jax.jacfwd(jax.jacrev(nlml)))
        record(f"gp_grad {n}", lambda: vg(theta, sq, y))
        record(f"gp_hessian {n}", lambda: hess(theta, sq, y))
        del sq, y
    if not chol_wanted:
        return out
    A0, b0 = (jnp.asarray(a, dtype=jnp.float32) for a in batch_data(args.batch))

    def chol1(A, b):
        c = cho_factor(A, lower=True)
        return cho_solve(c, b), 2 * jnp.sum(jnp.log(jnp.diag(c[0])))

    chol = jax.vmap(chol1)

    def loss(A, b):
        x, ld = chol(A, b)
        return jnp.sum(x) + jnp.sum(ld)

    fwd = jax.jit(chol)
    fwd_bwd = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    record(f"chol {args.batch}", lambda: fwd(A0, b0))
    record(f"chol+grad {args.batch}", lambda: fwd_bwd(A0, b0))
    return out


def run_tapegrad(args):
    exe = os.path.join(ROOT, args.build, "bench", "bench_linalg")
    sizes = "|".join(str(n) for n in args.sizes)
    filt = f"BM_Gp(NlmlGrad|Hessian)/({sizes})/|BM_BatchedCholSolveLogdet(Grad)?/{args.batch}/"
    cmd = [exe, f"--benchmark_filter={filt}", "--benchmark_format=json", f"--benchmark_repetitions={args.runs}",
           "--benchmark_report_aggregates_only=true", "--benchmark_min_time=0.01"]
    env = dict(os.environ)
    if args.device == "cpu":
        env["TG_BENCH_CPU_BIG"] = "1"  # the sizes asked for
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
    names = {"BM_GpNlmlGrad": "gp_grad", "BM_GpHessian": "gp_hessian", "BM_BatchedCholSolveLogdet": "chol",
             "BM_BatchedCholSolveLogdetGrad": "chol+grad"}
    out = {}
    for b in r["benchmarks"]:
        bm, size = b["run_name"].split("/")[:2]
        key = f"{names[bm]} {size}"
        if b.get("error_occurred"):
            out[key] = b.get("error_message", "error")
        elif b.get("aggregate_name") == "median":
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
            out[key] = b["real_time"] * scale
            if "peak_MiB" in b:
                out["peak " + key] = b["peak_MiB"]
    return out, r.get("benchmarks", [{}])[0].get("label", "?")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1024,4096,8192", help="GP point counts")
    p.add_argument("--batch", type=int, default=10000, help="64 x 64 matrices in the batch")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--frameworks", default="tapegrad,torch,jax")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--build", default="build-gpu", help="tapegrad's build directory")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--workloads", default="", help="only these (gp_grad,gp_hessian,chol,chol+grad)")
    p.add_argument("--memory", action="store_true",
                   help="also a table of each workload's peak device memory (MiB); the peers then run one "
                        "workload per process (JAX's peak counts from its process's start)")
    p.add_argument("--profile", action="store_true",
                   help="with --worker torch|jax: one call of each workload bracketed by the CUDA profiler "
                        "start/stop, for ncu --profile-from-start off (scripts/gpu.sh lprofile)")
    args = p.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.workloads = [w for w in args.workloads.split(",") if w]
    if args.worker:
        res = worker_torch(args) if args.worker == "torch" else worker_jax(args)
        print(json.dumps(res))
        return
    labels = {"tapegrad": "tapegrad", "torch": "PyTorch eager", "jax": "JAX jit"}
    fw = args.frameworks.split(",")
    results = {}
    for name in fw:
        try:
            if name == "tapegrad":
                res, dev = run_tapegrad(args)
                print(f"tapegrad on {dev}", flush=True)
            else:
                env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
                jobs = [(args.workloads, args.sizes)]
                if args.memory:  # one (workload, size) per process
                    ws = args.workloads or ["gp_grad", "gp_hessian", "chol", "chol+grad"]
                    jobs = [([w], [n]) for w in ws if w.startswith("gp") for n in args.sizes] + \
                        [([w], args.sizes[:1]) for w in ws if w.startswith("chol")]
                res = {}
                for wl, sizes in jobs:
                    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--sizes",
                           ",".join(map(str, sizes)), "--batch", str(args.batch), "--runs", str(args.runs),
                           "--device", args.device] + (["--workloads", ",".join(wl)] if wl else [])
                    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    if proc.returncode != 0:
                        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed")
                    res.update(json.loads(proc.stdout.strip().splitlines()[-1]))
            results[labels[name]] = res
        except Exception as e:  # report, keep going
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    keys = [f"gp_grad {n}" for n in args.sizes] + [f"gp_hessian {n}" for n in args.sizes] + \
        [f"chol {args.batch}", f"chol+grad {args.batch}"]
    cols = [labels[n] for n in fw if labels[n] in results]
    print(f"\nmedian ms ({args.device}; ratio to tapegrad)")
    print("| workload | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for k in keys:
        base = results.get("tapegrad", {}).get(k)
        cells = []
        for c in cols:
            v = results[c].get(k)
            if isinstance(v, (int, float)):
                ratio = f" ({v / base:.2f}x)" if isinstance(base, (int, float)) and c != "tapegrad" else ""
                cells.append(f"{v:.3f}{ratio}")
            else:
                cells.append(f"failed: {v}" if v else "—")
        print(f"| {k} | " + " | ".join(cells) + " |")
    if args.memory:
        print(f"\npeak device memory of one call, MiB ({args.device}; ratio to tapegrad)")
        print("| workload | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for k in keys:
            base = results.get("tapegrad", {}).get("peak " + k)
            cells = []
            for c in cols:
                v = results[c].get("peak " + k)
                ratio = f" ({v / base:.2f}x)" if isinstance(v, (int, float)) and base and c != "tapegrad" else ""
                cells.append(f"{v:.0f}{ratio}" if isinstance(v, (int, float)) else "—")
            print(f"| {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Issue 49's neural ODE benchmark side by side (bench/odeint_bench.cpp):
f an MLP 2 -> 64 -> 64 -> 2 (tanh), 256 initial states, outputs at 50 times
in [0, 10], float32 (TF32 off); the forward solve and the gradient of
mean(y^2) over every output in f's parameters and y0.

Rows, ms per call (the median of 5 timings of --steps calls):
  tapegrad   bench/odeint_bench --json (rk4 eager and graphed, dopri5 and
             tsit5 by backpropagation and by the adjoint)
  torchdiffeq  rk4 (step_size 0.01: 1000 steps), dopri5 (rtol 1e-5,
             atol 1e-6) by backpropagation and with odeint_adjoint
  jax        rk4 as 1000 steps of lax.scan, jit; jax.experimental.ode.odeint
             (its dopri5 with the adjoint), jit
  diffrax    Dopri5 and Tsit5 (PIDController(rtol 1e-5, atol 1e-6),
             SaveAt(ts)), RecursiveCheckpointAdjoint and BacksolveAdjoint, jit

  odeint_peers.py --build BUILD [--steps 5] [--frameworks tapegrad torchdiffeq jax diffrax] [--json]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

from timing import ms_per_step  # bench/peers/timing.py

BATCH, TIMES, T1, RTOL, ATOL = 256, 50, 10.0, 1e-5, 1e-6


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def tapegrad_rows(build, steps):
    cmd = [f"{build}/bench/odeint_bench", "--json", "--steps", str(steps)]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    rows = []
    for x in r["rows"]:
        rows.append((f"tapegrad {x['solver']}", x["forward_ms"], x["gradient_ms"], x.get("evaluations")))
        if "forward_graphed_ms" in x:
            rows.append((f"tapegrad {x['solver']} graphed", x["forward_graphed_ms"], x["gradient_graphed_ms"], None))
    return rows


def timed(fn, sync, steps):
    """ms_per_step, with one call per timing (3 timings) where a call takes
    over 200 ms (torchdiffeq's rk4 and adjoint: minutes otherwise)."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    if time.perf_counter() - t0 > 0.2:
        return ms_per_step(fn, sync, 1, repeats=3)
    return ms_per_step(fn, sync, steps)


def torch_rows(steps):
    import torch
    import torchdiffeq
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    dev = "cuda"
    net = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 2)).to(dev)

    class F(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net
            self.nfe = 0

        def forward(self, t, y):
            self.nfe += 1
            return self.net(y)

    f = F()
    y0 = torch.randn(BATCH, 2, device=dev, requires_grad=True)
    t = torch.linspace(0, T1, TIMES, device=dev)
    rows = []
    configs = [("rk4", dict(method="rk4", options=dict(step_size=0.01)), False),
               ("dopri5", dict(method="dopri5", rtol=RTOL, atol=ATOL), False),
               ("dopri5 adjoint", dict(method="dopri5", rtol=RTOL, atol=ATOL), True)]
    for name, kw, adjoint in configs:
        solve = torchdiffeq.odeint_adjoint if adjoint else torchdiffeq.odeint

        def fwd():
            with torch.no_grad():
                return solve(f, y0, t, **kw)

        def grad():
            ys = solve(f, y0, t, **kw)
            return torch.autograd.grad((ys * ys).mean(), list(net.parameters()) + [y0])

        for _ in range(2):
            fwd()
            grad()
        f.nfe = 0
        fwd()
        nfe = f.nfe
        rows.append((f"torchdiffeq {name}", timed(fwd, torch.cuda.synchronize, steps),
                     timed(grad, torch.cuda.synchronize, steps), nfe))
    return rows


def jax_mlp():
    import jax
    import jax.numpy as jnp
    key = jax.random.PRNGKey(0)
    sizes = [2, 64, 64, 2]
    params = []
    for k, (i, o) in zip(jax.random.split(key, 3), zip(sizes[:-1], sizes[1:])):
        k1, k2 = jax.random.split(k)
        b = 1 / math.sqrt(i)
        params.append((jax.random.uniform(k1, (i, o), minval=-b, maxval=b), jax.random.uniform(k2, (o,), minval=-b,
                                                                                                maxval=b)))

    def mlp(p, y):
        for l, (w, b) in enumerate(p):
            y = y @ w + b
            if l + 1 < len(p):
                y = jnp.tanh(y)
        return y

    y0 = jax.random.normal(jax.random.PRNGKey(1), (BATCH, 2))
    t = jnp.linspace(0, T1, TIMES)
    return params, mlp, y0, t


def jax_row(name, solve, params, y0, steps):
    """Forward and gradient of mean(y^2) of a jitted solve(p, y0), ms per call."""
    import jax
    import jax.numpy as jnp
    fwd = jax.jit(solve)
    grad = jax.jit(jax.grad(lambda p, y0: jnp.mean(solve(p, y0) ** 2), argnums=(0, 1)))
    out = {}

    def run_f():
        out["f"] = fwd(params, y0)

    def run_g():
        out["g"] = grad(params, y0)

    for _ in range(2):
        run_f()
        run_g()
    return (name, ms_per_step(run_f, lambda: jax.block_until_ready(out["f"]), steps),
            ms_per_step(run_g, lambda: jax.block_until_ready(out["g"]), steps), None)


def jax_rows(steps):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp
    from jax.experimental.ode import odeint as jodeint
    jax.config.update("jax_default_matmul_precision", "highest")
    params, mlp, y0, t = jax_mlp()
    n = 1000  # outputs interpolated linearly onto the 50 times from the 1001 grid points, as torchdiffeq's rk4
    h = T1 / n

    def rk4(p, y0):
        def step(y, _):
            k1 = mlp(p, y)
            k2 = mlp(p, y + h / 2 * k1)
            k3 = mlp(p, y + h / 2 * k2)
            k4 = mlp(p, y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            return y, y
        _, ys = jax.lax.scan(step, y0, None, length=n)
        grid = jnp.concatenate([y0[None], ys], 0)  # [n + 1, B, 2] at k h
        idx = t / h
        lo = jnp.clip(jnp.floor(idx).astype(jnp.int32), 0, n - 1)
        w = (idx - lo)[:, None, None]
        return grid[lo] * (1 - w) + grid[lo + 1] * w

    def adaptive(p, y0):
        return jodeint(lambda y, tt, p: mlp(p, y), y0, t, p, rtol=RTOL, atol=ATOL)

    return [jax_row(f"jax {name}", solve, params, y0, steps)
            for name, solve in (("rk4 (lax.scan)", rk4), ("odeint dopri5 adjoint", adaptive))]


def diffrax_rows(steps):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import diffrax
    import jax
    jax.config.update("jax_default_matmul_precision", "highest")
    params, mlp, y0, t = jax_mlp()
    rows = []
    for sname, solver in (("dopri5", diffrax.Dopri5()), ("tsit5", diffrax.Tsit5())):
        for aname, adjoint in (("checkpointed", diffrax.RecursiveCheckpointAdjoint()),
                               ("backsolve", diffrax.BacksolveAdjoint())):
            def solve(p, y0, solver=solver, adjoint=adjoint):
                sol = diffrax.diffeqsolve(diffrax.ODETerm(lambda tt, y, p: mlp(p, y)), solver, t0=0.0, t1=T1,
                                          dt0=None, y0=y0, args=p, saveat=diffrax.SaveAt(ts=t),
                                          stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL),
                                          adjoint=adjoint, max_steps=100000)
                return sol.ys

            rows.append(jax_row(f"diffrax {sname} {aname}", solve, params, y0, steps))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-gpu")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--frameworks", nargs="+", default=["tapegrad", "torchdiffeq", "jax", "diffrax"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    fns = {"tapegrad": lambda: tapegrad_rows(args.build, args.steps), "torchdiffeq": lambda: torch_rows(args.steps),
           "jax": lambda: jax_rows(args.steps), "diffrax": lambda: diffrax_rows(args.steps)}
    for fw in args.frameworks:
        try:
            rows += fns[fw]()
        except ImportError as e:
            log(f"{fw}: not installed ({e}), skipped")
        except Exception as e:  # a failing peer is reported, not fatal
            log(f"{fw}: failed: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}")
            rows.append((f"{fw} (failed: {type(e).__name__})", None, None, None))
    if args.json:
        print(json.dumps([{"solver": n, "forward_ms": f, "gradient_ms": g, "evaluations": e} for n, f, g, e in rows],
                         indent=2))
        return
    print(f"neural ODE: MLP 2-64-64-2 tanh, {BATCH} states, {TIMES} outputs in [0, {T1:g}], float32 (no TF32)")
    print(f"  {'solver':40s} {'forward ms':>11s} {'gradient ms':>12s} {'f evals':>8s}")
    for n, f, g, e in rows:
        fmt = lambda x, s: format(x if x is not None else float("nan"), s)
        print(f"  {n:40s} {fmt(f, '11.3f')} {fmt(g, '12.3f')} {'' if e is None else e:>8}")


if __name__ == "__main__":
    main()

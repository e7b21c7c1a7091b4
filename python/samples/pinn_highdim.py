#!/usr/bin/env python3
"""A PINN for Poisson's equation in d = 1000 dimensions, its Laplacian by
Hutchinson's stochastic estimator (tapegrad.laplacian(samples=k): k random
Taylor-mode jets per point, a cost that does not grow with d).

    Laplacian(u) = f in the unit ball of R^d,  u = 0 on its sphere,

with the known solution u*(x) = (1 - |x|^2) g(x), g(x) = sum_i c_i sin(x_i)
cos(x_{i+1}) (two-body terms, c ~ N(0, 1)): Laplacian(g) = -2 g, so
f = -2 (1 - |x|^2) g - 4 x . grad g - 2 d g in closed form. The network
u(x) = (1 - |x|^2) MLP(x) meets the boundary condition exactly; the loss is
the mean square of the estimated residual over fresh points drawn uniformly
in the ball, scaled by the mean square of f. Prints the relative L2 error
on held-out points as it falls.

  pinn_highdim.py [--dim 1000] [--samples 16] [--steps 1500] [--batch 64] [--width 128]
                  [--max-error E]   (exit 1 unless the final relative error is below E)
"""
import argparse
import math
import sys
import time

import numpy as np

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.optim as optim


def ball(n, d, rng):
    """n points uniform in the unit ball of R^d (float32)."""
    v = rng.standard_normal((n, d))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    r = rng.random((n, 1)) ** (1.0 / d)
    return (v * r).astype(np.float32)


class Exact:
    """u* and f = Laplacian(u*) in closed form (NumPy, float64)."""

    def __init__(self, d, rng):
        self.c = rng.standard_normal(d - 1)

    def g_and_grad(self, x):
        s, co = np.sin(x), np.cos(x)
        g = (self.c * s[:, :-1] * co[:, 1:]).sum(1)
        grad = np.zeros_like(x)
        grad[:, :-1] += self.c * co[:, :-1] * co[:, 1:]
        grad[:, 1:] -= self.c * s[:, :-1] * s[:, 1:]
        return g, grad

    def u(self, x):
        x = x.astype(np.float64)
        return (1 - (x * x).sum(1)) * self.g_and_grad(x)[0]

    def f(self, x):
        x = x.astype(np.float64)
        g, grad = self.g_and_grad(x)
        r2 = (x * x).sum(1)
        return -2 * (1 - r2) * g - 4 * (x * grad).sum(1) - 2 * x.shape[1] * g


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=16, help="random directions per point")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-error", type=float, default=None)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    tg.manual_seed(0)
    d = a.dim
    exact = Exact(d, rng)
    test_x = ball(2000, d, rng)
    test_u = exact.u(test_x)
    mlp = nn.Sequential(nn.Linear(d, a.width), nn.Tanh(), nn.Linear(a.width, a.width), nn.Tanh(),
                        nn.Linear(a.width, 1))

    def u(x):  # [B, d] -> [B, 1]; zero on the sphere
        return (1.0 - (x * x).sum(1, keepdim=True)) * mlp(x)

    opt = optim.Adam(mlp.parameters(), lr=a.lr)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.steps, eta_min=a.lr / 20)

    def error():
        with tg.no_grad():
            got = u(tg.tensor(test_x)).numpy()[:, 0].astype(np.float64)
        return float(np.linalg.norm(got - test_u) / np.linalg.norm(test_u))

    print(f"Poisson in d = {d}, Hutchinson Laplacian with {a.samples} Rademacher directions per point, "
          f"batch {a.batch}, MLP {d}-{a.width}-{a.width}-1 (tanh)")
    print(f"  step {0:5d}  relative L2 error {error():.4f}")
    start = time.perf_counter()
    for step in range(1, a.steps + 1):
        xb = ball(a.batch, d, rng)
        fb = exact.f(xb)
        x = tg.tensor(xb)
        f = tg.tensor(fb.astype(np.float32).reshape(-1, 1))
        opt.zero_grad()
        lap = tg.laplacian(u, x, create_graph=True, samples=a.samples)
        loss = ((lap - f) ** 2).mean() / float((fb * fb).mean())
        loss.backward()
        opt.step()
        sched.step()
        if step % max(1, a.steps // 6) == 0 or step == a.steps:
            print(f"  step {step:5d}  loss {float(loss):.4e}  relative L2 error {error():.4f}  "
                  f"({(time.perf_counter() - start) / step * 1e3:.1f} ms/step)")
    final = error()
    print(f"final relative L2 error {final:.4f}")
    if a.max_error is not None and not final < a.max_error:
        print(f"FAILED: the error {final:.4f} is not below {a.max_error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

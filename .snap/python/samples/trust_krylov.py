"""tapegrad's Hessian-vector products inside scipy.optimize.minimize
(method="trust-krylov") on a problem of 10^5 variables, a strictly convex
energy with a nearest-neighbour coupling (a discrete elastic chain on a
nonlinear substrate):

    f(x) = sum_i 1/2 (x_{i+1} - x_i)^2 + sum_i cosh(x_i) - b . x,

with b chosen so that x* = sin(3 t), t in [0, 2 pi], is the minimizer.
SciPy's iterates are NumPy arrays; tapegrad views them without copies
(from_dlpack) and returns f, its gradient and H v (forward over reverse,
never forming H). Exits non-zero unless it converges to x*.

    PYTHONPATH=build/python python3 python/samples/trust_krylov.py [--n 100000]
"""
import argparse
import sys
import time

import numpy as np
from scipy.optimize import minimize

import tapegrad as tg


def energy_terms(x):
    head, tail = x.narrow(0, 0, x.shape[0] - 1), x.narrow(0, 1, x.shape[0] - 1)
    return 0.5 * ((tail - head) ** 2.0).sum() + (0.5 * (tg.exp(x) + tg.exp(-x))).sum()


def make_energy(b):
    return lambda x: energy_terms(x) - (x * b).sum()


def as_tensor(x):
    return tg.from_dlpack(np.ascontiguousarray(x, dtype=np.float64))  # no copy


def fun_and_grad(energy):
    def f(x):
        t = as_tensor(x).detach().requires_grad_()
        e = energy(t)
        (g,) = tg.grad(e, t)
        return e.item(), g.numpy()
    return f


def hessp(energy):
    def hv(x, v):
        return tg.hvp(energy, as_tensor(x), as_tensor(v))[1].numpy()
    return hv


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    a = p.parse_args()
    x_star = np.sin(3 * np.linspace(0, 2 * np.pi, a.n))
    xs = as_tensor(x_star).detach().requires_grad_()
    (b,) = tg.grad(energy_terms(xs), xs)  # b = grad of the rest at x*: x* is the minimizer
    energy = make_energy(b.detach())
    t0 = time.perf_counter()
    r = minimize(fun_and_grad(energy), np.zeros(a.n), jac=True, hessp=hessp(energy), method="trust-krylov",
                 options={"gtol": 1e-5})  # the 2-norm of a gradient of 10^5 entries
    dt = time.perf_counter() - t0
    err = np.abs(r.x - x_star).max()
    print(f"trust-krylov, n = {a.n}: {r.nit} iterations, {r.nfev} f and gradient, {r.nhev} Hv, "
          f"max |x - x*| = {err:.2e}, {dt:.2f} s ({r.message})")
    return 0 if r.success and err < 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())

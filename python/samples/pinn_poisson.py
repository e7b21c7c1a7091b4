"""A physics-informed network for Poisson's equation, written as PyTorch users
write one, with tapegrad.nn and tapegrad.optim:

    -(u_xx + u_yy) = f on (0, 1)^2, u = 0 on the boundary,
    f = 2 pi^2 sin(pi x) sin(pi y), so u* = sin(pi x) sin(pi y).

An MLP 2 -> 32 -> 32 -> 1 (tanh) takes the points; the loss is the mean square
of the residual (u_xx, u_yy by autograd with create_graph, so the step
differentiates second derivatives) plus 100 times the boundary misfit; Adam steps it.
Prints the loss and the relative L2 error against u* as they fall, and exits
non-zero unless the error falls below --target. (The C++ sample is
samples/pinn_poisson.cpp.)

    PYTHONPATH=build/python python3 python/samples/pinn_poisson.py [--steps 1000] [--device cuda]
"""
import argparse
import math
import sys
import time

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.optim as optim


class PINN(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                                 nn.Linear(width, 1))

    def forward(self, xy):
        return self.net(xy)


def laplacian(model, xy):
    """u and u_xx + u_yy at the points xy [N, 2] (the graph kept for the step)."""
    u = model(xy)
    (g,) = tg.grad(u.sum(), xy, create_graph=True)
    (gx,) = tg.grad(g[:, 0].sum(), xy, create_graph=True)
    (gy,) = tg.grad(g[:, 1].sum(), xy, create_graph=True)
    return u, gx[:, 0] + gy[:, 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--points", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--target", type=float, default=0.02, help="relative L2 error to reach")
    args = ap.parse_args()
    tg.manual_seed(0)
    dev = args.device
    model = PINN().to(dev)
    opt = optim.Adam(model.parameters(), lr=3e-3)
    xy = tg.rand(args.points, 2, device=dev).requires_grad_(True)
    f = 2 * math.pi**2 * tg.sin(xy.detach()[:, 0] * math.pi) * tg.sin(xy.detach()[:, 1] * math.pi)
    side = tg.rand(args.points // 4, 1, device=dev)
    zero, one = tg.zeros(args.points // 4, 1, device=dev), tg.ones(args.points // 4, 1, device=dev)
    boundary = tg.cat([tg.cat([side, zero], 1), tg.cat([side, one], 1), tg.cat([zero, side], 1),
                       tg.cat([one, side], 1)], 0)
    g = tg.rand(1024, 2, device=dev)  # where the error is measured
    exact = tg.sin(g[:, 0] * math.pi) * tg.sin(g[:, 1] * math.pi)

    def error():
        with tg.no_grad():
            u = model(g)[:, 0]
            return math.sqrt(((u - exact) ** 2.0).sum().item() / (exact**2.0).sum().item())

    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        opt.zero_grad()
        _, lap = laplacian(model, xy)
        loss = ((lap + f) ** 2.0).mean() + 100.0 * (model(boundary) ** 2.0).mean()
        loss.backward()
        opt.step()
        if step % max(1, args.steps // 5) == 0 or step == 1:
            print("step %5d  loss %.4e  relative L2 error %.4f" % (step, loss.item(), error()), flush=True)
    ms = 1e3 * (time.perf_counter() - start) / args.steps
    err = error()
    print("%.3f ms per step (eager, %s); final relative L2 error %.4f (target %.4f)" % (ms, dev, err, args.target))
    return 0 if err < args.target else 1


if __name__ == "__main__":
    sys.exit(main())

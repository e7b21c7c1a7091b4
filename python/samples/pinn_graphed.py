"""The Poisson PINN of samples/pinn_graphed.cpp written in Python with
tapegrad.nn and tapegrad.optim, its whole training step in one CUDA graph:

    -(u_xx + u_yy) = f on (0, 1)^2, u = 0 on the boundary,
    f = 2 pi^2 sin(pi x) sin(pi y), so u* = sin(pi x) sin(pi y);
    u = x (1 - x) y (1 - y) N(x, y), N an MLP 2 -> 32 -> 32 -> 1 (tanh), float64.

Each step draws 256 fresh collocation points, takes u_xx and u_yy by autograd
with create_graph (so the step differentiates second derivatives), steps a
capturable Adam, and zeroes the static .grad: three warm-up steps on a side
stream, one captured with `with tapegrad.cuda.graph(g):`, the rest replays.
The same training also runs eagerly from the same seed; the two must end with
bitwise equal parameters (the graph's random draws advance on every replay as
the eager ones do). Prints the loss, the relative L2 error on a 64 x 64 grid,
and the milliseconds per replayed step (the C++ sample prints the same line,
for the comparison of docs/PERFORMANCE.md). Exits non-zero if the error is
above --target or the trainings differ. Without a GPU it trains eagerly on
the CPU and says so.

    PYTHONPATH=build/python python3 python/samples/pinn_graphed.py [--steps 1500]
"""
import argparse
import math
import sys
import time

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.optim as optim

POINTS = 256


def exact(xy):
    return tg.sin(xy[:, 0] * math.pi) * tg.sin(xy[:, 1] * math.pi)


class Pinn:
    def __init__(self, dev):
        tg.manual_seed(11)
        self.dev = dev
        self.net = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                                 nn.Linear(32, 1)).to(tg.float64).to(dev)
        # capturable: the optimizer state made up front, the parameters static
        self.adam = optim.Adam(self.net.parameters(), lr=5e-3, capturable=dev.startswith("cuda"))

    def u(self, xy):  # the boundary condition holds exactly
        x, y = xy[:, 0], xy[:, 1]
        return x * (1.0 - x) * y * (1.0 - y) * self.net(xy)[:, 0]

    def loss(self, points):
        """Mean squared residual of -(u_xx + u_yy) - f at the points."""
        xy = points.detach().requires_grad_(True)
        (g,) = tg.grad(self.u(xy).sum(), xy, create_graph=True)
        (gx,) = tg.grad(g[:, 0].sum(), xy, retain_graph=True, create_graph=True)
        (gy,) = tg.grad(g[:, 1].sum(), xy, retain_graph=True, create_graph=True)
        return tg.square(-(gx[:, 0] + gy[:, 1]) - exact(xy.detach()) * (2 * math.pi**2)).mean()

    def step(self):
        """One Adam step on fresh random points; the loss before it."""
        self.adam.zero_grad(set_to_none=False)  # the graph's .grad stays where it was captured
        loss = self.loss(tg.rand(POINTS, 2, dtype=tg.float64, device=self.dev))
        loss.backward()
        self.adam.step()
        return loss.detach()

    def error(self):
        t = tg.arange(64, dtype=tg.float64) / 63.0
        grid = tg.stack([t.view(64, 1).expand(64, 64).reshape(-1), t.view(1, 64).expand(64, 64).reshape(-1)],
                        1).to(self.dev)
        with tg.no_grad():
            ref = exact(grid)
            return math.sqrt(tg.square(self.u(grid) - ref).sum().item() / tg.square(ref).sum().item())


def train(p, steps, graphed, what):
    """Adam for `steps` steps; graphed: 3 warm-up steps on a side stream,
    one captured, the rest replays. Returns ms per replayed step (graphed)."""
    tg.manual_seed(12)  # the collocation points: the same draws for both
    t0 = time.perf_counter()
    per_replay = None

    def report(it, loss):
        if it % 500 == 0 or it == steps - 1:
            print("  %s step %4d  residual loss %.4e" % (what, it, loss.item()), flush=True)

    if not graphed:
        for it in range(steps):
            report(it, p.step())
    else:
        warmup = 3
        side = tg.cuda.Stream()
        side.wait_stream(tg.cuda.current_stream())
        with tg.cuda.stream(side):
            for it in range(warmup):
                report(it, p.step())
        tg.cuda.current_stream().wait_stream(side)
        graph = tg.cuda.CUDAGraph()
        with tg.cuda.graph(graph):
            loss = p.step()
        tg.cuda.synchronize()
        r0 = time.perf_counter()
        for it in range(warmup, steps):
            graph.replay()
            if it % 500 == 0 or it == steps - 1:
                report(it, loss)
        tg.cuda.synchronize()
        per_replay = 1e3 * (time.perf_counter() - r0) / max(1, steps - warmup)
    if p.dev.startswith("cuda"):
        tg.cuda.synchronize()
    print("  %s: %d Adam steps in %.2f s, relative L2 error %.3e" % (what, steps, time.perf_counter() - t0,
                                                                     p.error()))
    if per_replay is not None:
        print("  graphed: %.4f ms per replayed step" % per_replay)
    return per_replay


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=None, help="Adam steps (1500 on the GPU, 600 on the CPU)")
    ap.add_argument("--target", type=float, default=1e-2, help="relative L2 error to reach")
    args = ap.parse_args()
    gpu = tg.cuda.is_available()
    steps = args.steps or (1500 if gpu else 600)
    dev = "cuda" if gpu else "cpu"
    print("Poisson PINN in Python, MLP 2 -> 32 -> 32 -> 1 (tanh), %d points per step, float64, on %s"
          % (POINTS, "the GPU" if gpu else "the CPU (no GPU here: eager only)"))
    graphed = Pinn(dev)
    same = True
    if gpu:
        eager = Pinn(dev)
        train(eager, steps, False, "eager  ")
        train(graphed, steps, True, "graphed")
        same = all(tg.equal(a, b) for a, b in zip(eager.net.parameters(), graphed.net.parameters()))
        print("graphed and eager parameters bitwise equal: %s" % ("yes" if same else "NO"))
    else:
        train(graphed, steps, False, "eager")
    err = graphed.error()
    print("final relative L2 error %.3e (target %.1e)" % (err, args.target))
    return 0 if err < args.target and same else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch's optimizer steps over 100 float32 parameters of 64 x 64
(bench_cuda's BM_CudaAdamStep100Params, BM_CudaAdaptiveStep100Params and
BM_CudaClipGradNorm100Params run tapegrad's): Adam foreach (PyTorch's
default on CUDA) and fused; RMSprop, Adagrad, Adamax, NAdam and RAdam
foreach (capturable where PyTorch has it); clip_grad_norm_ foreach. Each
eager (step + synchronize, microseconds per step, median of 5 timings of 200
steps) and captured with torch.cuda.graph (the kernel nodes of one captured
step: its launches per step; "-" where PyTorch cannot capture it).

    python3 bench/peers/optim_peers.py
"""
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import ms_per_step  # noqa: E402  (bench/peers/timing.py: median of 5 timings)


def timed(make):
    torch.manual_seed(0)
    ps = [torch.randn(64, 64, device="cuda", requires_grad=True) for _ in range(100)]
    for p in ps:
        p.grad = torch.randn_like(p)
    step = make(ps)
    step()

    def synced(f):  # one step, then wait for it: us per step
        return 1e3 * ms_per_step(lambda: (f(), torch.cuda.synchronize()), torch.cuda.synchronize, 200)

    eager_us = synced(step)
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph(keep_graph=True)
        g.enable_debug_mode()
        with torch.cuda.graph(g):
            step()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "g.dot")
            g.debug_dump(path)
            nodes = sum(1 for line in open(path) if "KERNEL" in line or "MEMSET" in line or "MEMCPY" in line)
        g.instantiate()
        return f"{eager_us:.1f}", f"{synced(g.replay):.1f}", str(nodes)
    except Exception:  # this optimizer cannot be captured in PyTorch
        torch.cuda.synchronize()
        return f"{eager_us:.1f}", "-", "-"


def optimizer(cls, **kw):
    def make(ps):
        try:
            opt = cls(ps, lr=1e-3, capturable=True, **kw)
        except TypeError:  # no capturable option
            opt = cls(ps, lr=1e-3, **kw)
        return opt.step
    return make


def clip(ps):
    return lambda: torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True)


print("| PyTorch (100 x [64, 64] f32) | eager us/step | graphed us/step | launches per step |")
print("|---|---:|---:|---:|")
rows = [("Adam foreach", optimizer(torch.optim.Adam, foreach=True)),
        ("Adam fused", optimizer(torch.optim.Adam, fused=True))]
for name in ("RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"):
    rows.append((f"{name} foreach", optimizer(getattr(torch.optim, name), foreach=True)))
rows.append(("clip_grad_norm_ foreach", clip))
for name, make in rows:
    e, g, n = timed(make)
    print(f"| {name} | {e} | {g} | {n} |")

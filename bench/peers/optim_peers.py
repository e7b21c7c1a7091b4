#!/usr/bin/env python3
"""PyTorch's Adam step over 100 float32 parameters of 64 x 64 (bench_cuda's
BM_CudaAdamStep100Params runs tapegrad's): foreach (PyTorch's default on
CUDA) and fused, each eager (step + synchronize, microseconds per step,
median of 5 timings of 200 steps) and captured with torch.cuda.graph (the
kernel nodes of one captured step: its launches per step).

    python3 bench/peers/optim_peers.py
"""
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pinn_peers import ms_per_step  # noqa: E402  (median of 5 timings)


def run(kind):
    torch.manual_seed(0)
    ps = [torch.randn(64, 64, device="cuda", requires_grad=True) for _ in range(100)]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = torch.optim.Adam(ps, lr=1e-3, capturable=True, foreach=kind == "foreach", fused=kind == "fused")
    opt.step()

    def synced(step):  # one step, then wait for it: us per step
        return 1e3 * ms_per_step(lambda: (step(), torch.cuda.synchronize()), torch.cuda.synchronize, 200)

    eager_us = synced(opt.step)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    g.enable_debug_mode()
    with torch.cuda.graph(g):
        opt.step()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "g.dot")
        g.debug_dump(path)
        nodes = sum(1 for line in open(path) if "KERNEL" in line or "MEMSET" in line or "MEMCPY" in line)
    g.instantiate()
    return eager_us, synced(g.replay), nodes


print("| PyTorch Adam (100 x [64, 64] f32) | eager us/step | graphed us/step | launches per step |")
print("|---|---:|---:|---:|")
for kind in ("foreach", "fused"):
    e, g, n = run(kind)
    print(f"| {kind} | {e:.1f} | {g:.1f} | {n} |")

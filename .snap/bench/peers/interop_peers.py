#!/usr/bin/env python3
"""The cost of crossing the boundary between tapegrad and PyTorch (on the GPU
machine, where PyTorch is installed):

    PYTHONPATH=build-gpu/python python3 bench/peers/interop_peers.py [--reps 2000]

- exchange: a 4-byte and a 256 MiB tensor handed over by DLPack both ways
  (tapegrad.from_dlpack(torch_tensor), torch.from_dlpack(tapegrad_tensor)),
  on the CPU and on CUDA: microseconds per exchange (median), which must not
  grow with the size (no copy), and the data pointers compared;
- a Python loop calling one small op (x + y on 16 floats): microseconds per
  call, tapegrad against PyTorch's own.
Prints markdown tables.
"""
import argparse
import statistics
import time

import torch

import tapegrad as tg


def per_call_us(fn, reps, sync=None):
    for _ in range(20):
        fn()
    times = []
    for _ in range(5):
        if sync:
            sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        if sync:
            sync()
        times.append((time.perf_counter() - t0) * 1e6 / reps)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=2000)
    a = p.parse_args()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tg.cuda.is_available() else [])
    print("| device | size | torch → tapegrad µs | tapegrad → torch µs | same pointer |")
    print("|---|---:|---:|---:|---|")
    for dev in devices:
        sync = torch.cuda.synchronize if dev == "cuda" else None
        for nbytes in (4, 256 << 20):
            t = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
            g = tg.from_dlpack(t)
            same = g.data_ptr() == t.data_ptr() and torch.from_dlpack(g).data_ptr() == t.data_ptr()
            into = per_call_us(lambda: tg.from_dlpack(t), a.reps, sync)
            out = per_call_us(lambda: torch.from_dlpack(g), a.reps, sync)
            size = "4 B" if nbytes == 4 else "256 MiB"
            print(f"| {dev} | {size} | {into:.2f} | {out:.2f} | {same} |")
    print()
    print("| device | tapegrad x + y µs/call | PyTorch x + y µs/call | ratio |")
    print("|---|---:|---:|---:|")
    for dev in devices:
        sync = torch.cuda.synchronize if dev == "cuda" else None
        tx, ty = torch.ones(16, device=dev), torch.ones(16, device=dev)
        gx, gy = tg.ones(16, device=dev), tg.ones(16, device=dev)
        ours = per_call_us(lambda: gx + gy, a.reps, sync)
        theirs = per_call_us(lambda: tx + ty, a.reps, sync)
        print(f"| {dev} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f}x |")


if __name__ == "__main__":
    main()

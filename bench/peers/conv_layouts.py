#!/usr/bin/env python3
"""cuDNN's float32 (no TF32) convolutions in NCHW against NHWC, as PyTorch
calls them (cudnn.benchmark on), for the U-Net step's 3 x 3 shapes
(bench/unet_step.cpp, batch 16): the forward, the input gradient and the
weight gradient, each timed alone, and the NCHW <-> NHWC copy of the same
activation. XLA puts float32 2-D convolutions in NHWC on Hopper and later;
this says what that layout is worth per call.

  conv_layouts.py [--grid 128] [--batch 16] [--repeats 50]
"""
import argparse

import torch


def timed(fn, repeats):
    for _ in range(3):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / repeats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=50)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    g = a.grid
    # (c_in, c_out, hw) of the U-Net's 3 x 3 convolutions
    shapes = [(3, 32, g), (32, 32, g), (32, 64, g // 2), (64, 64, g // 2), (64, 128, g // 4), (128, 128, g // 4),
              (128, 256, g // 8), (256, 256, g // 8), (384, 128, g // 4), (192, 64, g // 2), (96, 32, g)]
    print(f"{'shape':>22} | {'fwd NCHW':>9} {'NHWC':>7} | {'dgrad NCHW':>10} {'NHWC':>7} | "
          f"{'wgrad NCHW':>10} {'NHWC':>7} | {'copy x':>7}")
    tot = {"nchw": 0.0, "nhwc": 0.0, "copy": 0.0}
    for ci, co, hw in shapes:
        row = {}
        for fmt in ("nchw", "nhwc"):
            mf = torch.channels_last if fmt == "nhwc" else torch.contiguous_format
            x = torch.randn(a.batch, ci, hw, hw, device="cuda").contiguous(memory_format=mf)
            w = torch.randn(co, ci, 3, 3, device="cuda").contiguous(memory_format=mf)
            y = torch.nn.functional.conv2d(x, w, padding=1)
            gy = torch.randn_like(y).contiguous(memory_format=mf)

            def bwd(mask):
                return lambda: torch.ops.aten.convolution_backward(gy, x, w, None, [1, 1], [1, 1], [1, 1], False,
                                                                   [0, 0], 1, mask)

            row[fmt] = (timed(lambda: torch.nn.functional.conv2d(x, w, padding=1), a.repeats),
                        timed(bwd([True, False, False]), a.repeats), timed(bwd([False, True, False]), a.repeats))
            tot[fmt] += sum(row[fmt])
        x = torch.randn(a.batch, ci, hw, hw, device="cuda")
        copy = timed(lambda: x.contiguous(memory_format=torch.channels_last), a.repeats)
        tot["copy"] += copy
        n, h = row["nchw"], row["nhwc"]
        print(f"{str((a.batch, ci, co, hw)):>22} | {n[0]:9.3f} {h[0]:7.3f} | {n[1]:10.3f} {h[1]:7.3f} | "
              f"{n[2]:10.3f} {h[2]:7.3f} | {copy:7.3f}")
    print(f"sum of the three kinds over the shapes: NCHW {tot['nchw']:.3f} ms, NHWC {tot['nhwc']:.3f} ms; "
          f"one NCHW->NHWC copy of each input {tot['copy']:.3f} ms")


if __name__ == "__main__":
    main()

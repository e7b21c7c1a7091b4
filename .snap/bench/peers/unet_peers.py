#!/usr/bin/env python3
"""The physics-informed U-Net training step (bench/unet_step.cpp) side by
side: tapegrad eager and graphed (uxx, uyy by double backward as the peers
take them, and by forward over reverse), PyTorch eager, PyTorch with the
whole step in torch.cuda.graph, and JAX jit, on one GPU, float32 with TF32
off, batch 16.

The model: input [xc, yc, a] (3 channels, [B, 3, G, G]); 4 levels of 32, 64,
128, 256 channels, each block conv3x3 -> GroupNorm(8) -> GELU (erf) -> conv3x3
-> GroupNorm(8) -> GELU; 2 x 2 average pooling down; bilinear x2 upsampling
(align_corners=False) up, concatenated [upsampled, skip]; a 1 x 1 head to u.
The loss: mean((u - u_data)^2) + mean((uxx + uyy + f)^2), where ux, uy =
d(sum u)/d(xc, yc) (one backward, create_graph), uxx = d(sum ux)/d xc and
uyy = d(sum uy)/d yc (two more backwards, create_graph); then the loss's
gradients into every parameter and an Adam step (lr 1e-3). Prints ms per
step and peak device memory: the most allocated at once over the timed steps,
for the graphed rows over the step's capture (a replay allocates nothing),
and for JAX the device's peak since the process began.

--conv (run after the step table unless --no-conv; alone with --conv): one
3 x 3 convolution (padding 1, no bias) as PyTorch calls cuDNN against
tapegrad's: forward, backward (input and weight gradients) and double
backward (gradients of sum(gx * v) into x and w, gx the input gradient taken
with create_graph), with the ratio torch ms / tapegrad ms.

  unet_peers.py --build BUILD [--grids 64 128] [--steps 20] [--frameworks ...]
                [--conv | --no-conv] [--json]
"""
import argparse
import gc
import json
import math
import os
import subprocess
import sys

from timing import cuda_profiler, ms_per_step  # bench/peers/timing.py

BATCH, LR, GROUPS, EPS = 16, 1e-3, 8, 1e-5
ENC = [(3, 32), (32, 64), (64, 128), (128, 256)]
DEC = [(256 + 128, 128), (128 + 64, 64), (64 + 32, 32)]
CONV_SHAPES = [(16, 64, 64), (16, 32, 128)]  # (n, c, hw): x [n, c, hw, hw], w [c, c, 3, 3]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def err(e):
    msg = (getattr(e, "stderr", None) or str(e) or "").strip().splitlines()
    return f"{type(e).__name__}: {msg[-1][:300] if msg else ''}"


def fields(xp, grid, batch=BATCH):
    """xc, yc, a, u_data, f as [B, 1, G, G] float32 (xp: torch or jax.numpy):
    x = j / (G - 1) along the last (width) axis, y = i / (G - 1) along the
    height axis, a = 1 + 0.5 sin(2 pi x + phi_b) sin(2 pi y), phi_b = 2 pi b / B."""
    r = xp.arange(grid, dtype=xp.float32) / (grid - 1)
    shape = (batch, 1, grid, grid)
    x = xp.broadcast_to(r.reshape(1, 1, 1, grid), shape)
    y = xp.broadcast_to(r.reshape(1, 1, grid, 1), shape)
    phi = (2 * math.pi / batch) * xp.arange(batch, dtype=xp.float32).reshape(batch, 1, 1, 1)
    a = 1 + 0.5 * xp.sin(2 * math.pi * x + phi) * xp.sin(2 * math.pi * y)
    s = xp.sin(math.pi * x) * xp.sin(math.pi * y)
    return x, y, a, s, (2 * math.pi ** 2) * s


def tapegrad_rows(build, grid, steps):
    """Both of unet_step's ways to uxx, uyy: rev (two more backward passes,
    as the peers here) and fwd (forward over reverse: one backward pass
    carrying the two directions as a batched tangent)."""
    rows = []
    for mode, name in (("rev", "tapegrad"), ("fwd", "tapegrad fwd-over-rev")):
        cmd = [f"{build}/bench/unet_step", "--grid", str(grid), "--steps", str(steps), "--mode", mode, "--json"]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        rows += [(f"{name} eager", r.get("eager_ms"), r.get("eager_peak_mib")),
                 (f"{name} graphed", r.get("graphed_ms"), r.get("graphed_peak_mib"))]
    return rows


# ---- PyTorch ----------------------------------------------------------------------
def torch_setup(cudnn_benchmark):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = cudnn_benchmark
    return torch


def torch_row(torch, mode, grid, steps):
    import torch.nn as nn
    import torch.nn.functional as F
    dev = "cuda"

    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(GROUPS, cout, eps=EPS), nn.GELU(),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.GroupNorm(GROUPS, cout, eps=EPS), nn.GELU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.ModuleList([block(i, o) for i, o in ENC])
            self.dec = nn.ModuleList([block(i, o) for i, o in DEC])
            self.head = nn.Conv2d(32, 1, 1)

        def forward(self, h):
            skips = []
            for l, blk in enumerate(self.enc):
                h = blk(h if l == 0 else F.avg_pool2d(h, 2))
                skips.append(h)
            for blk, skip in zip(self.dec, reversed(skips[:-1])):
                up = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)
                h = blk(torch.cat([up, skip], 1))
            return self.head(h)

    torch.manual_seed(0)
    model = UNet().to(dev)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=LR, capturable=(mode == "torch_graph"))
    x, y, a, u_data, f = (t.to(dev).contiguous() for t in fields(torch, grid))
    xc, yc = x.clone().requires_grad_(), y.clone().requires_grad_()

    def step():
        opt.zero_grad(set_to_none=False)
        u = model(torch.cat([xc, yc, a], 1))
        ux, uy = torch.autograd.grad(u.sum(), [xc, yc], create_graph=True)
        uxx, = torch.autograd.grad(ux.sum(), xc, create_graph=True)
        uyy, = torch.autograd.grad(uy.sum(), yc, create_graph=True)
        res = uxx + uyy + f
        loss = ((u - u_data) ** 2).mean() + (res ** 2).mean()
        loss.backward(inputs=params)  # not into xc, yc
        opt.step()
        return loss

    fn = step
    if mode == "torch_graph":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        with torch.cuda.graph(g):
            step()
        peak = torch.cuda.max_memory_allocated()  # the captured step's peak
        fn = g.replay
    else:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    ms = ms_per_step(fn, torch.cuda.synchronize, steps)
    if mode != "torch_graph":
        peak = torch.cuda.max_memory_allocated()
    return ({"torch": "torch eager", "torch_graph": "torch graph"}[mode], ms, peak / 2**20)


# ---- JAX ---------------------------------------------------------------------------
def jax_rows(grid, steps, profile=False):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with PyTorch's rows
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_default_matmul_precision", "highest")
    HI = jax.lax.Precision.HIGHEST

    def conv_init(key, cin, cout, k):  # PyTorch's Conv2d default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        k1, k2 = jax.random.split(key)
        bound = 1 / math.sqrt(cin * k * k)
        return {"w": jax.random.uniform(k1, (cout, cin, k, k), minval=-bound, maxval=bound),
                "b": jax.random.uniform(k2, (cout,), minval=-bound, maxval=bound)}

    def block_init(key, cin, cout):
        k1, k2 = jax.random.split(key)
        gn = {"w": jnp.ones((cout,)), "b": jnp.zeros((cout,))}
        return {"c1": conv_init(k1, cin, cout, 3), "g1": gn, "c2": conv_init(k2, cout, cout, 3), "g2": dict(gn)}

    keys = jax.random.split(jax.random.PRNGKey(0), len(ENC) + len(DEC) + 1)
    params = {"enc": [block_init(k, i, o) for k, (i, o) in zip(keys, ENC)],
              "dec": [block_init(k, i, o) for k, (i, o) in zip(keys[len(ENC):], DEC)],
              "head": conv_init(keys[-1], 32, 1, 1)}

    def conv(p, x):
        k = p["w"].shape[-1]
        y = jax.lax.conv_general_dilated(x, p["w"], (1, 1), [(k // 2, k // 2)] * 2,
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=HI)
        return y + p["b"][None, :, None, None]

    def group_norm(p, x):
        b, c, h, w = x.shape
        xg = x.reshape(b, GROUPS, c // GROUPS, h, w)
        mu = xg.mean(axis=(2, 3, 4), keepdims=True)
        var = ((xg - mu) ** 2).mean(axis=(2, 3, 4), keepdims=True)
        xg = (xg - mu) * jax.lax.rsqrt(var + EPS)
        return xg.reshape(b, c, h, w) * p["w"][None, :, None, None] + p["b"][None, :, None, None]

    def block(p, x):
        x = jax.nn.gelu(group_norm(p["g1"], conv(p["c1"], x)), approximate=False)
        return jax.nn.gelu(group_norm(p["g2"], conv(p["c2"], x)), approximate=False)

    def pool(x):
        b, c, h, w = x.shape
        return x.reshape(b, c, h // 2, 2, w // 2, 2).mean(axis=(3, 5))

    def up2(x):  # F.interpolate(scale_factor=2, mode="bilinear", align_corners=False), separably
        for ax in (2, 3):
            n = x.shape[ax]
            prev = jnp.concatenate([jax.lax.slice_in_dim(x, 0, 1, axis=ax),
                                    jax.lax.slice_in_dim(x, 0, n - 1, axis=ax)], ax)  # x[max(k-1, 0)]
            nxt = jnp.concatenate([jax.lax.slice_in_dim(x, 1, n, axis=ax),
                                   jax.lax.slice_in_dim(x, n - 1, n, axis=ax)], ax)  # x[min(k+1, n-1)]
            out = jnp.stack([0.75 * x + 0.25 * prev, 0.75 * x + 0.25 * nxt], ax + 1)  # even, odd outputs
            shape = list(x.shape)
            shape[ax] = 2 * n
            x = out.reshape(shape)
        return x

    def unet(p, h):
        skips = []
        for l, bp in enumerate(p["enc"]):
            h = block(bp, h if l == 0 else pool(h))
            skips.append(h)
        for bp, skip in zip(p["dec"], reversed(skips[:-1])):
            h = block(bp, jnp.concatenate([up2(h), skip], 1))
        return conv(p["head"], h)

    def loss_fn(p, xc, yc, a, u_data, f):
        def first(xc_, yc_):  # u and its first backward: ux, uy = d(sum u)/d(xc, yc)
            u, vjp = jax.vjp(lambda xx, yy: unet(p, jnp.concatenate([xx, yy, a], 1)), xc_, yc_)
            ux, uy = vjp(jnp.ones_like(u))
            return u, ux, uy

        (u, ux, uy), vjp2 = jax.vjp(first, xc, yc)
        zero, one = jnp.zeros_like(u), jnp.ones_like(u)
        uxx = vjp2((zero, one, zero))[0]  # d(sum ux)/d xc
        uyy = vjp2((zero, zero, one))[1]  # d(sum uy)/d yc
        res = uxx + uyy + f
        return jnp.mean((u - u_data) ** 2) + jnp.mean(res ** 2)

    b1, b2, eps = 0.9, 0.999, 1e-8

    @jax.jit
    def step(p, m, v, t, xc, yc, a, u_data, f):
        loss, g = jax.value_and_grad(loss_fn)(p, xc, yc, a, u_data, f)
        t = t + 1
        m = jax.tree_util.tree_map(lambda mq, gq: b1 * mq + (1 - b1) * gq, m, g)
        v = jax.tree_util.tree_map(lambda vq, gq: b2 * vq + (1 - b2) * gq * gq, v, g)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree_util.tree_map(lambda q, mq, vq: q - LR / bc1 * mq / (jnp.sqrt(vq) / jnp.sqrt(bc2) + eps),
                                   p, m, v)
        return p, m, v, t, loss

    data = [jnp.asarray(d) for d in fields(jnp, grid)]
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = [params, zeros, zeros, jnp.float32(0)]

    def run():
        *st, loss = step(*state, *data)
        state[:] = st
        return loss

    for _ in range(3):
        run()
    if profile:  # one step bracketed for ncu (scripts/gpu.sh uprofile)
        start, stop = cuda_profiler()
        jax.block_until_ready(state)
        start()
        run()
        jax.block_until_ready(state)
        stop()
        return []
    ms = ms_per_step(run, lambda: jax.block_until_ready(state), steps)
    stats = jax.devices()[0].memory_stats() or {}
    return [("jax jit", ms, stats.get("peak_bytes_in_use", 0) / 2**20 or None)]


# ---- conv2d alone -------------------------------------------------------------------
def torch_conv(torch, n, c, hw, steps):
    import torch.nn.functional as F
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, c, hw, hw, device="cuda", generator=g).requires_grad_()
    w = (torch.randn(c, c, 3, 3, device="cuda", generator=g) / math.sqrt(9 * c)).requires_grad_()
    go = torch.randn(n, c, hw, hw, device="cuda", generator=g)
    v = torch.randn(n, c, hw, hw, device="cuda", generator=g)

    def fwd():
        with torch.no_grad():
            return F.conv2d(x, w, padding=1)

    y = F.conv2d(x, w, padding=1)
    gx, = torch.autograd.grad(y, x, go, create_graph=True)  # depends on w (x: linear conv, no)
    fns = {"fwd": fwd,
           "bwd": lambda: torch.autograd.grad(y, [x, w], go, retain_graph=True),
           "dbl": lambda: torch.autograd.grad((gx * v).sum(), [x, w], retain_graph=True, allow_unused=True)}
    out = {}
    for k, fn in fns.items():
        for _ in range(3):
            fn()
        out[k] = ms_per_step(fn, torch.cuda.synchronize, steps)
    return out


def conv_table(args, frameworks):
    rows = []
    for n, c, hw in CONV_SHAPES:
        tg, tt = {}, {}
        if "tapegrad" in frameworks:
            try:
                cmd = [f"{args.build}/bench/unet_step", "--conv", "--n", str(n), "--c", str(c), "--hw", str(hw),
                       "--json"]
                tg = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            except Exception as e:
                log(f"tapegrad conv {n}x{c}x{hw}: failed: {err(e)}")
        try:
            if any(f.startswith("torch") for f in frameworks):
                tt = torch_conv(torch_setup(args.cudnn_benchmark), n, c, hw, args.steps)
        except ImportError:
            log("torch conv: PyTorch not installed, skipped")
        except Exception as e:
            log(f"torch conv {n}x{c}x{hw}: failed: {err(e)}")
        for k in ("fwd", "bwd", "dbl"):
            t, m = tt.get(k), tg.get(f"{k}_ms")
            rows.append({"shape": f"x [{n}, {c}, {hw}, {hw}], w [{c}, {c}, 3, 3]", "pass": k, "torch_ms": t,
                         "tapegrad_ms": m, "ratio": t / m if t and m else None})
    return rows


def fmt(x, spec):
    return format(x if x is not None else float("nan"), spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-gpu")
    ap.add_argument("--grids", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--frameworks", nargs="+", default=["tapegrad", "torch", "torch_graph", "jax"])
    ap.add_argument("--conv", action="store_true", help="the conv2d table only")
    ap.add_argument("--no-conv", action="store_true", help="the step table only")
    ap.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of tables")
    ap.add_argument("--profile", action="store_true",
                    help="with --frameworks jax: one step bracketed by the CUDA profiler's start/stop, "
                         "for ncu --profile-from-start off (scripts/gpu.sh uprofile)")
    args = ap.parse_args()
    step_rows = []
    for grid in ([] if args.conv else args.grids):
        rows = []
        for fw in args.frameworks:
            try:
                if fw == "tapegrad":
                    rows += tapegrad_rows(args.build, grid, args.steps)
                elif fw in ("torch", "torch_graph"):
                    torch = torch_setup(args.cudnn_benchmark)
                    rows.append(torch_row(torch, fw, grid, args.steps))
                    gc.collect()
                    torch.cuda.empty_cache()
                elif fw == "jax":
                    rows += jax_rows(grid, args.steps, args.profile)
                else:
                    log(f"{fw}: unknown framework, skipped")
            except ImportError as e:
                log(f"{fw}: not installed ({e}), skipped")
            except Exception as e:  # a failing peer is reported, not fatal
                log(f"{fw}, grid {grid}: failed: {err(e)}")
                rows.append((f"{fw} (failed: {type(e).__name__})", None, None))
        step_rows += [{"grid": grid, "framework": name, "ms": ms, "peak_mib": mib} for name, ms, mib in rows]
        if not args.json:
            print(f"PINN U-Net step, {grid} x {grid}, batch {BATCH}, channels 32/64/128/256, GroupNorm(8), "
                  f"GELU, float32 (no TF32), uxx + uyy by double backward, Adam")
            print(f"  {'framework':34s} {'ms/step':>9s} {'peak MiB':>9s}")
            for name, ms, mib in rows:
                print(f"  {name:34s} {fmt(ms, '9.3f')} {fmt(mib, '9.1f')}")
    conv_rows = [] if args.no_conv else conv_table(args, args.frameworks)
    if args.json:
        print(json.dumps({"step": step_rows, "conv": conv_rows}, indent=2))
    elif conv_rows:
        print("conv2d 3 x 3, padding 1, no bias, float32 (no TF32): PyTorch (cuDNN) vs tapegrad, ms")
        print(f"  {'shape':36s} {'pass':>4s} {'torch':>9s} {'tapegrad':>9s} {'torch/tg':>9s}")
        for r in conv_rows:
            print(f"  {r['shape']:36s} {r['pass']:>4s} {fmt(r['torch_ms'], '9.3f')} "
                  f"{fmt(r['tapegrad_ms'], '9.3f')} {fmt(r['ratio'], '9.2f')}")


if __name__ == "__main__":
    main()

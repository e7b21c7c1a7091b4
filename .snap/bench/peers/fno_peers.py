#!/usr/bin/env python3
"""The FNO-2D training step (bench/fno_step.cpp) side by side: tapegrad eager
and graphed, PyTorch eager, PyTorch with the whole step in torch.cuda.graph,
torch.compile, and JAX jit, on one GPU, with the same model (lifting with the
grid appended, 4 Fourier layers of width 32 with 12 x 12 modes and a
pointwise linear skip, GELU, projection through 128 channels), batch 20,
float32, relative L2 loss (--pino: plus the mean square of the output's
spectral Laplacian), and Adam. Prints ms per step and peak device memory:
the most allocated at once over the timed steps, and for the graphed rows
over the step's capture (a replay allocates nothing).

  fno_peers.py --build BUILD [--grids 64 128] [--pino] [--frameworks ...]
"""
import argparse
import json
import math
import subprocess

from timing import cuda_profiler, ms_per_step  # bench/peers/timing.py


def tapegrad_row(build, grid, pino, steps):
    cmd = [f"{build}/bench/fno_step", "--grid", str(grid), "--steps", str(steps), "--json"]
    if pino:
        cmd.append("--pino")
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return [("tapegrad eager", r["eager_ms"], r.get("eager_peak_mib")),
            ("tapegrad graphed", r.get("graphed_ms"), r.get("graphed_peak_mib"))]




# ---- PyTorch ----------------------------------------------------------------------
def torch_rows(grid, pino, steps, frameworks, batch=20, width=32, modes=12, layers=4):
    import torch
    import torch.nn.functional as F

    dev = "cuda"

    class SpectralConv2d(torch.nn.Module):
        def __init__(self):
            super().__init__()
            s = 1.0 / (width * width)
            self.w1 = torch.nn.Parameter(s * torch.rand(width, width, modes, modes, dtype=torch.cfloat))
            self.w2 = torch.nn.Parameter(s * torch.rand(width, width, modes, modes, dtype=torch.cfloat))

        def forward(self, x):
            b, _, h, w = x.shape
            xf = torch.fft.rfft2(x)
            out = torch.zeros(b, width, h, w // 2 + 1, dtype=torch.cfloat, device=x.device)
            out[:, :, :modes, :modes] = torch.einsum("bixy,ioxy->boxy", xf[:, :, :modes, :modes], self.w1)
            out[:, :, -modes:, :modes] = torch.einsum("bixy,ioxy->boxy", xf[:, :, -modes:, :modes], self.w2)
            return torch.fft.irfft2(out, s=(h, w))

    class FNO2d(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lift = torch.nn.Linear(3, width)
            self.spectral = torch.nn.ModuleList([SpectralConv2d() for _ in range(layers)])
            self.pointwise = torch.nn.ModuleList([torch.nn.Linear(width, width) for _ in range(layers)])
            self.proj1 = torch.nn.Linear(width, 128)
            self.proj2 = torch.nn.Linear(128, 1)

        def forward(self, a):
            b, h, w, _ = a.shape
            gx = torch.linspace(0, 1, h, device=a.device).view(1, h, 1, 1).expand(b, h, w, 1)
            gy = torch.linspace(0, 1, w, device=a.device).view(1, 1, w, 1).expand(b, h, w, 1)
            v = self.lift(torch.cat([a, gx, gy], -1)).permute(0, 3, 1, 2)
            for l in range(layers):
                v = self.spectral[l](v) + self.pointwise[l](v.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
                if l + 1 < layers:
                    v = F.gelu(v)
            return self.proj2(F.gelu(self.proj1(v.permute(0, 2, 3, 1))))

    k1 = torch.fft.fftfreq(grid, 1.0 / grid, device=dev).view(grid, 1)
    k2 = torch.fft.rfftfreq(grid, 1.0 / grid, device=dev).view(1, grid // 2 + 1)
    lap = -(2 * math.pi) ** 2 * (k1 * k1 + k2 * k2)

    def loss_fn(pred, u):
        d = (pred - u).reshape(batch, -1)
        t = u.reshape(batch, -1)
        loss = (d.norm(dim=1) / t.norm(dim=1)).mean()
        if pino:
            lp = torch.fft.irfft2(torch.fft.rfft2(pred.squeeze(-1)) * lap, s=(grid, grid))
            loss = loss + lp.pow(2).mean() * 1e-8
        return loss

    rows = []
    for mode in frameworks:
        torch.manual_seed(0)
        model = FNO2d().to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=(mode == "torch_graph"))
        a = torch.rand(batch, grid, grid, 1, device=dev)
        u = torch.rand(batch, grid, grid, 1, device=dev)

        def step():
            opt.zero_grad(set_to_none=False)
            loss = loss_fn(model(a), u)
            loss.backward()
            opt.step()
            return loss

        fn = step
        try:
            if mode == "torch_compile":
                fn = torch.compile(step)
            for _ in range(3):
                fn()
            if mode == "torch_graph":
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                torch.cuda.reset_peak_memory_stats()
                with torch.cuda.graph(g):
                    step()
                fn = g.replay
                peak = torch.cuda.max_memory_allocated()  # the captured step's peak
            else:
                torch.cuda.reset_peak_memory_stats()
            ms = ms_per_step(fn, torch.cuda.synchronize, steps)
            if mode != "torch_graph":
                peak = torch.cuda.max_memory_allocated()
            rows.append((mode.replace("_", " "), ms, peak / 2**20))
        except Exception as e:  # torch.compile may fail on complex einsum/FFT
            rows.append((mode.replace("_", " ") + f" (failed: {type(e).__name__})", None, None))
    return rows


# ---- JAX ---------------------------------------------------------------------------
def jax_rows(grid, pino, steps, profile=False, batch=20, width=32, modes=12, layers=4):
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)

    def linear(key, n_in, n_out):
        k1, k2 = jax.random.split(key)
        bound = 1 / math.sqrt(n_in)
        return {"w": jax.random.uniform(k1, (n_in, n_out), minval=-bound, maxval=bound),
                "b": jax.random.uniform(k2, (n_out,), minval=-bound, maxval=bound)}

    keys = jax.random.split(key, 4 + 3 * layers)
    s = 1.0 / (width * width)
    # Spectral weights as real pairs [..., 2] (the complex ones built inside),
    # so that Adam steps the parts as PyTorch's and tapegrad's do.
    params = {"lift": linear(keys[0], 3, width), "proj1": linear(keys[1], width, 128),
              "proj2": linear(keys[2], 128, 1),
              "w1": [s * jax.random.uniform(keys[3 + 3 * l], (width, width, modes, modes, 2)) for l in range(layers)],
              "w2": [s * jax.random.uniform(keys[4 + 3 * l], (width, width, modes, modes, 2)) for l in range(layers)],
              "pw": [linear(keys[5 + 3 * l], width, width) for l in range(layers)]}

    def dense(p, x):
        return x @ p["w"] + p["b"]

    def spectral(w1, w2, x):  # x [b, c, h, w]
        b, c, h, w = x.shape
        xf = jnp.fft.rfft2(x)
        c1 = w1[..., 0] + 1j * w1[..., 1]
        c2 = w2[..., 0] + 1j * w2[..., 1]
        out = jnp.zeros((b, width, h, w // 2 + 1), dtype=jnp.complex64)
        out = out.at[:, :, :modes, :modes].set(jnp.einsum("bixy,ioxy->boxy", xf[:, :, :modes, :modes], c1))
        out = out.at[:, :, -modes:, :modes].set(jnp.einsum("bixy,ioxy->boxy", xf[:, :, -modes:, :modes], c2))
        return jnp.fft.irfft2(out, s=(h, w))

    def model(p, a):
        b, h, w, _ = a.shape
        gx = jnp.broadcast_to(jnp.linspace(0, 1, h).reshape(1, h, 1, 1), (b, h, w, 1))
        gy = jnp.broadcast_to(jnp.linspace(0, 1, w).reshape(1, 1, w, 1), (b, h, w, 1))
        v = dense(p["lift"], jnp.concatenate([a, gx, gy], -1)).transpose(0, 3, 1, 2)
        for l in range(layers):
            v = spectral(p["w1"][l], p["w2"][l], v) + dense(p["pw"][l], v.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
            if l + 1 < layers:
                v = jax.nn.gelu(v, approximate=False)
        return dense(p["proj2"], jax.nn.gelu(dense(p["proj1"], v.transpose(0, 2, 3, 1)), approximate=False))

    k1 = jnp.fft.fftfreq(grid, 1.0 / grid).reshape(grid, 1)
    k2 = jnp.fft.rfftfreq(grid, 1.0 / grid).reshape(1, grid // 2 + 1)
    lap = -(2 * math.pi) ** 2 * (k1 * k1 + k2 * k2)

    def loss_fn(p, a, u):
        pred = model(p, a)
        d = (pred - u).reshape(batch, -1)
        t = u.reshape(batch, -1)
        loss = jnp.mean(jnp.linalg.norm(d, axis=1) / jnp.linalg.norm(t, axis=1))
        if pino:
            lp = jnp.fft.irfft2(jnp.fft.rfft2(pred[..., 0]) * lap, s=(grid, grid))
            loss = loss + jnp.mean(lp ** 2) * 1e-8
        return loss

    @jax.jit
    def step(p, m, v, t, a, u):
        loss, g = jax.value_and_grad(loss_fn)(p, a, u)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m_, g_: 0.9 * m_ + 0.1 * g_, m, g)
        v = jax.tree_util.tree_map(lambda v_, g_: 0.999 * v_ + 0.001 * g_ * g_, v, g)
        c1, c2 = 1 - 0.9 ** t, 1 - 0.999 ** t
        p = jax.tree_util.tree_map(lambda p_, m_, v_: p_ - 1e-3 * (m_ / c1) / (jnp.sqrt(v_ / c2) + 1e-8), p, m, v)
        return p, m, v, t, loss

    a = jax.random.uniform(keys[-1], (batch, grid, grid, 1))
    u = jax.random.uniform(keys[-2], (batch, grid, grid, 1))
    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = [params, m, v, 0.0]

    def run():
        p, m_, v_, t, loss = step(*state, a, u)
        state[:] = [p, m_, v_, t]
        return loss

    for _ in range(3):
        run()
    if profile:  # one step bracketed for ncu (scripts/gpu.sh fprofile)
        start, stop = cuda_profiler()
        jax.block_until_ready(state[0])
        start()
        run()
        jax.block_until_ready(state[0])
        stop()
        return []
    dev = jax.devices()[0]
    ms = ms_per_step(run, lambda: jax.block_until_ready(state[0]), steps)
    stats = dev.memory_stats() or {}
    return [("jax jit", ms, stats.get("peak_bytes_in_use", 0) / 2**20 or None)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-gpu")
    ap.add_argument("--grids", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--pino", action="store_true")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--profile", action="store_true",
                    help="with --frameworks jax: one step bracketed by the CUDA profiler's start/stop, "
                         "for ncu --profile-from-start off (scripts/gpu.sh fprofile)")
    ap.add_argument("--frameworks", nargs="+",
                    default=["tapegrad", "torch_eager", "torch_graph", "torch_compile", "jax"])
    args = ap.parse_args()
    for grid in args.grids:
        rows = []
        if "tapegrad" in args.frameworks:
            rows += tapegrad_row(args.build, grid, args.pino, args.steps)
        torch_modes = [f for f in args.frameworks if f.startswith("torch")]
        if torch_modes:
            rows += torch_rows(grid, args.pino, args.steps, torch_modes)
        if "jax" in args.frameworks:
            rows += jax_rows(grid, args.pino, args.steps, args.profile)
        print(f"FNO-2D step, {grid} x {grid}, batch 20, width 32, 12 modes, 4 layers, float32"
              f"{', PINO loss' if args.pino else ''}")
        print(f"  {'framework':34s} {'ms/step':>9s} {'peak MiB':>9s}")
        for name, ms, mib in rows:
            print(f"  {name:34s} {ms if ms is not None else float('nan'):9.3f} "
                  f"{mib if mib is not None else float('nan'):9.1f}")


if __name__ == "__main__":
    main()

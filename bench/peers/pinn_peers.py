#!/usr/bin/env python3
"""The PINN training step side by side, on the GPU machine:

    python3 bench/peers/pinn_peers.py [--device cuda|cpu] [--build build-gpu] [--batch 1024]
        [--width 64] [--depth 4] [--steps 200]
        [--frameworks tapegrad,taylor,eager,graph,jax[,compile]] [--optimizer sgd|sgd-multi|adam] [--out FILE]
        [--dump FILE.dot]

The step (bench/pinn_step.cpp has tapegrad's): u = MLP(x), 2 -> width x depth
-> 1, tanh, float32; the Laplacian u_xx + u_yy by double backward; the loss
mean((lap - f)^2); its gradients into every weight and bias but the last
bias; an SGD update in place (--optimizer sgd-multi: loss.backward() and
the libraries' multi-tensor SGD step, torch.optim.SGD(foreach=True); adam:
loss.backward() and an Adam step, capturable where the step is graphed, with the gradients zeroed in
place; JAX: the same Adam written out in the jitted step). `compile` tries
torch.compile(mode="reduce-overhead") on the step and reports what happens. Runs it in tapegrad (build-gpu/bench/pinn_step
--json: eager, and the whole step as one replayed CUDA graph; `taylor`: the
same with the Laplacian in Taylor mode, autograd::laplacian), PyTorch eager,
PyTorch with the whole step captured by torch.cuda.graph, and JAX
(jit(grad) of the loss, the Laplacian as the trace of per-point Hessians).
Prints one markdown table: ms per step (median of 5 timings of --steps
steps) and each time's ratio to tapegrad graphed. --device cpu: every
framework on the host's CPUs (tapegrad and PyTorch eager, JAX's CPU
backend; no graphed rows; ratios against tapegrad eager).
"""
import argparse
import json
import os
import subprocess
import sys

from timing import ms_per_step  # bench/peers/timing.py
from hessian_peers import jax_peak_mib  # noqa: E402
from laplacian_peers import jax_mlp_point  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LR = 1e-4
DEVICE = "cuda"  # --device


def sync_torch():
    if DEVICE == "cuda":
        import torch
        torch.cuda.synchronize()




def torch_setup(a, capturable=False):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(1234)
    sizes = [2] + [a.width] * a.depth + [1]
    ws, bs = [], []
    for i in range(len(sizes) - 1):
        ws.append((torch.randn(sizes[i + 1], sizes[i], generator=g) / sizes[i] ** 0.5).to(DEVICE).requires_grad_())
        bs.append((torch.randn(sizes[i + 1], generator=g) * 0.1).to(DEVICE).requires_grad_())
    trained = [p for i in range(len(ws)) for p in ([ws[i], bs[i]] if i + 1 < len(ws) else [ws[i]])]
    x = (torch.rand(a.batch, 2, generator=g) * 2 - 1).to(DEVICE)
    f = torch.sin(x[:, 0] * 3.14159) * torch.sin(x[:, 1] * 3.14159)

    def mlp(h):
        for i in range(len(ws) - 1):
            h = torch.tanh(torch.nn.functional.linear(h, ws[i], bs[i]))
        return torch.nn.functional.linear(h, ws[-1], bs[-1])

    def pinn_loss(x_in):
        x = x_in.detach().requires_grad_()
        u = mlp(x)
        du = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
        lap = None
        for j in range(2):
            dj = torch.autograd.grad(du[:, j].sum(), x, create_graph=True)[0][:, j]
            lap = dj if lap is None else lap + dj
        return ((lap - f) ** 2).mean()

    if a.optimizer in ("adam", "sgd-multi"):
        opt = (torch.optim.Adam(trained, lr=LR, capturable=capturable) if a.optimizer == "adam"
               else torch.optim.SGD(trained, lr=LR, foreach=True))

        def step(x_in):
            opt.zero_grad(set_to_none=False)
            loss = pinn_loss(x_in)
            loss.backward()
            opt.step()
            return loss
    else:
        def step(x_in):
            loss = pinn_loss(x_in)
            grads = torch.autograd.grad(loss, trained)
            with torch.no_grad():
                for p, gr in zip(trained, grads):
                    p.sub_(gr, alpha=LR)
            return loss

    return torch, x, step


def torch_peak_mib(torch, fn):
    """The peak bytes fn allocates above what was live before it (CUDA; NaN on the CPU)."""
    if DEVICE != "cuda":
        fn()
        return float("nan")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def run_torch_eager(a):
    """(ms per step, peak MiB of one step)"""
    torch, x, step = torch_setup(a)
    for _ in range(5):
        step(x)
    ms = ms_per_step(lambda: step(x), sync_torch, a.steps)
    return ms, torch_peak_mib(torch, lambda: step(x))


def run_torch_graph(a):
    """(ms per replay, peak MiB of the capture and a replay: the graph's pool)"""
    torch, x, step = torch_setup(a, capturable=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph(keep_graph=True) if a.dump else torch.cuda.CUDAGraph()
    if a.dump:
        g.enable_debug_mode()

    def capture():
        with torch.cuda.graph(g):
            step(x)
        if a.dump:
            g.debug_dump(a.dump)
            g.instantiate()
        g.replay()
    peak = torch_peak_mib(torch, capture)
    fresh = torch.rand_like(x) * 2 - 1

    def replay():
        x.copy_(fresh)
        g.replay()
    ms = ms_per_step(replay, torch.cuda.synchronize, a.steps)
    if a.profile:  # one replay for ncu --profile-from-start off
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        g.replay()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    return ms, peak


def run_torch_compile(a):
    torch, x, step = torch_setup(a, capturable=True)
    cstep = torch.compile(step, mode="reduce-overhead")
    for _ in range(5):
        cstep(x)
    return ms_per_step(lambda: cstep(x), torch.cuda.synchronize, a.steps)


def run_jax(a):
    """(ms per step, the JAX device's peak bytes in use in this process, MiB)"""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_default_matmul_precision", "highest")
    key = jax.random.PRNGKey(1234)
    sizes = [2] + [a.width] * a.depth + [1]
    params = []
    for i in range(len(sizes) - 1):
        key, k1, k2 = jax.random.split(key, 3)
        params.append((jax.random.normal(k1, (sizes[i + 1], sizes[i])) / sizes[i] ** 0.5,
                       jax.random.normal(k2, (sizes[i + 1],)) * 0.1))
    key, kx = jax.random.split(key)
    x = jax.random.uniform(kx, (a.batch, 2)) * 2 - 1
    f = jnp.sin(x[:, 0] * 3.14159) * jnp.sin(x[:, 1] * 3.14159)

    u = jax_mlp_point

    def loss_fn(p, x, f):
        lap = jax.vmap(lambda xi: jnp.trace(jax.hessian(u, argnums=1)(p, xi)))(x)
        return jnp.mean((lap - f) ** 2)

    @jax.jit
    def step(p, x, f):
        loss, g = jax.value_and_grad(loss_fn)(p, x, f)
        return jax.tree_util.tree_map(lambda q, gq: q - LR * gq, p, g), loss

    b1, b2, eps = 0.9, 0.999, 1e-8

    @jax.jit
    def adam_step(p, m, v, t, x, f):
        loss, g = jax.value_and_grad(loss_fn)(p, x, f)
        t = t + 1
        m = jax.tree_util.tree_map(lambda mq, gq: b1 * mq + (1 - b1) * gq, m, g)
        v = jax.tree_util.tree_map(lambda vq, gq: b2 * vq + (1 - b2) * gq * gq, v, g)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree_util.tree_map(lambda q, mq, vq: q - LR / bc1 * mq / (jnp.sqrt(vq) / jnp.sqrt(bc2) + eps), p, m, v)
        return p, m, v, t, loss

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = {"p": params, "m": zeros, "v": zeros, "t": jnp.float32(0), "loss": None}

    def one():
        if a.optimizer == "adam":
            state["p"], state["m"], state["v"], state["t"], state["loss"] = adam_step(
                state["p"], state["m"], state["v"], state["t"], x, f)
        else:
            state["p"], state["loss"] = step(state["p"], x, f)

    for _ in range(5):
        one()

    def sync():
        if state["loss"] is not None:
            state["loss"].block_until_ready()
    ms = ms_per_step(one, sync, a.steps)
    return ms, jax_peak_mib(jax) if DEVICE == "cuda" else float("nan")


def run_tapegrad(a, laplacian="backward"):
    exe = os.path.join(ROOT, a.build, "bench", "pinn_step")
    out = subprocess.run([exe, "--json", "--device", DEVICE, "--batch", str(a.batch), "--width", str(a.width), "--depth",
                          str(a.depth), "--steps", str(a.steps), "--optimizer", a.optimizer,
                          "--laplacian", laplacian],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    global DEVICE
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--build", default="build-gpu", help="tapegrad's build directory")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--frameworks", default="tapegrad,taylor,eager,graph,jax")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "sgd-multi", "adam"])
    p.add_argument("--out")
    p.add_argument("--profile", action="store_true",
                   help="bracket one replay of PyTorch's graph with cudaProfilerStart/Stop")
    p.add_argument("--dump", help="write PyTorch's captured graph there (DOT)")
    a = p.parse_args()
    DEVICE = a.device
    if DEVICE == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"  # before JAX is imported
    rows, mem = {}, {}  # framework -> ms per step, peak MiB (NaN where not measured)
    for fw in a.frameworks.split(","):
        try:
            if fw in ("tapegrad", "taylor"):
                r = run_tapegrad(a, "backward" if fw == "tapegrad" else "taylor")
                name = "tapegrad eager" if fw == "tapegrad" else "tapegrad eager, Taylor-mode Laplacian"
                rows[name], mem[name] = r["eager_ms"], r.get("eager_peak_mib", float("nan"))
                if "graphed_ms" in r:
                    name = ("tapegrad graphed (one CUDA graph)" if fw == "tapegrad"
                            else "tapegrad graphed, Taylor-mode Laplacian")
                    rows[name], mem[name] = r["graphed_ms"], r.get("pool_mib", float("nan"))
            elif fw == "eager":
                rows["PyTorch eager"], mem["PyTorch eager"] = run_torch_eager(a)
            elif fw in ("graph", "compile") and DEVICE == "cpu":
                continue  # CUDA graphs only
            elif fw == "graph":
                name = "PyTorch, whole step in torch.cuda.graph"
                rows[name], mem[name] = run_torch_graph(a)
            elif fw == "jax":
                rows["JAX jit"], mem["JAX jit"] = run_jax(a)
            elif fw == "compile":
                rows["PyTorch, torch.compile(mode=\"reduce-overhead\")"] = run_torch_compile(a)
        except Exception as e:  # a missing peer is reported, not fatal
            print(f"{fw}: failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    ref = rows.get("tapegrad graphed (one CUDA graph)") or rows.get("tapegrad eager")
    print(f"PINN step on {DEVICE}: MLP 2 -> {a.width} x{a.depth} -> 1, tanh, B = {a.batch}, float32, "
          f"Laplacian by double backward (tapegrad's Taylor rows: in Taylor mode), loss gradients, {a.optimizer.upper()} update; ms per step (median)\n")
    print(f"| framework | ms / step | steps / s | vs tapegrad {'graphed' if DEVICE == 'cuda' else 'eager'} |")
    print("|---|---:|---:|---:|")
    for name, ms in rows.items():
        ratio = f"{ms / ref:.2f}x" if ref else "-"
        print(f"| {name} | {ms:.3f} | {1e3 / ms:.0f} | {ratio} |")
    if a.out:  # peak_mib: tapegrad eager / PyTorch eager: one step's; graphed: the graph's pool; JAX: the process's
        with open(a.out, "w") as fh:
            json.dump({"device": DEVICE, "batch": a.batch, "width": a.width, "depth": a.depth,
                       "results": [{"framework": k, "median_ms": v, "peak_mib": mem.get(k, float("nan"))}
                                   for k, v in rows.items()]}, fh, indent=2)


if __name__ == "__main__":
    main()

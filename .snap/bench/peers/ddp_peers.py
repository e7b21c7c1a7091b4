#!/usr/bin/env python3
"""Data-parallel scaling, tapegrad against PyTorch DDP, on the GPU machine:

    python3 bench/peers/ddp_peers.py [--batch 1024] [--steps 200] [--gpus 1,2]

The steps (samples/pinn_ddp.cpp has tapegrad's): MLP 2 -> 64 x4 -> 1, tanh,
float32, Adam, a fixed batch per GPU. `pinn`: the loss mean((u_xx + u_yy +
f)^2) with the Laplacian by double backward; `mlp`: a regression loss.
tapegrad runs build-gpu/samples/pinn_ddp (DistributedDataParallel, one
process driving the GPUs from threads); PyTorch runs one process per GPU
(torch.multiprocessing, NCCL): DistributedDataParallel on `.backward()` for
`mlp`; for `pinn`, whose double backward DDP does not support, the manual
fallback users write: backward, then one all_reduce per gradient.
`tapegrad_graph` and `torch_graph` capture the whole step (forward, backward,
all-reduces, a capturable Adam) in one CUDA graph per process and replay it
with new points (pinn_ddp --graph; torch.cuda.graph). Prints ms
per step, samples per second, and the scaling efficiency (throughput on N
GPUs / (N x one GPU's)).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def torch_worker(rank, world, a, loss, port, out, graphed=False):
    import torch
    import torch.distributed as dist
    torch.backends.cuda.matmul.allow_tf32 = False
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if graphed:  # PyTorch's CUDA-graph notes: no asynchronous error handling around captured collectives
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    # The timing barriers go through gloo: an eager NCCL barrier after replays
    # of a graph with captured NCCL collectives never returned (H100 x2).
    host_group = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    layers = []
    prev = 2
    for _ in range(4):
        layers += [torch.nn.Linear(prev, 64), torch.nn.Tanh()]
        prev = 64
    layers.append(torch.nn.Linear(prev, 1))
    model = torch.nn.Sequential(*layers).cuda()
    if loss == "mlp":
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank], bucket_cap_mb=a.bucket_kb / 1024)
    else:
        for p in model.parameters():
            dist.broadcast(p.data, 0)
        net = model
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=graphed)
    torch.manual_seed(1000 + rank)
    static_x = torch.rand(a.batch, 2, device="cuda")

    def body():
        x = static_x.detach().requires_grad_()
        opt.zero_grad(set_to_none=not graphed)
        if loss == "mlp":
            y = torch.sin(x.detach().sum(1, keepdim=True))
            ((net(x.detach()) - y) ** 2).mean().backward()
        else:
            u = net(x)
            du, = torch.autograd.grad(u.sum(), x, create_graph=True)
            uxx = torch.autograd.grad(du[:, 0].sum(), x, create_graph=True)[0][:, 0]
            uyy = torch.autograd.grad(du[:, 1].sum(), x, create_graph=True)[0][:, 1]
            f = torch.sin(x[:, 0] * 3.14159265358979) * torch.sin(x[:, 1] * 3.14159265358979)
            ((uxx + uyy + f.detach()) ** 2).mean().backward()
            if world > 1:
                for p in model.parameters():
                    if p.grad is not None:  # the last bias gets none (the Laplacian does not reach it)
                        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        opt.step()

    graph = None
    if graphed:  # warm up on a side stream, then capture (PyTorch's recipe)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            body()

    def step():
        static_x.copy_(torch.rand(a.batch, 2, device="cuda"))
        if graph is not None:
            graph.replay()
        else:
            body()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier(group=host_group)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    dist.barrier(group=host_group)
    ms = (time.perf_counter() - t0) * 1e3 / a.steps
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"ms_per_step": ms}, f)
    if graphed:  # destroying a communicator captured into a live graph may block: leave at once
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    dist.destroy_process_group()


def run_torch(a, world, loss, graphed=False):
    import torch.multiprocessing as mp
    out = tempfile.mktemp(suffix=".json")
    port = 29500 + (os.getpid() % 1000) + (7 if graphed else 0) + world
    ctx = mp.spawn(torch_worker, args=(world, a, loss, port, out, graphed), nprocs=world, join=False)
    deadline = time.time() + a.timeout
    while not ctx.join(timeout=2):
        if time.time() > deadline:
            for proc in ctx.processes:
                proc.kill()
            raise RuntimeError(f"no result within {a.timeout} s (killed)")
    with open(out) as f:
        return json.load(f)["ms_per_step"]


def run_tapegrad(a, world, loss, graphed=False):
    out = tempfile.mktemp(suffix=".json")
    exe = os.path.join(ROOT, "build-gpu", "samples", "pinn_ddp")
    launch = [os.path.join(ROOT, "scripts", "launch.sh"), str(world)]  # one process per GPU, as PyTorch's
    subprocess.run(launch + [exe, "--loss", loss, "--batch", str(a.batch), "--steps", str(a.steps),
                    "--warmup", str(a.warmup), "--bucket-kb", str(a.bucket_kb), "--first-bucket-kb",
                    str(a.bucket_kb / 4), "--json", out] + (["--graph"] if graphed else []) +
                   (["--bucket-view"] if a.bucket_view else []), check=True,
                   stdout=sys.stderr)
    with open(out) as f:
        r = json.load(f)
    return r["ms_per_step"], r["hidden_fraction"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--gpus", default="1,2")
    p.add_argument("--bucket-view", action="store_true",
                   help="tapegrad: gradients as views into the buckets (DDPOptions::gradient_as_bucket_view)")
    p.add_argument("--timeout", type=float, default=90, help="seconds a PyTorch run may take")
    p.add_argument("--losses", default="pinn,mlp")
    p.add_argument("--frameworks", default="tapegrad,torch", help="of tapegrad, tapegrad_graph, torch, torch_graph")
    p.add_argument("--bucket-kb", type=float, default=16, help="DDP bucket size (both; tapegrad's first: a quarter)")
    a = p.parse_args()
    counts = [int(g) for g in a.gpus.split(",")]
    print(f"Data parallel: MLP 2 -> 64 x4 -> 1, tanh, float32, Adam, {a.batch} points per GPU, "
          f"{a.bucket_kb:g} KiB buckets, one process per GPU; ms per step (mean of {a.steps})\n")
    print("| loss | framework | GPUs | ms / step | samples / s | scaling efficiency | all-reduce hidden |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for loss in a.losses.split(","):
        for fw in a.frameworks.split(","):
            base = None
            for n in counts:
                hidden = ""
                try:
                    if fw.startswith("tapegrad"):
                        ms, h = run_tapegrad(a, n, loss, fw.endswith("_graph"))
                        hidden = f"{100 * h:.0f}%" + (" (eager step)" if fw.endswith("_graph") else "")
                    else:
                        ms = run_torch(a, n, loss, fw.endswith("_graph"))
                except Exception as e:  # report and go on
                    print(f"| {loss} | {fw} | {n} | failed: {e} | | | |")
                    continue
                sps = a.batch * n / (ms / 1e3)
                if n == 1:
                    base = sps
                eff = f"{sps / (n * base):.2f}" if base else ""
                name = fw if fw.startswith("tapegrad") else ("PyTorch DDP" if loss == "mlp" else "PyTorch, manual all_reduce")
                if fw == "torch_graph":
                    name += ", torch.cuda.graph"
                print(f"| {loss} | {name} | {n} | {ms:.3f} | {sps:,.0f} | {eff} | {hidden} |", flush=True)


if __name__ == "__main__":
    main()

// Data-parallel PINN training on every GPU (docs/DISTRIBUTED.md), and
// per-sample Hessians of a batch sharded over the GPUs.
//
// The PINN: u = MLP(x) on [0, 1]^2, loss mean((u_xx + u_yy - f)^2) with the
// Laplacian by double backward (grad with create_graph), Adam;
// DistributedDataParallel averages the gradients of each step across ranks
// while backward runs. --loss mlp trains a plain regression MLP instead.
//
// Launch one process per GPU (scripts/launch.sh N build/samples/pinn_ddp ...
// sets RANK, WORLD_SIZE, LOCAL_RANK and TG_RENDEZVOUS_FILE; mpirun or srun
// with TG_RENDEZVOUS_FILE set works too), or run it
// alone: one process drives --gpus GPUs from threads (default: all).
// --graph captures the whole step (forward, double backward, the bucketed
// all-reduces on the communication stream, a capturable Adam step) into one
// CUDA graph per rank and replays it with new points each step.
// Prints ms per step and samples per second; --json writes them. Checks: the
// parameters are bitwise identical on every rank after training, and the
// sharded per-sample Hessians equal one GPU's (exit status 1 otherwise).
// Without NCCL or a GPU it says so and exits 0 (nothing to run).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <thread>

#include <CLI/CLI.hpp>

#include <tapegrad/distributed/distributed.h>
#include <tapegrad/tapegrad.h>

namespace {

using tg::Tensor;
namespace dist = tg::distributed;

struct Args {
  int steps = 200, warmup = 20, batch = 1024, width = 64, depth = 4, gpus = 0, hessian_batch = 4096;
  double bucket_kb = 25 * 1024, first_bucket_kb = 1024;
  std::string loss = "pinn", json;
  bool graph = false, bucket_view = false;
};

std::shared_ptr<tg::nn::SequentialImpl> make_mlp(const Args& a, int device) {
  tg::manual_seed(0);
  auto seq = std::make_shared<tg::nn::SequentialImpl>();
  int prev = 2;
  for (int i = 0; i < a.depth; ++i) {
    seq->push_back(std::make_shared<tg::nn::LinearImpl>(prev, a.width));
    seq->push_back(std::make_shared<tg::nn::TanhImpl>());
    prev = a.width;
  }
  seq->push_back(std::make_shared<tg::nn::LinearImpl>(prev, 1));
  seq->to(tg::Device(tg::kCUDA, device));
  return seq;
}

Tensor pinn_loss(dist::DistributedDataParallel& ddp, const Tensor& x0) {
  Tensor x = x0.detach().requires_grad_();
  Tensor u = ddp(x);
  Tensor du = tg::autograd::grad({u.sum()}, {x}, {}, std::nullopt, true)[0];
  Tensor uxx = tg::autograd::grad({du.select(1, 0).sum()}, {x}, {}, std::nullopt, true)[0].select(1, 0);
  Tensor uyy = tg::autograd::grad({du.select(1, 1).sum()}, {x}, {}, std::nullopt, true)[0].select(1, 1);
  Tensor f = tg::sin(x.select(1, 0) * 3.14159265358979) * tg::sin(x.select(1, 1) * 3.14159265358979);
  return tg::square(uxx + uyy + f.detach()).mean();
}

struct Result {
  double ms_per_step = 0, hidden = 0;
  size_t buckets = 0, captured_depth = 0, depth = 0;  // the graphed step's longest chain, captured and relaxed
  bool ok = true;
  std::string message;
};

// One rank: training, then the sharded per-sample Hessians.
Result run_rank(const Args& a, std::shared_ptr<dist::ProcessGroup> g) {
  Result res;
  const int r = g->rank(), n = g->size(), dev = g->device();
  tg::cuda::DeviceGuard on_device(dev);
  tg::cuda::StreamGuard on_stream(tg::cuda::stream_from_pool(dev));
  const auto opt = tg::TensorOptions().device(tg::Device(tg::kCUDA, dev));
  auto model = make_mlp(a, dev);
  dist::DDPOptions o;
  o.bucket_cap_bytes = size_t(a.bucket_kb * 1024);
  o.first_bucket_cap_bytes = size_t(a.first_bucket_kb * 1024);
  o.gradient_as_bucket_view = a.bucket_view;
  dist::DistributedDataParallel ddp(model, g, o);
  tg::optim::AdamOptions ao;
  ao.lr = 1e-3;
  ao.capturable = a.graph;
  tg::optim::Adam adam(model->parameters(), ao);
  tg::manual_seed(1000 + uint64_t(r));     // every rank its own collocation points
  Tensor x = tg::rand({a.batch, 2}, opt);  // the graphed step's static input
  auto body = [&] {
    adam.zero_grad(/*set_to_none=*/!a.graph && !a.bucket_view);  // zeroing in place keeps bucket views
    if (a.loss == "pinn") {
      pinn_loss(ddp, x).backward();
    } else {
      Tensor y = tg::sin(x.sum({1}, true));
      tg::square(ddp(x) - y).mean().backward();
    }
    adam.step();
  };
  tg::cuda::CUDAGraph graph;
  auto step = [&] {
    x.copy_(tg::rand({a.batch, 2}, opt));
    if (a.graph) graph.replay();
    else body();
  };
  for (int i = 0; i < a.warmup; ++i) {
    x.copy_(tg::rand({a.batch, 2}, opt));
    body();
  }
  if (a.graph) {
    // Ranks that are threads of one process capture ThreadLocal.
    const bool threads = g->size() > 1 && std::getenv("RANK") == nullptr;
    tg::cuda::Graph capture(graph, {}, std::nullopt,
                            threads ? tg::cuda::CaptureMode::ThreadLocal : tg::cuda::CaptureMode::Global);
    body();
  }
  res.captured_depth = graph.captured_depth();
  res.depth = graph.depth();
  g->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i)
    step();
  tg::cuda::synchronize();
  g->barrier();
  res.ms_per_step = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / a.steps;
  // How much of the all-reduce ran before the last gradient (hidden behind
  // backward), in one more eager step (a replay records no timeline).
  x.copy_(tg::rand({a.batch, 2}, opt));
  body();
  const auto tl = ddp.timeline();
  double total = 0, hidden = 0;
  for (size_t b = 0; b < tl.bucket_start.size(); ++b) {
    total += tl.bucket_end[b] - tl.bucket_start[b];
    hidden += std::max(0.0, std::min<double>(tl.bucket_end[b], tl.last_gradient) - tl.bucket_start[b]);
  }
  res.hidden = total > 0 ? hidden / total : 0;
  res.buckets = ddp.buckets().size();

  // The parameters are identical on every rank (bitwise): gather rank 0's.
  for (const Tensor& p : model->parameters()) {
    Tensor mine = p.detach().reshape({-1}).contiguous();
    Tensor all = tg::empty({n * mine.numel()}, mine.options());
    g->all_gather(all, mine)->wait();
    Tensor first = all.narrow(0, 0, mine.numel());
    if (!tg::equal(first, mine)) {
      res.ok = false;
      res.message = "rank " + std::to_string(r) + ": parameters differ from rank 0's";
    }
  }

  // Per-sample Hessians of the trained network, the batch sharded over the
  // ranks and gathered: equal to one GPU's over the whole batch.
  // Rank 0's points for everyone (threads share the global generator).
  Tensor X = tg::rand({a.hessian_batch, 2}, opt);
  g->broadcast(X, 0)->wait();
  const int64_t per = a.hessian_batch / n;
  auto fn = [&](const Tensor& x) { return model->forward(x); };
  Tensor mine = tg::autograd::per_sample_hessian(fn, X.narrow(0, r * per, per), tg::autograd::HessianStrategy::Taylor);
  Tensor all = tg::empty({n * per, 1, 2, 2}, mine.options());
  g->all_gather(all, mine.contiguous())->wait();
  if (r == 0) {
    Tensor whole = tg::autograd::per_sample_hessian(fn, X.narrow(0, 0, n * per), tg::autograd::HessianStrategy::Taylor);
    const double err = tg::max(tg::abs(whole - all)).item<double>();
    std::printf("sharded per-sample Hessians (%d x %lld points): max |sharded - one GPU| = %.3g\n", n,
                static_cast<long long>(per), err);
    if (!(err <= 1e-5)) {
      res.ok = false;
      res.message = "sharded Hessians differ from one GPU's";
    }
  }
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Data-parallel PINN training and sharded per-sample Hessians"};
  app.add_option("--steps", a.steps, "timed steps");
  app.add_option("--warmup", a.warmup, "untimed steps first");
  app.add_option("--batch", a.batch, "collocation points per GPU");
  app.add_option("--width", a.width, "hidden width");
  app.add_option("--depth", a.depth, "hidden layers");
  app.add_option("--gpus", a.gpus, "GPUs driven by this process's threads (0: all) when not launched per rank");
  app.add_option("--loss", a.loss, "pinn (double backward) or mlp (regression)")->check(CLI::IsMember({"pinn", "mlp"}));
  app.add_option("--bucket-kb", a.bucket_kb, "DDP bucket size (KiB)");
  app.add_option("--first-bucket-kb", a.first_bucket_kb, "DDP first bucket size (KiB)");
  app.add_option("--json", a.json, "write the figures there");
  app.add_flag("--graph", a.graph, "capture the step in a CUDA graph and replay it");
  app.add_flag("--bucket-view", a.bucket_view,
               "gradients as views into the DDP buckets (no copies into and out of them)");
  CLI11_PARSE(app, argc, argv);
  if (!dist::is_available() || tg::cuda::device_count() == 0) {
    std::printf("pinn_ddp: needs NCCL and a GPU (NCCL built in: %s, GPUs: %d); nothing to run\n",
                dist::is_available() ? "yes" : "no", tg::cuda::device_count());
    return 0;
  }
  std::vector<std::shared_ptr<dist::ProcessGroup>> groups;
  // Launched: by scripts/launch.sh (RANK set), or by mpirun / srun with more
  // than one process (dist::launch_from_env reads their variables).
  const dist::LaunchInfo launch = dist::launch_from_env();
  const bool launched = std::getenv("RANK") != nullptr || launch.world_size > 1;
  if (launched) {
    groups.push_back(dist::ProcessGroup::init_from_env());
  } else {
    const int n = a.gpus > 0 ? std::min(a.gpus, tg::cuda::device_count()) : tg::cuda::device_count();
    std::vector<int> devices;
    for (int d = 0; d < n; ++d)
      devices.push_back(d);
    groups = dist::ProcessGroup::init_local(devices);
  }
  std::vector<Result> results(groups.size());
  std::vector<std::thread> threads;
  std::mutex m;
  for (size_t i = 0; i < groups.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        results[i] = run_rank(a, groups[i]);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> l(m);
        results[i].ok = false;
        results[i].message = e.what();
      }
    });
  for (auto& t : threads)
    t.join();
  bool ok = true;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (!results[i].ok) std::fprintf(stderr, "pinn_ddp: rank %d: %s\n", groups[i]->rank(), results[i].message.c_str());
    ok &= results[i].ok;
  }
  const int world = groups[0]->size();
  if (groups[0]->rank() == 0) {
    const Result& r0 = results[0];
    const double sps = double(a.batch) * world / (r0.ms_per_step / 1000);
    std::printf(
        "%s%s, %d GPU%s (%s), %d points per GPU, %zu buckets: %.3f ms per step, %.0f samples/s, "
        "all-reduce hidden %.0f%%\n",
        a.loss.c_str(), a.graph ? " (graphed)" : "", world, world == 1 ? "" : "s",
        launched ? "one process each" : "threads", a.batch, r0.buckets, r0.ms_per_step, sps, 100 * r0.hidden);
    if (a.graph)
      std::printf("the graphed step's longest chain: %zu nodes as captured, %zu relaxed\n", r0.captured_depth,
                  r0.depth);
    if (!a.json.empty()) {
      std::ofstream f(a.json);
      f << "{\"loss\": \"" << a.loss << "\", \"graph\": " << (a.graph ? "true" : "false") << ", \"gpus\": " << world
        << ", \"batch_per_gpu\": " << a.batch << ", \"ms_per_step\": " << r0.ms_per_step
        << ", \"samples_per_s\": " << sps << ", \"hidden_fraction\": " << r0.hidden << "}\n";
    }
  }
  groups.clear();
  return ok ? 0 : 1;
}

// Autograd on CUDA beyond the op table (test_op_table.cpp runs every op's
// gradcheck and gradgradcheck on the GPU): Hessians against the CPU, saved
// tensors offloaded, activation_grad at every order, worker threads. Skips
// without a GPU.
#include "reference.h"

#include "autograd/input_buffer.h"

#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace {

using tg::Tensor;
using tg::autograd::variable_list;
using Fn = std::function<Tensor(const variable_list&)>;

const tg::Device kGpu(tg::kCUDA, 0);
const tg::Device kCpu(tg::kCPU);

Tensor leaf(const tg::IntList& sizes, uint64_t seed, double lo = -1, double hi = 1) {
  tg::manual_seed(seed);
  return (tg::rand(sizes, tg::TensorOptions().dtype(tg::kFloat64)) * (hi - lo) + lo).requires_grad_(true);
}

// fn evaluated on the GPU.
Fn on_gpu(Fn fn) {
  return [fn](const variable_list& in) {
    variable_list g;
    for (const Tensor& t : in)
      g.push_back(t.to(kGpu));
    Tensor out = fn(g);
    EXPECT_TRUE(out.is_cuda());
    return out.to(kCpu);
  };
}

#define EXPECT_GPU_GRADS(name, fn, ...)                             \
  do {                                                              \
    variable_list in{__VA_ARGS__};                                  \
    auto r1 = tg::autograd::gradcheck(on_gpu(fn), in);              \
    EXPECT_TRUE(r1.ok) << name << ": " << r1.message;               \
    auto r2 = tg::autograd::gradgradcheck(on_gpu(fn), in);          \
    EXPECT_TRUE(r2.ok) << name << " gradgradcheck: " << r2.message; \
  } while (0)

TEST(CudaGpuAutograd, HessianOfAnMlpMatchesCpu) {
  REQUIRE_GPU();
  tg::manual_seed(30);
  auto o = tg::TensorOptions().dtype(tg::kFloat64);
  Tensor w1 = tg::randn({16, 2}, o), w2 = tg::randn({1, 16}, o);
  auto run = [&](tg::Device d) {
    Tensor x = tg::rand({8, 2}, o).to(d).requires_grad_();
    Tensor a = w1.to(d), b = w2.to(d);
    Tensor u = tg::linear(tg::tanh(tg::linear(x, a)), b);
    Tensor du = tg::autograd::grad({u.sum()}, {x}, {}, std::nullopt, true)[0];
    Tensor h = tg::autograd::grad({du.select(1, 0).sum()}, {x})[0];
    return h.to(kCpu);
  };
  tg::manual_seed(31);
  Tensor cpu = run(kCpu);
  tg::manual_seed(31);
  Tensor gpu = run(kGpu);
  EXPECT_TRUE(tg::allclose(gpu, cpu, 1e-10, 1e-12));
}

// Per-sample Hessians of an MLP with TF32 GEMMs: the check that rows are
// independent allows for TF32's rounding (it refused the Hessian benchmark's
// tf32 rows), still catches a batch mean, and the Hessians match Float32's.
TEST(CudaGpuAutograd, PerSampleHessianWithTf32Gemms) {
  REQUIRE_GPU();
  tg::manual_seed(32);
  auto o = tg::TensorOptions().dtype(tg::kFloat32).device(kGpu);
  // Weights scaled by 1 / sqrt(fan_in), as nn::Linear's.
  Tensor w1 = tg::randn({64, 2}, o) * 0.7, w2 = tg::randn({64, 64}, o) * 0.125, w3 = tg::randn({1, 64}, o) * 0.125;
  auto fn = [&](const Tensor& x) { return tg::linear(tg::silu(tg::linear(tg::silu(tg::linear(x, w1)), w2)), w3); };
  Tensor x = tg::rand({256, 2}, o);
  Tensor exact = tg::autograd::per_sample_hessian(fn, x);
  const bool before = tg::cuda::allow_tf32();
  tg::cuda::set_allow_tf32(true);
  struct Restore {
    bool b;
    ~Restore() { tg::cuda::set_allow_tf32(b); }
  } restore{before};
  for (auto s : {tg::autograd::HessianStrategy::BatchedCotangents, tg::autograd::HessianStrategy::ForwardOverReverse}) {
    Tensor h = tg::autograd::per_sample_hessian(fn, x, s);
    // TF32 keeps 10 mantissa bits: within a percent of the largest entry.
    const double err = (h - exact).abs().max().item<double>(), big = exact.abs().max().item<double>();
    EXPECT_GT(big, 0.0);
    EXPECT_LE(err, 1e-2 * big) << "max |tf32 - fp32| " << err << " against max |H| " << big;
  }
  auto mixed = [&](const Tensor& x) { return tg::sub(fn(x), fn(x).mean()); };
  EXPECT_ERROR_CONTAINS(tg::autograd::per_sample_hessian(mixed, x), "fn mixes rows of the batch");
}

// The engine's held contributions (summed by add_n) and mul's fused
// backward on the GPU: the chain x = x * w + b gives bitwise the CPU's f32
// gradients (same operations in the same order), and an InputBuffer fed from
// the current stream and from a side stream (added at once, after events)
// gives bitwise the sequential sum.
TEST(CudaGpuAutograd, HeldContributionsAndFusedMulMatchCpuBitwise) {
  REQUIRE_GPU();
  const auto f32 = tg::TensorOptions().dtype(tg::kFloat32);
  auto chain_grads = [&](tg::Device d) {
    Tensor w = tg::full({3}, 0.999, f32).to(d).requires_grad_();
    Tensor b = tg::tensor({0.001, -0.002, 0.003}, {3}, f32).to(d).requires_grad_();
    Tensor x = tg::tensor({1.0, 2.0, -1.5}, {3}, f32).to(d);
    for (int i = 0; i < 300; ++i)
      x = x * w + b;
    std::vector<Tensor> g = tg::autograd::grad({x.sum()}, {w, b});
    return std::make_pair(g[0].to(kCpu).to_vector<float>(), g[1].to(kCpu).to_vector<float>());
  };
  EXPECT_EQ(chain_grads(kGpu), chain_grads(kCpu));

  tg::NoGradGuard no_grad;
  tg::manual_seed(8);
  std::vector<Tensor> parts;
  for (int i = 0; i < 40; ++i)
    parts.push_back(tg::mul(tg::randn({7}, f32), std::pow(10.0, double(i % 5) - 2.0)));
  std::vector<float> expect = parts[0].to_vector<float>();
  for (size_t i = 1; i < parts.size(); ++i) {
    std::vector<float> v = parts[i].to_vector<float>();
    for (size_t j = 0; j < v.size(); ++j)
      expect[j] = expect[j] + v[j];
  }
  tg::cuda::Stream main = tg::cuda::current_stream(), side = tg::cuda::stream_from_pool();
  tg::autograd::InputBuffer buf(1);
  for (size_t i = 0; i < parts.size(); ++i) {
    const tg::cuda::Stream& producer = i % 13 == 5 ? side : main;
    Tensor g;
    {
      tg::cuda::StreamGuard on(producer);
      tg::cuda::delay(producer, i % 13 == 5 ? 1.0 : 0.0);  // the side stream's work lands late
      g = parts[i].to(kGpu);
    }
    buf.add(0, std::move(g), producer, main);
  }
  buf.wait_for_consumer(main);
  EXPECT_EQ(buf.release()[0].to(kCpu).to_vector<float>(), expect);
}

// Products of one weight gradient (autograd/accumulation.cpp) are held and
// formed by one GEMM over their rows concatenated (one copy_n launch for
// the contiguous operands, a strided one copied alone). One made on a side
// stream whose work lands late is held too (the accumulation stream waits
// on its event); one over 4 MiB, also late on the side stream, is formed
// there at once and added after events; a dense contribution joins. Equal
// to the separate products formed on the CPU (float64, rounding).
TEST(CudaGpuAutograd, WeightGradientProductsSumInOneGemm) {
  REQUIRE_GPU();
  const auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  tg::NoGradGuard no_grad;
  tg::manual_seed(12);
  std::vector<std::pair<Tensor, Tensor>> ps;
  for (int i = 0; i < 21; ++i)
    ps.emplace_back(tg::randn({40 + i, 6}, f64), tg::randn({40 + i, 5}, f64));
  ps[3].first = tg::randn({6, 43}, f64).t();                          // strided l
  ps[15] = {tg::randn({50000, 6}, f64), tg::randn({50000, 5}, f64)};  // 4.4 MB: not held
  Tensor dense = tg::randn({6, 5}, f64);
  Tensor expect = dense.clone();
  for (const auto& [l, r] : ps)
    expect = expect + tg::mm(l.t(), r);
  const tg::cuda::Stream main = tg::cuda::current_stream(), side = tg::cuda::stream_from_pool();
  const int64_t merged = tg::autograd::detail::merged_product_sums();
  tg::autograd::InputBuffer buf(1);
  for (size_t i = 0; i < ps.size(); ++i) {
    const bool late = i == 7 || i == 15;
    const tg::cuda::Stream& producer = late ? side : main;
    Tensor l, r;
    {
      tg::cuda::StreamGuard on(producer);
      tg::cuda::delay(producer, late ? 1.0 : 0.0);
      l = ps[i].first.to(kGpu);
      r = ps[i].second.to(kGpu);
    }
    buf.add(0, tg::autograd::Contribution::product(std::move(l), std::move(r)), producer, main);
    if (i == 10) buf.add(0, dense.to(kGpu), main, main);
  }
  buf.wait_for_consumer(main);
  tgtest::expect_values(buf.release()[0].to(kCpu), tgtest::values(expect), 1e-12, "sum of products");
  EXPECT_GE(tg::autograd::detail::merged_product_sums() - merged, 2);  // 16 held, then the rest
}

// A weight's held products go into its existing .grad by one GEMM that adds
// (beta 1): the .grad keeps its memory and identity, its version moves, the
// post-accumulate-grad hook sees the sum. Not with a pre-hook on the leaf or
// a dense contribution beside the products (then the sum is formed, then
// added). Float64, against the products formed on the CPU.
TEST(CudaGpuAutograd, WeightGradientProductsAddIntoAnExistingGrad) {
  REQUIRE_GPU();
  const auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  tg::manual_seed(13);
  Tensor w_cpu = tg::randn({5, 4}, f64), x1 = tg::randn({6, 4}, f64), a = tg::randn({7, 5}, f64),
         b = tg::randn({4, 3}, f64), c1 = tg::randn({6, 5}, f64), c2 = tg::randn({7, 4}, f64),
         c3 = tg::randn({5, 3}, f64);
  Tensor expect;
  {
    tg::NoGradGuard no_grad;
    expect = tg::mm(c1.t(), x1) + tg::mm(a.t(), c2) + tg::mm(c3, b.t());
  }
  auto loss = [&](const Tensor& w, bool dense) {
    Tensor l = (tg::linear(x1.to(kGpu), w) * c1.to(kGpu)).sum() + (tg::mm(a.to(kGpu), w) * c2.to(kGpu)).sum() +
               (tg::mm(w, b.to(kGpu)) * c3.to(kGpu)).sum();
    return dense ? l + (w * w).sum() * 0.5 : l;
  };
  auto times = [](const Tensor& t, double s) {
    tg::NoGradGuard no_grad;
    return tgtest::values(t * s);
  };
  Tensor w = w_cpu.to(kGpu).requires_grad_();
  int posts = 0;
  std::vector<double> seen;
  w.register_post_accumulate_grad_hook([&](const Tensor& p) {
    ++posts;
    seen = tgtest::values(p.grad().to(kCpu));
  });
  const int64_t in_place = tg::autograd::detail::products_formed_in_place();
  loss(w, false).backward();  // no .grad yet: the sum becomes .grad
  EXPECT_EQ(tg::autograd::detail::products_formed_in_place(), in_place);
  const void* data = w.grad().data_ptr();
  const uint32_t version = w.grad().impl()->version_counter()->current();
  loss(w, false).backward();
  EXPECT_EQ(tg::autograd::detail::products_formed_in_place(), in_place + 1);
  EXPECT_EQ(w.grad().data_ptr(), data);
  EXPECT_GT(w.grad().impl()->version_counter()->current(), version);
  EXPECT_EQ(posts, 2);
  tgtest::expect_values(w.grad().to(kCpu), times(expect, 2), 1e-12, "into .grad");
  tgtest::expect_values(tg::tensor(seen, {5, 4}, f64), times(expect, 2), 1e-12, "post hook");
  // A dense contribution beside the products: formed, then added.
  loss(w, true).backward();
  EXPECT_EQ(tg::autograd::detail::products_formed_in_place(), in_place + 1);
  {
    tg::NoGradGuard no_grad;
    tgtest::expect_values(w.grad().to(kCpu), tgtest::values(expect * 3.0 + w_cpu), 1e-12, "with a dense use");
  }
  // A pre-hook must see the gradient: not formed in place.
  Tensor w2 = w_cpu.to(kGpu).requires_grad_();
  w2.register_hook([](const Tensor& g) { return g * 2.0; });
  loss(w2, false).backward();
  loss(w2, false).backward();
  EXPECT_EQ(tg::autograd::detail::products_formed_in_place(), in_place + 1);
  tgtest::expect_values(w2.grad().to(kCpu), times(expect, 4), 1e-12, "pre-hook");
}

// The backward of select/slice/narrow in one pass (Backend::embed): equal
// to the CPU's zeros + strided copy, for contiguous, transposed, expanded
// and non-collapsible (the fallback) gradients, steps 1 and 2, float32,
// bfloat16 and int-free dtypes alike.
TEST(CudaGpuAutograd, SliceBackwardInOnePassEqualsTheCpu) {
  REQUIRE_GPU();
  tg::manual_seed(14);
  for (tg::ScalarType dt : {tg::kFloat32, tg::kFloat64, tg::kBFloat16}) {
    const auto o = tg::TensorOptions().dtype(dt);
    Tensor x = tg::randn({3, 4, 7, 5}, o);
    struct Case {
      std::function<Tensor(const Tensor&)> f;
      Tensor base;                                // made on the CPU
      std::function<Tensor(const Tensor&)> view;  // applied on each device: the gradient fed back
    };
    auto same = [](const Tensor& t) { return t; };
    std::vector<Case> cases = {
        {[](const Tensor& t) { return t.slice(2, 1, 7, 2); }, tg::randn({3, 4, 3, 5}, o), same},
        {[](const Tensor& t) { return t.slice(2, 1, 7, 2); }, tg::randn({4, 3, 3, 5}, o),
         [](const Tensor& t) { return t.transpose(0, 1); }},  // the outer dims do not collapse
        {[](const Tensor& t) { return t.select(3, 4); }, tg::randn({7, 4, 3}, o),
         [](const Tensor& t) {
           return t.permute({2, 1, 0});
         }},
        {[](const Tensor& t) { return t.narrow(1, 2, 2); }, tg::ones({1, 1, 1, 5}, o),
         [](const Tensor& t) {
           return t.expand({3, 2, 7, 5});
         }},
        {[](const Tensor& t) { return t.select(0, 0); }, tg::randn({4, 7, 5}, o), same},
        {[](const Tensor& t) { return t.slice(2, 3, 3, 1); }, tg::randn({3, 4, 0, 5}, o), same},  // empty
    };
    for (size_t c = 0; c < cases.size(); ++c) {
      auto grad_on = [&](tg::Device d) {
        Tensor xd = x.to(d).detach().requires_grad_();  // on the CPU, to() is x itself
        return tg::autograd::grad({cases[c].f(xd)}, {xd}, {cases[c].view(cases[c].base.to(d))})[0].to(kCpu);
      };
      EXPECT_TRUE(tg::equal(grad_on(kGpu), grad_on(kCpu))) << "case " << c << " " << dt;
    }
  }
}

TEST(CudaGpuAutograd, OffloadHooksMoveSavedTensorsToTheCpu) {
  REQUIRE_GPU();
  const int64_t n = int64_t(1) << 20;  // 4 MiB per float32 tensor
  tg::manual_seed(32);
  Tensor x = tg::randn({n}).to(kGpu).requires_grad_();
  auto forward = [&] { return tg::tanh(tg::exp(x)); };  // exp and tanh save their outputs
  tg::cuda::synchronize();
  int64_t dev0 = tg::cuda::memory_stats().allocated_bytes;
  Tensor y_plain = forward();
  int64_t dev_plain = tg::cuda::memory_stats().allocated_bytes - dev0;
  Tensor g_plain = tg::autograd::grad({y_plain.sum()}, {x})[0].to(kCpu);
  y_plain = Tensor();
  int64_t cpu0 = tg::cuda::host_memory_stats().allocated_bytes;
  dev0 = tg::cuda::memory_stats().allocated_bytes;
  Tensor y;
  {
    tg::autograd::SavedTensorHooksGuard hooks(tg::autograd::hooks::offload_to_cpu());
    y = forward();
  }
  int64_t dev_offload = tg::cuda::memory_stats().allocated_bytes - dev0;
  int64_t cpu_offload = tg::cuda::host_memory_stats().allocated_bytes - cpu0;
  // exp's output lives only as a saved tensor: offloaded, its 4 MiB leave the
  // GPU; both saved outputs (8 MiB) now live in pinned host memory (copied
  // there asynchronously).
  EXPECT_EQ(dev_plain - dev_offload, 4 * n);
  EXPECT_EQ(cpu_offload, 2 * 4 * n);
  Tensor g = tg::autograd::grad({y.sum()}, {x})[0];
  EXPECT_TRUE(g.is_cuda());
  EXPECT_TRUE(tg::equal(g.to(kCpu), g_plain));
}

// The fused activation derivatives on CUDA, each order through the next.
TEST(CudaGpuAutograd, ActivationGradOrders) {
  REQUIRE_GPU();
  for (auto act : {tg::Activation::Silu, tg::Activation::Sigmoid, tg::Activation::Tanh, tg::Activation::Relu,
                   tg::Activation::Gelu}) {
    const double lo = act == tg::Activation::Relu ? 0.1 : -1.5;
    for (int k = 0; k <= 4; ++k) {
      Fn fn = [act, k](const variable_list& v) { return tg::activation_grad(v[0], v[1], act, k); };
      EXPECT_GPU_GRADS("activation_grad " + std::to_string(int(act)) + " order " + std::to_string(k), fn,
                       leaf({3, 4}, 70 + uint64_t(k)), leaf({3, 4}, 80 + uint64_t(k), lo, 1.5));
    }
  }
}

// Threads (docs/STREAMS.md "Backward"): CPU nodes run on the caller, every node on a GPU runs
// on that device's one worker thread, the same thread for every backward.
struct GpuReentrant : tg::autograd::Function<GpuReentrant> {
  static Tensor forward(tg::autograd::AutogradContext* ctx, Tensor x) {
    ctx->save_for_backward({x});
    return tg::sin(x);
  }
  static variable_list backward(tg::autograd::AutogradContext* ctx, variable_list g) {
    // A nested backward on the worker thread (runs inline there).
    Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_();
    Tensor d;
    {
      tg::EnableGradGuard on;
      d = tg::autograd::grad({tg::sin(x).sum()}, {x})[0];
    }
    return {g[0] * d};
  }
};

struct FailsOnGpu : tg::autograd::Function<FailsOnGpu> {
  static Tensor forward(tg::autograd::AutogradContext*, Tensor x) { return x * 1.0; }
  static variable_list backward(tg::autograd::AutogradContext*, variable_list g) {
    TG_CHECK(false, "FailsOnGpu: backward refused a gradient of shape ", tg::shape_str(g[0].sizes()));
    return {};
  }
};

TEST(CudaGpuAutograd, GpuNodesRunOnOneWorkerThreadPerDevice) {
  REQUIRE_GPU();
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex m;
  std::map<std::string, std::set<std::thread::id>> threads;
  auto watch = [&](const Tensor& t) {
    auto fn = t.grad_fn();
    std::string name = fn->name() + (t.is_cuda() ? "@gpu" : "@cpu");
    fn->add_post_hook([&, name](const variable_list&, const variable_list&) {
      std::lock_guard<std::mutex> lock(m);
      threads[name].insert(std::this_thread::get_id());
    });
  };
  Tensor x = leaf({64}, 41);
  for (int rep = 0; rep < 2; ++rep) {
    Tensor xg = x.to(kGpu);
    watch(xg);
    Tensor e = tg::exp(xg);
    watch(e);
    Tensor r = GpuReentrant::apply(e);
    Tensor s = r.sum().to(kCpu);
    watch(s);
    Tensor y = s * 2.0;  // on the CPU
    watch(y);
    Tensor gx = tg::autograd::grad({y}, {x})[0];
    Tensor expect = (2.0 * tg::cos(tg::exp(x)) * tg::exp(x)).detach();
    EXPECT_TRUE(tg::allclose(gx, expect, 1e-12, 1e-12));
  }
  std::set<std::thread::id> gpu_threads;
  for (auto& [name, ids] : threads) {
    SCOPED_TRACE(name);
    ASSERT_EQ(ids.size(), 1u);  // the same thread in both backward passes
    bool on_gpu = name.find("@gpu") != std::string::npos;
    // A node runs where the gradient it receives lives: ToCopyBackward of
    // x.to(gpu) on the worker, that of .to(cpu) on the caller.
    if (on_gpu) {
      EXPECT_NE(*ids.begin(), caller);
      gpu_threads.insert(*ids.begin());
    } else {
      EXPECT_EQ(*ids.begin(), caller);
    }
  }
  EXPECT_EQ(gpu_threads.size(), 1u);
  EXPECT_EQ(threads.size(), 4u);

  // An error in a node on the worker reaches the caller; the engine (and the
  // worker) are usable afterwards.
  Tensor xg = x.to(kGpu);
  Tensor bad = FailsOnGpu::apply(tg::exp(xg)).sum();
  try {
    tg::autograd::grad({bad}, {x});
    ADD_FAILURE() << "no error";
  } catch (const tg::Error& err) {
    EXPECT_NE(std::string(err.what()).find("FailsOnGpu: backward refused a gradient of shape [64]"), std::string::npos)
        << err.what();
  }
  Tensor ok = tg::autograd::grad({tg::exp(x.to(kGpu)).sum()}, {x})[0];
  EXPECT_TRUE(tg::allclose(ok, tg::exp(x).detach(), 1e-12, 1e-12));

  // The caller's grad mode and saved-tensor hooks hold on the worker:
  // create_graph records there, and a backward of a graph built under the
  // offload hooks unpacks on the worker.
  Tensor xs = x.to(kGpu);
  Tensor g1 = tg::autograd::grad({tg::sin(xs).sum()}, {x}, {}, std::nullopt, true)[0];
  ASSERT_TRUE(g1.requires_grad());
  Tensor g2 = tg::autograd::grad({g1.sum()}, {x})[0];
  EXPECT_TRUE(tg::allclose(g2, (-tg::sin(x)).detach(), 1e-12, 1e-12));
}

// Two GPUs: each device's nodes run on its own worker thread, gradients
// cross devices through ToCopyBackward and meet on the CPU. Skips with fewer
// than two GPUs (run it on the nvidia-h200-x2 machine).
TEST(CudaGpuAutograd, TwoDevicesRunOnTheirOwnWorkers) {
  REQUIRE_GPU();
  if (tg::cuda::device_count() < 2)
    GTEST_SKIP() << "needs two CUDA GPUs, " << tg::cuda::device_count()
                 << " visible; this test runs on a multi-GPU machine";
  const tg::Device g0(tg::kCUDA, 0), g1(tg::kCUDA, 1);
  std::mutex m;
  std::map<int, std::set<std::thread::id>> threads;  // device -> threads
  auto watch = [&](const Tensor& t) {
    int d = t.device().index();
    t.grad_fn()->add_post_hook([&, d](const variable_list&, const variable_list&) {
      std::lock_guard<std::mutex> lock(m);
      threads[d].insert(std::this_thread::get_id());
    });
  };
  Tensor x = leaf({1000}, 43);
  Tensor a = tg::exp(x.to(g0));
  Tensor b = tg::sin(x.to(g1));
  watch(a);
  watch(b);
  Tensor ab = a * b.to(g0);  // device 1 -> device 0
  watch(ab);
  Tensor y = ab.sum().to(kCpu) + tg::tanh(x).sum();
  Tensor gx = tg::autograd::grad({y}, {x})[0];
  Tensor ex = tg::exp(x).detach(), sx = tg::sin(x).detach(), cx = tg::cos(x).detach();
  Tensor expect = ex * sx + ex * cx + (1.0 - tg::tanh(x).detach() * tg::tanh(x).detach());
  EXPECT_TRUE(tg::allclose(gx, expect, 1e-12, 1e-12));
  ASSERT_EQ(threads[0].size(), 1u);
  ASSERT_EQ(threads[1].size(), 1u);
  EXPECT_NE(*threads[0].begin(), *threads[1].begin());
  EXPECT_EQ(threads[0].count(std::this_thread::get_id()), 0u);
}

}  // namespace

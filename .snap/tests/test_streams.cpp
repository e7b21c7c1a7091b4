// The stream rules of backward: the accumulation-stream choice as a pure
// function (every case, no GPU needed), and on a GPU a forward whose branches
// run on side streams, with delay kernels on the producers.
#include <chrono>
#include <optional>

#include "autograd/stream_rules.h"

#include "reference.h"

namespace {

using tg::Tensor;
using tg::cuda::Stream;
namespace ag = tg::autograd;

// Stream values need no GPU: {device, handle}.
Stream fake(int device, uintptr_t h) { return Stream(device, reinterpret_cast<void*>(h)); }

TEST(StreamRules, EveryCaseWithoutAGpu) {
  const tg::Device gpu0(tg::kCUDA, 0), gpu1(tg::kCUDA, 1);
  Stream p0 = fake(0, 0x10), c0 = fake(0, 0x20), cur0 = fake(0, 0);
  Stream p1 = fake(1, 0x30), c1 = fake(1, 0x40), cur1 = fake(1, 0);
  // Same device: the consumer's stream.
  auto d = ag::choose_accumulation_stream(gpu0, p0, c0, cur0);
  EXPECT_EQ(d.rule, ag::AccumulateOn::ConsumerStream);
  EXPECT_EQ(d.stream, c0);
  // The gradient on the consumer's device only: the consumer's stream.
  d = ag::choose_accumulation_stream(gpu0, p1, c0, cur0);
  EXPECT_EQ(d.rule, ag::AccumulateOn::ConsumerStream);
  EXPECT_EQ(d.stream, c0);
  // On the producer's device only: the producer's stream.
  d = ag::choose_accumulation_stream(gpu0, p0, c1, cur0);
  EXPECT_EQ(d.rule, ag::AccumulateOn::ProducerStream);
  EXPECT_EQ(d.stream, p0);
  // Neither: the current stream of the gradient's device.
  d = ag::choose_accumulation_stream(gpu0, p1, c1, cur0);
  EXPECT_EQ(d.rule, ag::AccumulateOn::CurrentStream);
  EXPECT_EQ(d.stream, cur0);
  // CPU gradient: no stream at all.
  d = ag::choose_accumulation_stream(tg::Device(tg::kCPU), p0, c0, cur0);
  EXPECT_EQ(d.rule, ag::AccumulateOn::Cpu);
  EXPECT_FALSE(d.stream.is_valid());
  // A missing producer/consumer stream reads as the device's current one.
  EXPECT_EQ(ag::resolve_stream(Stream(), cur1), cur1);
  EXPECT_EQ(ag::resolve_stream(p1, cur1), p1);
  EXPECT_EQ(
      ag::choose_accumulation_stream(gpu1, ag::resolve_stream(Stream(), cur1), ag::resolve_stream(Stream(), cur1), cur1)
          .stream,
      cur1);
  // Events only when somebody will wait.
  EXPECT_FALSE(ag::first_producer_needs_event(c0, c0, c0));
  EXPECT_TRUE(ag::first_producer_needs_event(p0, c0, c0));  // consumer on another stream
  EXPECT_TRUE(ag::first_producer_needs_event(p0, p0, c1));  // a later accumulation elsewhere
}

const tg::Device kGpu(tg::kCUDA, 0);
const tg::Device kCpu(tg::kCPU);

// Identity whose backward first spins `ms` on its stream (the producer of
// the gradient it passes on).
double g_delay_ms = 0;
struct Delay : ag::Function<Delay> {
  static Tensor forward(ag::AutogradContext*, Tensor x) { return x * 1.0; }
  static ag::variable_list backward(ag::AutogradContext*, ag::variable_list g) {
    if (g_delay_ms > 0) tg::cuda::delay(tg::cuda::current_stream(), g_delay_ms);
    return {g[0] * 1.0};
  }
};

struct Branches {
  Tensor x, w1, w2, loss;
};

// x on the caller's stream; branch 1 on s1, branch 2 on s2; they meet on s3.
Branches forward(const Stream& s1, const Stream& s2, const Stream& s3, bool use_streams) {
  Branches b;
  tg::manual_seed(9);
  auto o = tg::TensorOptions().dtype(tg::kFloat64);
  b.x = tg::randn({512, 64}, o).to(kGpu).requires_grad_();
  b.w1 = tg::randn({64, 64}, o).to(kGpu).requires_grad_();
  b.w2 = tg::randn({64, 64}, o).to(kGpu).requires_grad_();
  Stream caller = tg::cuda::current_stream();
  Tensor y1, y2;
  {
    std::optional<tg::cuda::StreamGuard> g;
    if (use_streams) {
      s1.wait_stream(caller);
      g.emplace(s1);
    }
    y1 = Delay::apply(tg::tanh(tg::mm(b.x, b.w1)));
  }
  {
    std::optional<tg::cuda::StreamGuard> g;
    if (use_streams) {
      s2.wait_stream(caller);
      g.emplace(s2);
    }
    y2 = Delay::apply(tg::sigmoid(tg::mm(b.x, b.w2)));
  }
  {
    std::optional<tg::cuda::StreamGuard> g;
    if (use_streams) {
      s3.wait_stream(s1);
      s3.wait_stream(s2);
      g.emplace(s3);
    }
    b.loss = Delay::apply(y1 * y2 + y1).sum();
  }
  if (use_streams) caller.wait_stream(s3);
  return b;
}

TEST(CudaGpuStreams, BranchesOnSideStreamsMatchOneStreamWithoutHostSync) {
  REQUIRE_GPU();
  Stream s1 = tg::cuda::stream_from_pool(), s2 = tg::cuda::stream_from_pool(), s3 = tg::cuda::stream_from_pool();
  ASSERT_NE(s1, s2);
  g_delay_ms = 0;
  Branches ref = forward(s1, s2, s3, false);
  ref.loss.backward();
  Tensor gx = ref.x.grad().to(kCpu), g1 = ref.w1.grad().to(kCpu), g2 = ref.w2.grad().to(kCpu);

  for (int rep = 0; rep < 3; ++rep) {
    Branches b = forward(s1, s2, s3, true);
    tg::cuda::synchronize();
    g_delay_ms = 200;  // on s3, then on s1 and s2 as each branch's backward starts
    auto t0 = std::chrono::steady_clock::now();
    b.loss.backward();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    g_delay_ms = 0;
    // backward only queued the work: it returned long before the delays ended.
    EXPECT_LT(ms, 150.0) << "backward waited on the host";
    EXPECT_FALSE(s3.query());
    // Reading .grad on the caller's stream sees the finished result (the
    // caller's stream waits on the leaf streams through events).
    EXPECT_TRUE(tg::equal(b.x.grad().to(kCpu), gx));
    EXPECT_TRUE(tg::equal(b.w1.grad().to(kCpu), g1));
    EXPECT_TRUE(tg::equal(b.w2.grad().to(kCpu), g2));
  }
}

TEST(CudaGpuStreams, GradCapturesAreReadyOnTheCallersStream) {
  REQUIRE_GPU();
  Stream s1 = tg::cuda::stream_from_pool();
  auto o = tg::TensorOptions().dtype(tg::kFloat64).device(kGpu);
  Tensor x = tg::ones({1 << 16}, o).requires_grad_();
  Tensor y;
  {
    tg::cuda::StreamGuard g(s1);
    y = Delay::apply(x * 3.0);
  }
  tg::cuda::current_stream().wait_stream(s1);
  g_delay_ms = 100;
  Tensor gx = ag::grad({y.sum()}, {x})[0];  // the Delay node runs on s1
  g_delay_ms = 0;
  EXPECT_TRUE(tg::equal(gx.to(kCpu), tg::full({1 << 16}, 3.0, tg::TensorOptions().dtype(tg::kFloat64))));
}

}  // namespace

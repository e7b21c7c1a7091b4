// CUDA runtime (streams, events, guards) and the caching allocator. GPU tests
// skip with a message without a GPU; on the GPU machine they must run.
#include <chrono>
#include <thread>

#include "reference.h"

namespace {

using tg::Tensor;
namespace cu = tg::cuda;

void* storage_ptr(const Tensor& t) { return t.impl()->storage()->data(); }
Tensor cuda_empty(int64_t bytes) {
  return tg::empty({bytes / 4}, tg::TensorOptions().device(tg::Device(tg::kCUDA, 0)));
}

// Runs on every machine: with a GPU the calls work, without one they say why.
TEST(CudaRuntime, CallsWorkOrSayWhy) {
  if (cu::is_available()) {
    EXPECT_TRUE(cu::current_stream().is_default());
    EXPECT_EQ(cuda_empty(1024).device(), tg::Device(tg::kCUDA, 0));
    return;
  }
  tgtest::expect_error_containing_one_of(
      [] { cu::current_stream(); }, {"current_stream: tapegrad was built without CUDA", "no CUDA device is available"});
  tgtest::expect_error_containing_one_of(
      [] { cuda_empty(1024); }, {"allocate: no CUDA device is available", "allocate: no allocator for device cuda:0"});
  try {
    tg::ones({4}).pin_memory();
    ADD_FAILURE() << "expected an error";
  } catch (const tg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pin_memory: page-locked host memory needs"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(tg::ones({4}).is_pinned());
  EXPECT_EQ(tg::ones({2}).sum().item<float>(), 2.0f);  // still usable
}

// Pinned host memory: non_blocking copies return before queued work is done
// (proved with a delay kernel ahead of them), and a pinned block that a copy
// still uses is not handed out again after it is freed.
TEST(CudaGpu, PinnedMemoryAndNonBlockingCopies) {
  REQUIRE_GPU();
  using Clock = std::chrono::steady_clock;
  const tg::Device gpu(tg::kCUDA, 0), cpu(tg::kCPU);
  const int64_t n = int64_t(1) << 22;  // 16 MiB of float32
  tg::manual_seed(5);
  Tensor x = tg::randn({n});
  Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_FALSE(x.is_pinned());
  EXPECT_TRUE(p.pin_memory().is_same(p));
  EXPECT_TRUE(tg::equal(p, x));
  EXPECT_THROW(tg::ones({2}).to(gpu).pin_memory(), tg::Error);

  cu::Stream s = cu::stream_from_pool();
  cu::StreamGuard on(s);
  // Host to device from pinned memory, non_blocking: returns at once.
  cu::delay(s, 300);
  auto t0 = Clock::now();
  Tensor g = p.to(gpu, /*non_blocking=*/true);
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_LT(ms, 150.0);
  EXPECT_FALSE(s.query());
  // Freed while the copy is queued: the block waits, a new one is handed out.
  void* base = storage_ptr(p);
  p = Tensor();
  EXPECT_EQ(cu::host_memory_stats().pending_blocks, 1);
  Tensor q = tg::empty({n}).pin_memory();
  EXPECT_NE(storage_ptr(q), base);
  s.synchronize();
  EXPECT_TRUE(tg::equal(g.to(cpu), x));
  EXPECT_EQ(cu::host_memory_stats().pending_blocks, 0);
  Tensor r = tg::empty({n}).pin_memory();  // the copy is done: reused
  EXPECT_EQ(storage_ptr(r), base);

  // Device to host, non_blocking: a pinned result, valid once the stream is.
  cu::delay(s, 300);
  Tensor h = (g * 2.0f).to(cpu, /*non_blocking=*/true);
  EXPECT_TRUE(h.is_pinned());
  EXPECT_FALSE(s.query());
  s.synchronize();
  EXPECT_TRUE(tg::equal(h, x * 2.0f));

  // Without non_blocking, a copy from pinned memory is complete on return.
  cu::delay(s, 100);
  Tensor g2 = r.copy_(x).to(gpu);
  EXPECT_TRUE(s.query());
  EXPECT_TRUE(tg::equal(g2.to(cpu), x));

  // copy_ between devices: into pinned memory asynchronously, into a
  // strided CPU view, and with a dtype change on the way.
  r.copy_(g * 3.0f, /*non_blocking=*/true);
  s.synchronize();
  EXPECT_TRUE(tg::equal(r, x * 3.0f));
  Tensor m = tg::zeros({4, 6}, tg::TensorOptions().dtype(tg::kFloat64));
  Tensor src = tg::arange(12).to(tg::kFloat32).view({3, 4}).to(gpu);
  m.t().narrow(0, 1, 3).copy_(src);  // a [3, 4] non-contiguous view of m
  EXPECT_TRUE(tg::equal(m.t().narrow(0, 1, 3), tg::arange(12).to(tg::kFloat64).view({3, 4})));
  EXPECT_EQ(m.sum().item<double>(), 66.0);
}

TEST(CudaGpu, StreamsGuardsAndThreadLocalCurrentStream) {
  REQUIRE_GPU();
  cu::Stream def = cu::default_stream();
  EXPECT_TRUE(def.is_default());
  EXPECT_EQ(cu::current_stream(), def);
  cu::Stream a = cu::stream_from_pool(), b = cu::stream_from_pool();
  EXPECT_FALSE(a.is_default());
  EXPECT_NE(a, b);
  {
    cu::StreamGuard g(a);
    EXPECT_EQ(cu::current_stream(), a);
    cu::Stream seen_elsewhere;
    std::thread([&] { seen_elsewhere = cu::current_stream(0); }).join();
    EXPECT_EQ(seen_elsewhere, def);  // per thread
    {
      cu::StreamGuard g2(b);
      EXPECT_EQ(cu::current_stream(), b);
    }
    EXPECT_EQ(cu::current_stream(), a);
  }
  EXPECT_EQ(cu::current_stream(), def);
  {
    cu::DeviceGuard g(0);
    EXPECT_EQ(cu::current_device(), 0);
  }
}

TEST(CudaGpu, EventsOrderStreamsWithoutHostSync) {
  REQUIRE_GPU();
  cu::Stream s1 = cu::stream_from_pool(), s2 = cu::stream_from_pool();
  cu::Event start(true), stop(true);
  start.record(s1);
  cu::delay(s1, 50);
  stop.record(s1);
  EXPECT_FALSE(s1.query());  // the delay is still running: nothing waited on the host
  EXPECT_FALSE(stop.query());
  s2.wait_stream(s1);  // s2 waits on the device
  cu::Event after(true);
  after.record(s2);
  EXPECT_FALSE(after.query());
  after.synchronize();
  EXPECT_TRUE(stop.query());  // s2's work could only finish after s1's
  EXPECT_TRUE(s1.query());
  float ms = start.elapsed_time(stop);
  EXPECT_GT(ms, 40.0f);
  EXPECT_LT(ms, 500.0f);
  cu::Event never;
  EXPECT_TRUE(never.query());  // never recorded: nothing to wait for
  never.block(s2);             // and waiting on it is a no-op
  try {
    never.elapsed_time(stop);
    ADD_FAILURE() << "expected an error";
  } catch (const tg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Event::elapsed_time: both events need enable_timing"), std::string::npos)
        << e.what();
  }
}

// Earlier tests of the same process may leave live blocks in small
// segments that empty_cache keeps (a cached handle's workspace, say), with
// free room beside them. The test first fills every such hole of at least
// 4096 bytes, so that its own first block opens a new segment whatever ran
// before it (with ctest's process per test there are none).
TEST(CudaGpu, AllocatorReusesSplitsAndCounts) {
  REQUIRE_GPU();
  cu::empty_cache();
  const cu::MemoryStats start = cu::memory_stats();
  std::vector<Tensor> fillers;
  Tensor a;
  const int64_t most = (start.reserved_bytes - start.allocated_bytes) / 4096 + 1;
  for (int64_t i = 0; i <= most; ++i) {
    const int64_t segments = cu::memory_stats().num_segments;
    Tensor t = cuda_empty(4096);
    if (cu::memory_stats().num_segments > segments) {
      a = t;
      break;
    }
    fillers.push_back(t);
  }
  ASSERT_TRUE(a.defined()) << "no new segment after " << fillers.size() << " blocks of 4096 bytes";
  EXPECT_LE(int64_t(fillers.size()) * 4096, start.reserved_bytes - start.allocated_bytes);
  const cu::MemoryStats base = [&] {
    cu::MemoryStats s = cu::memory_stats();  // as if a had not been allocated yet
    s.allocated_bytes -= 4096;
    s.reserved_bytes -= 2 << 20;
    s.num_segments -= 1;
    return s;
  }();
  void* first = storage_ptr(a);
  {
    Tensor b = cuda_empty(4096);  // split from the same 2 MiB small segment
    cu::MemoryStats s = cu::memory_stats();
    EXPECT_EQ(s.allocated_bytes - base.allocated_bytes, 8192);
    EXPECT_EQ(s.num_segments - base.num_segments, 1);
    EXPECT_EQ(s.reserved_bytes - base.reserved_bytes, 2 << 20);
    EXPECT_EQ(static_cast<char*>(storage_ptr(b)) - static_cast<char*>(first), 4096);
    a = Tensor();
  }
  cu::MemoryStats freed = cu::memory_stats();
  EXPECT_EQ(freed.allocated_bytes, base.allocated_bytes);
  EXPECT_EQ(freed.reserved_bytes - base.reserved_bytes, 2 << 20);  // cached
  {
    Tensor c = cuda_empty(4096);
    EXPECT_EQ(storage_ptr(c), first);  // reused, no new segment
    EXPECT_EQ(cu::memory_stats().num_cuda_mallocs, freed.num_cuda_mallocs);
  }
  {
    Tensor big = cuda_empty(int64_t(5) << 20);  // large pool: its own 6 MiB segment
    EXPECT_EQ(cu::memory_stats().reserved_bytes - freed.reserved_bytes, int64_t(6) << 20);
    EXPECT_GE(cu::memory_stats().peak_allocated_bytes, int64_t(5) << 20);
  }
  fillers.clear();
  cu::empty_cache();
  EXPECT_EQ(cu::memory_stats().reserved_bytes, start.reserved_bytes);
  EXPECT_EQ(cu::memory_stats().allocated_bytes, start.allocated_bytes);
  cu::reset_peak_memory_stats();
  EXPECT_EQ(cu::memory_stats().peak_allocated_bytes, cu::memory_stats().allocated_bytes);
}

TEST(CudaGpu, RecordStreamProtectsABlockUntilTheOtherStreamIsDone) {
  REQUIRE_GPU();
  cu::empty_cache();
  cu::Stream side = cu::stream_from_pool();
  void* p;
  {
    Tensor x = cuda_empty(1 << 16);
    p = storage_ptr(x);
    cu::delay(side, 100);  // "side still uses x"
    cu::record_stream(p, side);
  }  // freed while side is busy
  EXPECT_EQ(cu::memory_stats().pending_event_blocks, 1);
  {
    Tensor y = cuda_empty(1 << 16);
    EXPECT_NE(storage_ptr(y), p);  // not handed out while side may still use it
  }
  side.synchronize();
  {
    Tensor z = cuda_empty(1 << 16);
    EXPECT_EQ(cu::memory_stats().pending_event_blocks, 0);
    EXPECT_EQ(storage_ptr(z), p);  // the event completed: reusable
  }
  try {
    cu::record_stream(static_cast<char*>(p) + 8, side);
    ADD_FAILURE() << "expected an error";
  } catch (const tg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not the start of a block of the CUDA caching allocator"),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaGpu, OutOfMemoryIsAClearErrorAndTheAllocatorRecovers) {
  REQUIRE_GPU();
  int64_t total = cu::get_device_properties(0).total_memory;
  int64_t ooms = cu::memory_stats().num_ooms;
  try {
    cuda_empty(total * 2);
    ADD_FAILURE() << "expected an error";
  } catch (const tg::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("CUDA out of memory: tried to allocate " + std::to_string(total * 2) + " bytes"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
  }
  EXPECT_EQ(cu::memory_stats().num_ooms, ooms + 1);
  Tensor ok = cuda_empty(1 << 20);  // still usable
  EXPECT_NE(storage_ptr(ok), nullptr);
}

}  // namespace

// DLPack exchange (include/tapegrad/tensor/dlpack.h): zero-copy round trips
// for every dtype, strided and offset views, a hand-made producer's
// lifetime (its deleter runs once, when the last view dies, also when the
// import is refused), refusals that name what is unsupported, and on the GPU
// the same with the stream exchange rule. The ASan build checks the
// lifetimes for leaks and double frees.
#include <dlpack/dlpack.h>

#include <cstring>
#include <vector>

#include "reference.h"

namespace {

using tg::Tensor;
namespace ag = tg::autograd;

const tg::Device kCpu(tg::kCPU);
const tg::Device kGpu(tg::kCUDA, 0);

// A producer's tensor: its own buffer, shape and strides, and a deleter that
// counts its calls (and frees what it owns).
struct Producer {
  DLManagedTensor managed{};
  std::vector<double> buffer;
  std::vector<int64_t> shape, strides;
  int* deleted;
};

DLManagedTensor* make_producer(std::vector<double> buffer, std::vector<int64_t> shape, std::vector<int64_t> strides,
                               uint64_t byte_offset, int* deleted, DLDataType dtype = {kDLFloat, 64, 1},
                               DLDeviceType dev = kDLCPU) {
  auto* p = new Producer;
  p->buffer = std::move(buffer);
  p->shape = std::move(shape);
  p->strides = std::move(strides);
  p->deleted = deleted;
  DLTensor& t = p->managed.dl_tensor;
  t.data = p->buffer.data();
  t.device = {dev, 0};
  t.ndim = int(p->shape.size());
  t.dtype = dtype;
  t.shape = p->shape.data();
  t.strides = p->strides.empty() ? nullptr : p->strides.data();
  t.byte_offset = byte_offset;
  p->managed.manager_ctx = p;
  p->managed.deleter = [](DLManagedTensor* m) {
    auto* self = static_cast<Producer*>(m->manager_ctx);
    ++*self->deleted;
    delete self;
  };
  return &p->managed;
}

const std::vector<tg::ScalarType> kDtypes = {tg::kFloat32,  tg::kFloat64, tg::kFloat16,
                                             tg::kBFloat16, tg::kInt64,   tg::kBool};

// Round trips through DLPack on `dev`: the same memory, sizes, strides and
// values, for contiguous, transposed, narrowed (offset) and stepped views.
void round_trips(tg::Device dev) {
  for (tg::ScalarType dt : kDtypes) {
    SCOPED_TRACE(tg::to_string(dt));
    tg::manual_seed(3);
    Tensor base = (tg::randn({4, 6}, tg::TensorOptions().dtype(tg::kFloat64)) * 3).to(dt).to(dev);
    const std::vector<std::pair<const char*, Tensor>> views = {{"contiguous", base},
                                                               {"transposed", base.t()},
                                                               {"narrowed", base.narrow(1, 2, 3)},
                                                               {"stepped", base.as_strided({2, 3}, {12, 2}, 1)},
                                                               {"zero-size", base.narrow(0, 1, 0)}};
    for (const auto& [name, v] : views) {
      SCOPED_TRACE(name);
      DLManagedTensor* m = tg::to_dlpack(v);
      EXPECT_EQ(m->dl_tensor.data, v.data_ptr());
      EXPECT_EQ(m->dl_tensor.device.device_type, dev.is_cuda() ? kDLCUDA : kDLCPU);
      Tensor back = tg::from_dlpack(m);
      EXPECT_EQ(back.data_ptr(), v.data_ptr());  // zero copy both ways
      EXPECT_EQ(back.sizes(), v.sizes());
      EXPECT_EQ(back.strides(), v.strides());
      EXPECT_EQ(back.dtype(), dt);
      EXPECT_EQ(back.device(), dev);
      EXPECT_FALSE(back.requires_grad());
      EXPECT_TRUE(tg::equal(back.to(kCpu), v.to(kCpu)));
    }
  }
}

TEST(DLPack, RoundTripsEveryDtypeAndViewWithoutCopies) { round_trips(kCpu); }

TEST(DLPack, ProducerStridesOffsetsAndLifetime) {
  int deleted = 0;
  {
    // Column-major 3 x 4 in a buffer of 14 doubles, starting 2 elements in.
    std::vector<double> buf(14);
    for (size_t i = 0; i < buf.size(); ++i)
      buf[i] = double(i);
    Tensor t = tg::from_dlpack(make_producer(buf, {3, 4}, {1, 3}, 2 * sizeof(double), &deleted));
    EXPECT_EQ(t.sizes(), (tg::IntList{3, 4}));
    EXPECT_EQ(t.strides(), (tg::IntList{1, 3}));
    EXPECT_FALSE(t.is_contiguous());
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        EXPECT_EQ(t.select(0, i).select(0, j).item<double>(), double(2 + i + 3 * j));
    Tensor view = t.narrow(1, 1, 2);
    t = Tensor();
    EXPECT_EQ(deleted, 0) << "a view still uses the producer's memory";
    // Writes go to the producer's memory (zero copy): read it back through DLPack.
    view.fill_(7.0);
    DLManagedTensor* again = tg::to_dlpack(view);
    const double* p = static_cast<const double*>(again->dl_tensor.data);
    EXPECT_EQ(p[0], 7.0);
    view = Tensor();
    EXPECT_EQ(deleted, 0) << "the export still holds the memory";
    again->deleter(again);
    EXPECT_EQ(deleted, 1);
  }
  EXPECT_EQ(deleted, 1);
  // No strides: row-major.
  Tensor r = tg::from_dlpack(make_producer({1, 2, 3, 4, 5, 6}, {2, 3}, {}, 0, &deleted));
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(r.select(0, 1).select(0, 0).item<double>(), 4.0);
  r = Tensor();
  EXPECT_EQ(deleted, 2);
}

// from_blob: the caller's memory, its release once when the last view dies,
// and not at all when the call throws.
TEST(DLPack, FromBlobViewsTheCallersMemory) {
  static int released = 0;
  released = 0;
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  {
    Tensor t = tg::from_blob(buf.data(), {3, 2}, {1, 3}, tg::kFloat32, kCpu, [](void*) { ++released; });
    EXPECT_EQ(t.data_ptr(), buf.data());
    EXPECT_EQ(t.select(0, 1).select(0, 1).item<float>(), 5.0f);  // element 1 + 3
    buf[0] = 10;
    EXPECT_EQ(t.sum().item<float>(), 30.0f);
    Tensor row = t.select(1, 0);
    t = Tensor();
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 1);
  EXPECT_ERROR_CONTAINS(tg::from_blob(buf.data(), {2}, {-1}, tg::kFloat32, kCpu, [](void*) { ++released; }),
                        "negative stride");
  EXPECT_ERROR_CONTAINS(tg::from_blob(nullptr, {2}, {}, tg::kFloat32, kCpu), "data is null");
  EXPECT_ERROR_CONTAINS(tg::from_blob(buf.data(), {2, 3}, {1}, tg::kFloat32, kCpu), "1 strides for the shape [2, 3]");
  EXPECT_EQ(released, 1) << "a refused blob stays the caller's";
  Tensor none = tg::from_blob(buf.data(), {2, 3}, {}, tg::kFloat32, kCpu);  // no release: the caller keeps it
  EXPECT_TRUE(none.is_contiguous());
}

TEST(DLPack, ImportedTensorsJoinAutograd) {
  int deleted = 0;
  {
    Tensor x = tg::from_dlpack(make_producer({0.5, -1.0, 2.0}, {3}, {}, 0, &deleted));
    x.requires_grad_(true);
    Tensor g = ag::grad({tg::sin(x).sum()}, {x})[0];
    EXPECT_TRUE(tg::allclose(g, tg::cos(x.detach()), 1e-15, 0));
    // A gradient imported from DLPack as grad_outputs.
    Tensor v = tg::from_dlpack(make_producer({1.0, 2.0, 3.0}, {3}, {}, 0, &deleted));
    Tensor y = x * x;
    Tensor gy = ag::grad({y}, {x}, {v})[0];
    EXPECT_TRUE(tg::allclose(gy, x.detach() * v * 2.0, 1e-15, 0));
  }
  EXPECT_EQ(deleted, 2);
}

TEST(DLPack, RefusalsNameWhatIsUnsupportedAndReleaseTheProducer) {
  int deleted = 0;
  EXPECT_ERROR_CONTAINS(tg::from_dlpack(make_producer({1, 2}, {2}, {}, 0, &deleted, {kDLUInt, 8, 1})),
                        "dtype uint8 is not supported");
  EXPECT_ERROR_CONTAINS(tg::from_dlpack(make_producer({1, 2}, {2}, {}, 0, &deleted, {kDLFloat, 32, 4})),
                        "dtype float32x4 is not supported");
  EXPECT_ERROR_CONTAINS(tg::from_dlpack(make_producer({1, 2}, {2}, {-1}, 8, &deleted)), "negative stride");
  EXPECT_ERROR_CONTAINS(tg::from_dlpack(make_producer({1, 2}, {2}, {}, 0, &deleted, {kDLFloat, 64, 1}, kDLVulkan)),
                        "device type 7 (Vulkan) is not supported");
  EXPECT_EQ(deleted, 4) << "each refused import released its producer once";
  if (!tg::cuda::is_available())
    EXPECT_ERROR_CONTAINS(tg::from_dlpack(make_producer({1, 2}, {2}, {}, 0, &deleted, {kDLFloat, 64, 1}, kDLCUDA)),
                          "this process has 0 CUDA device(s)");
  EXPECT_ERROR_CONTAINS(tg::from_dlpack(nullptr), "null DLManagedTensor");
  Tensor w = tg::ones({2}).requires_grad_();
  EXPECT_ERROR_CONTAINS(tg::to_dlpack(w), "requires grad; export t.detach()");
  Tensor s = tg::sparse_coo_tensor(tg::tensor({0, 1}, {1, 2}, tg::TensorOptions().dtype(tg::kInt64)),
                                   tg::tensor({1, 2}, {2}), {3});
  EXPECT_ERROR_CONTAINS(tg::to_dlpack(s), "sparse tensors have no DLPack form");
  // Still usable afterwards.
  DLManagedTensor* m = tg::to_dlpack(w.detach());
  EXPECT_EQ(tg::from_dlpack(m).sum().item<float>(), 2.0f);
}

// A claim whose first element is an address but whose extent runs past the
// end of the address space is refused before any storage exists (reading it
// would wrap around to address 0).
TEST(DLPack, RefusesAnExtentThatOverflowsTheAddressSpace) {
  int deleted = 0;
  DLManagedTensor* m = make_producer({1, 2}, {4}, {}, 0, &deleted);
  const uintptr_t data = reinterpret_cast<uintptr_t>(m->dl_tensor.data);
  const uintptr_t top = (~uintptr_t(0) - 15) & ~uintptr_t(7);  // aligned, 16 bytes below the end
  m->dl_tensor.byte_offset = uint64_t(top - data);             // 4 doubles need 32 bytes from there
  EXPECT_ERROR_CONTAINS(tg::from_dlpack(m), "overflows the address space");
  EXPECT_EQ(deleted, 1);
  // One element (8 bytes) fits below the end: the check is exact, not a guess.
  m = make_producer({1, 2}, {1}, {}, 0, &deleted);
  m->dl_tensor.byte_offset = uint64_t(top - reinterpret_cast<uintptr_t>(m->dl_tensor.data));
  {
    Tensor t = tg::from_dlpack(m);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()), top);
  }
  EXPECT_EQ(deleted, 2);
  EXPECT_ERROR_CONTAINS(tg::from_blob(reinterpret_cast<void*>(top), {3}, {}, tg::kFloat64, kCpu, nullptr, nullptr),
                        "overflows the address space");
}

TEST(DLPackGpu, RoundTripsEveryDtypeAndViewWithoutCopies) {
  REQUIRE_GPU();
  round_trips(kGpu);
}

// The stream exchange rule: a producer writes on its stream; importing with
// that stream makes the current stream wait (no host sync), so a kernel
// queued next on the current stream reads the written values. And the
// reverse: an export for a consumer stream makes it wait on ours.
TEST(DLPackGpu, StreamExchangeRule) {
  REQUIRE_GPU();
  namespace cu = tg::cuda;
  cu::Stream producer = cu::stream_from_pool();
  Tensor src = tg::zeros({1 << 20}).to(kGpu);
  cu::current_stream().synchronize();
  DLManagedTensor* m = nullptr;
  {
    cu::StreamGuard on(producer);
    Tensor big = tg::randn({256, 256}).to(kGpu);
    for (int i = 0; i < 4; ++i)
      big = tg::matmul(big, big) * 1e-3;  // keep the producer busy
    src.fill_(3.0);
    m = tg::to_dlpack(src);
  }
  Tensor t = tg::from_dlpack(m, producer);
  EXPECT_EQ(t.sum().item<double>(), 3.0 * (1 << 20));
  // Export for a consumer stream: it waits on the current stream's work.
  cu::Stream consumer = cu::stream_from_pool();
  Tensor y = t * 2.0;  // queued on the current stream
  DLManagedTensor* out = tg::to_dlpack(y, consumer);
  Tensor seen;
  {
    cu::StreamGuard on(consumer);
    seen = tg::from_dlpack(out).sum();
  }
  consumer.synchronize();
  EXPECT_EQ(seen.item<double>(), 6.0 * (1 << 20));
  // Gradients through imported CUDA memory (grad_outputs from DLPack).
  Tensor x = tg::randn({64}).to(kGpu).requires_grad_();
  Tensor v = tg::from_dlpack(tg::to_dlpack(tg::ones({64}).to(kGpu)));
  Tensor g = ag::grad({tg::sin(x)}, {x}, {v})[0];
  EXPECT_TRUE(tg::allclose(g.to(kCpu), tg::cos(x.detach()).to(kCpu), 1e-6, 1e-6));
  EXPECT_ERROR_CONTAINS(tg::to_dlpack(y, cu::Stream(1, nullptr)), "consumer's stream is on CUDA device 1");
}

}  // namespace

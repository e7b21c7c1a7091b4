// CUDA device queries. GPU tests skip with a message when there is no GPU;
// on the GPU machine they must run.
#include "reference.h"

namespace tgtest {
namespace {

// Runs everywhere: asserts what each machine must say.
TEST(Cuda, QueriesAreSafeAndErrorsAreClear) {
  int n = tg::cuda::device_count();
  EXPECT_EQ(tg::cuda::is_available(), n > 0);
  if (!tg::cuda::is_built()) {
    EXPECT_EQ(n, 0);
  }
  try {
    tg::cuda::get_device_properties(n);  // one past the last device
    ADD_FAILURE() << "expected an error";
  } catch (const tg::Error& e) {
    std::string msg = e.what();
    if (!tg::cuda::is_built())
      EXPECT_NE(msg.find("get_device_properties: tapegrad was built without CUDA"), std::string::npos) << msg;
    else if (n == 0)
      EXPECT_NE(msg.find("get_device_properties: no CUDA device is available"), std::string::npos) << msg;
    else
      EXPECT_NE(msg.find("get_device_properties: device index " + std::to_string(n) + " is out of range; " +
                         std::to_string(n) + " CUDA device(s) visible"),
                std::string::npos)
          << msg;
  }
  // The library stays usable afterwards.
  EXPECT_EQ(tg::ones({2}).sum().item<float>(), 2.0f);
}

// With a GPU CUDA tensors work; without one (or without the CUDA backend)
// they are refused clearly. Runs on every machine.
TEST(Cuda, CudaTensorsWorkOrAreRefusedClearly) {
  if (tg::cuda::is_available()) {
    Tensor z = tg::zeros({2}, tg::Device(tg::kCUDA));
    EXPECT_TRUE(tg::equal(z.to(tg::Device(tg::kCPU)), tg::zeros({2})));
    return;
  }
  expect_error_containing_one_of([] { tg::zeros({2}, tg::Device(tg::kCUDA)); },
                                 {"allocate: no allocator for device cuda:0", "allocate: no CUDA device is available"});
}

// The profiler range is a no-op without a profiler attached; without a GPU
// (or without the CUDA backend) it is refused with the call's name.
TEST(Cuda, ProfilerRangeRunsOrIsRefusedClearly) {
  if (tg::cuda::is_available()) {
    tg::cuda::profiler_start();
    EXPECT_EQ((tg::ones({4}, tg::Device(tg::kCUDA)) * 2).sum().item<float>(), 8.0f);
    tg::cuda::profiler_stop();
    return;
  }
  EXPECT_ERROR_CONTAINS(tg::cuda::profiler_start(), "cuda::profiler_start");
  EXPECT_ERROR_CONTAINS(tg::cuda::profiler_stop(), "cuda::profiler_stop");
}

TEST(CudaGpu, DevicePropertiesAndSelfTest) {
  REQUIRE_GPU();
  ASSERT_GE(tg::cuda::device_count(), 1);
  tg::cuda::DeviceProperties p = tg::cuda::get_device_properties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GE(p.major, 9) << p.name << " is not sm_90 or newer";
  EXPECT_GT(p.total_memory, int64_t(1) << 30);
  EXPECT_GT(p.multiprocessor_count, 0);
  tg::cuda::self_test(0);
}

}  // namespace
}  // namespace tgtest

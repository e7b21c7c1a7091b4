// The step benchmarks' timer and capture, shared (bench/fno_step.cpp, bench/pinn_step.cpp, bench/unet_step.cpp;
// the peer scripts' is bench/peers/timing.py): the median over `repeats`
// timings of `steps` calls of fn, in ms per call, each timing between two
// device synchronizations.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include <tapegrad/tapegrad.h>

#include "device_memory.h"  // tgbench::sync

namespace tgbench {

// One replay of `graph` bracketed by cuda::profiler_start/stop, for
// `ncu --profile-from-start off` (the benchmarks' --profile).
inline void profile_replay(tg::cuda::CUDAGraph& graph, tg::Device dev) {
  sync(dev.is_cuda());
  tg::cuda::profiler_start();
  graph.replay();
  sync(dev.is_cuda());
  tg::cuda::profiler_stop();
}

// PyTorch's capture recipe: `warmups` calls of step on a side stream (what
// a capture may not create: library handles, cached blocks, cuDNN's timed
// algorithms), then `before_capture()` (e.g. resetting the peak-memory
// counter, so that it sees the capture alone) and one call captured into
// `graph` (configured by the caller); returns that call's result.
template <class Step, class Before>
auto capture_after_warmup(tg::cuda::CUDAGraph& graph, Step&& step, Before&& before_capture, int warmups = 3) {
  namespace cu = tg::cuda;
  cu::Stream side = cu::stream_from_pool();
  side.wait_stream(cu::current_stream());
  {
    cu::StreamGuard g(side);
    for (int i = 0; i < warmups; ++i)
      step();
  }
  cu::current_stream().wait_stream(side);
  before_capture();
  cu::Graph capture(graph);
  return step();
}

template <class Fn> double ms_per_step(int steps, int repeats, tg::Device dev, Fn fn) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    sync(dev.is_cuda());
    auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s)
      fn();
    sync(dev.is_cuda());
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace tgbench

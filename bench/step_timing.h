// The step benchmarks' timer, shared (bench/fno_step.cpp, bench/pinn_step.cpp;
// the peer scripts' is bench/peers/timing.py): the median over `repeats`
// timings of `steps` calls of fn, in ms per call, each timing between two
// device synchronizations.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tgbench {

inline void sync(tg::Device dev) {
  if (dev.is_cuda()) tg::cuda::synchronize();
}

template <class Fn> double ms_per_step(int steps, int repeats, tg::Device dev, Fn fn) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    sync(dev);
    auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s)
      fn();
    sync(dev);
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace tgbench

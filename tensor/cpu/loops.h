// Internal CPU loop machinery: one offset calculator for every strided,
// broadcast (stride 0) or contiguous operand set. Dimensions are sorted by
// the output's strides, size-1 dims dropped and adjacent dims coalesced;
// the innermost dimension is handed to a typed loop, which takes a
// contiguous fast path when all byte strides equal the element size.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tensor/kernels.h"
#include <tapegrad/tensor/tensor.h>

namespace tg::cpu {

constexpr int kMaxOps = 4;
constexpr int kMaxDims = 25;
constexpr int64_t kGrainSize = 32768;

template <class Fn> class FunctionRef;
template <class R, class... A> class FunctionRef<R(A...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT
      : obj_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o, A... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...);
        }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

// inner(ptrs, byte_strides, n): process n elements along the innermost dim.
using InnerLoop = FunctionRef<void(char** ptrs, const int64_t* strides, int64_t n)>;

// Per-element cost of an elementwise loop, relative to an add: a
// transcendental (exp, tanh, an activation's derivatives) costs about 8.
constexpr int kCostTranscendental = 8;
// The elements per chunk of an elementwise loop of that cost: TG_CPU_GRAIN
// (by default kGrainSize, a half of it from 8 workers, a quarter from 16)
// divided by the cost, at least 1024.
int64_t elementwise_grain(int cost = 1);

// Operand 0 is the output; all operands have the output's sizes (inputs are
// expanded views). parallel=false runs serially (e.g. scatter); cost sets
// the chunk size (elementwise_grain).
void for_each(const Tensor* ops, int nops, InnerLoop inner, bool parallel = true, int cost = 1);

// Runs f(begin, end) over [0, n) in TBB chunks of at least `grain`.
void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> f);
// The threads parallel_for's chunks may run on (the task arena's; 1 under TSan).
int parallel_workers();

// The first index out of range that the workers of a parallel loop met
// (they cannot throw across each other's writes): the kernel raises it once
// the loop is done.
struct FirstBadIndex {
  std::atomic<bool> any{false};
  std::atomic<int64_t> value{0};
  void note(int64_t j) {
    bool expected = false;
    if (any.compare_exchange_strong(expected, true)) value.store(j);
  }
};

using kernels::dispatch_bytes;
using kernels::dispatch_compute;

}  // namespace tg::cpu

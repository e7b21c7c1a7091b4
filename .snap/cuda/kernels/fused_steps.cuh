// Internal: which elementwise functor is which step of the fused kernel of
// a captured graph (fused.cu runs them; cuda/launch.h lists the kinds).
// A launch through loops.cuh whose functor has a kind here tells its
// LaunchEncoder it is fusable; the functors themselves know nothing of
// graphs. A new fusable functor gets its line here and its case in
// fused.cu's run_step.
#pragma once

#include "cuda/launch.h"

#include "functors.cuh"

namespace tg::cuda {

template <class F> struct FusedStep { static constexpr fusion::Kind kind = fusion::kNone; };
template <class T> struct FusedStep<CopyFn<T, T>> {  // a copy within one dtype
  static constexpr fusion::Kind kind = fusion::kCopy;
};
template <class U> struct FusedStep<FillFn<U>> { static constexpr fusion::Kind kind = fusion::kFill; };
template <class T> struct FusedStep<BinaryFn<T>> { static constexpr fusion::Kind kind = fusion::kBinary; };
template <class T> struct FusedStep<BinaryScalarFn<T>> { static constexpr fusion::Kind kind = fusion::kBinaryScalar; };
template <class T> struct FusedStep<AddScaledFn<T>> { static constexpr fusion::Kind kind = fusion::kAddScaled; };
template <class T> struct FusedStep<UnaryFn<T>> { static constexpr fusion::Kind kind = fusion::kUnary; };
template <class T> struct FusedStep<ActivationGradFn<T>> {
  static constexpr fusion::Kind kind = fusion::kActivationGrad;
};
template <class T> struct FusedStep<ActivationGradProductFn<T>> {
  static constexpr fusion::Kind kind = fusion::kActivationGradProduct;
};

}  // namespace tg::cuda

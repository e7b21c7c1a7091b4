// The fused kernel of a captured CUDA graph (graphs/fusion.h): one launch
// that runs a chain of elementwise steps for each element.
#include <cstring>
#include <type_traits>

#include "cuda/launch.h"

#include "fused_steps.cuh"
#include "loops.cuh"
#include "small_gemm.cuh"
#include "small_mlp.cuh"

namespace tg::cuda {
namespace {

// Each step runs the functor or element body of the kernel it replaces, on
// the step's operands at element i (0 for one-element operands): the same
// code, loads and stores as the separate kernels, one launch.
template <class F, class T> __device__ inline void run_functor(const fusion::Step& st, int64_t i) {
  F f;
  memcpy(&f, st.fn, sizeof(F));
  int64_t off[kMaxOps];
#pragma unroll
  for (int o = 0; o < kMaxOps; ++o)
    off[o] = (st.scalar >> o) & 1u ? 0 : i * int64_t(sizeof(T));
  if (st.periodic) {  // uniform across the grid; i < 2^31 (fusion::max_elements): 32-bit remainders
#pragma unroll
    for (int o = 1; o < kMaxOps; ++o)
      if (st.period[o] > 0) off[o] = int64_t(uint32_t(i) % uint32_t(st.period[o])) * int64_t(sizeof(T));
  }
  f(st.ptr, off);
}

// One case per kind of cuda/launch.h (the functors as fused_steps.cuh maps them).
template <class T> __device__ inline void run_step(const fusion::Step& st, int64_t i) {
  switch (st.kind) {
    case fusion::kBinary: run_functor<BinaryFn<T>, T>(st, i); break;
    case fusion::kBinaryScalar: run_functor<BinaryScalarFn<T>, T>(st, i); break;
    case fusion::kAddScaled: run_functor<AddScaledFn<T>, T>(st, i); break;
    case fusion::kUnary: run_functor<UnaryFn<T>, T>(st, i); break;
    case fusion::kActivationGrad: run_functor<ActivationGradFn<T>, T>(st, i); break;
    case fusion::kActivationGradProduct: run_functor<ActivationGradProductFn<T>, T>(st, i); break;
    case fusion::kCopy: run_functor<CopyFn<T, T>, T>(st, i); break;
    case fusion::kFill: run_functor<FillFn<std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>>, T>(st, i); break;
    case fusion::kAddN:
      add_n_at<T>(reinterpret_cast<T*>(st.ptr[0]), reinterpret_cast<const T*>(st.ptr[1]),
                  reinterpret_cast<const T* const*>(st.ptr + 2), st.nops - 2, i);
      break;
    case fusion::kMulBackward:
      mul_backward_at<T>(reinterpret_cast<T*>(st.ptr[0]), reinterpret_cast<T*>(st.ptr[1]),
                         reinterpret_cast<const T*>(st.ptr[2]), reinterpret_cast<const T*>(st.ptr[3]),
                         reinterpret_cast<const T*>(st.ptr[4]), i);
      break;
    default: break;
  }
}

template <class T> __global__ void fused_kernel_impl(const __grid_constant__ fusion::Program p) {
  wait_for_predecessors();
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n; i += stride)
    for (int s = 0; s < p.nsteps; ++s)
      run_step<T>(p.steps[s], i);
}

// A small product, then the steps on the element each thread stored
// (fusion::Head): the product's code and the steps' loads and stores, as in
// their own launches.
template <class T> __global__ void small_gemm_head_impl(const __grid_constant__ fusion::HeadProgram p) {
  wait_for_predecessors();
  int64_t lin = 0;
  if (!small_gemm_at<T>(*reinterpret_cast<const SmallGemmOperands<T>*>(p.args), &lin)) return;
  for (int s = 0; s < p.program.nsteps; ++s)
    run_step<T>(p.program.steps[s], lin);
}

// A small MLP, then the steps on the element of its output each thread
// stored (fusion::Head).
template <class T>
__global__ void __launch_bounds__(kMlpThreads) mlp_head_impl(const __grid_constant__ fusion::HeadProgram p) {
  wait_for_predecessors();
  int64_t lin = 0;
  if (!mlp_at<T>(*reinterpret_cast<const MlpOperands<T>*>(p.args), &lin)) return;
  for (int s = 0; s < p.program.nsteps; ++s)
    run_step<T>(p.program.steps[s], lin);
}

}  // namespace

namespace fusion {
const void* head_kernel(ScalarType dtype, int8_t kind) {
  TG_CHECK(kind == kSmallGemmHead || kind == kMlpHead, "fused kernel: unknown head kind ", int(kind));
  const void* k = nullptr;
  kernels::dispatch_floating(dtype, "fused kernel", [&](auto tag) {
    using T = decltype(tag);
    k = kind == kMlpHead ? reinterpret_cast<const void*>(&mlp_head_impl<T>)
                         : reinterpret_cast<const void*>(&small_gemm_head_impl<T>);
  });
  return k;
}

const void* fused_kernel(ScalarType dtype, int64_t n, unsigned* grid, unsigned* block) {
  *grid = grid_for(n);
  *block = kBlock;
  const void* k = nullptr;
  kernels::dispatch_floating(dtype, "fused kernel",
                             [&](auto tag) { k = reinterpret_cast<const void*>(&fused_kernel_impl<decltype(tag)>); });
  return k;
}
}  // namespace fusion

}  // namespace tg::cuda

// Internal: the off switches for A/B timing, in one table. Each names an
// optimization that is on by default; its environment variable set to "0"
// turns it off for the whole process (read once, at first use). Results are
// the same either way (the tests run with every switch on; docs/PERFORMANCE.md
// "Off switches" says what each one measures).
#pragma once

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace tg::detail {

// X(enumerator, variable, what it turns off, where)
#define TG_OFF_SWITCHES(X)                                                                                             \
  X(kCublasLt, "TG_CUBLASLT", "cuBLASLt GEMMs with cached plans (back to cublasGemmEx)", "cuda/kernels/linalg.cu")     \
  X(kBiasEpilogue, "TG_BIAS_EPILOGUE", "linear's bias in the GEMM's epilogue (back to the product, then an add)",      \
    "cuda/kernels/linalg.cu")                                                                                          \
  X(kCudaPdl, "TG_CUDA_PDL", "programmatic dependent launch of the elementwise kernels",                               \
    "cuda/kernels/elementwise.cu")                                                                                     \
  X(kGraphFusion, "TG_CUDA_GRAPH_FUSION", "fusion of elementwise chains in captured graphs", "graphs/graph.cpp")       \
  X(kGraphHeads, "TG_CUDA_GRAPH_HEADS",                                                                                \
    "elementwise steps fused into the small product before them in captured graphs (back to a chain of their own)",    \
    "cuda/kernels/linalg.cu")                                                                                          \
  X(kGraphRelax, "TG_CUDA_GRAPH_RELAX", "dependency relaxation of captured graphs", "graphs/graph.cpp")                \
  X(kStructureProbe, "TG_STRUCTURE_PROBE", "the structural-zero probe of per-sample Hessians",                         \
    "autograd/functional/per_sample.cpp")                                                                              \
  X(kDeferTangents, "TG_DEFER_TANGENTS", "deferred tangents of a last linear layer in Taylor mode",                    \
    "autograd/forward_ad.cpp")                                                                                         \
  X(kMergeWeightGrads, "TG_MERGE_WEIGHT_GRADS", "merged weight-gradient products in the backward",                     \
    "autograd/input_buffer.cpp")                                                                                       \
  X(kSmallTrsm, "TG_SMALL_TRSM",                                                                                       \
    "the shared-memory triangular solve for 5 to 64 right-hand sides of order <= 64 (back to cuBLAS trsmBatched)",     \
    "cuda/kernels/linalg.cu")                                                                                          \
  X(kSmallGemm, "TG_SMALL_GEMM", "the tiled kernel for products of at most 2^21 multiply-adds (back to cuBLASLt)",     \
    "cuda/kernels/linalg.cu")                                                                                          \
  X(kFusedMlp, "TG_FUSED_MLP",                                                                                         \
    "nn::Sequential's small MLPs in one kernel where nothing is recorded (back to a launch per layer)",                \
    "nn/modules.cpp, cuda/kernels/linalg.cu")                                                                          \
  X(kFusedMlpRecorded, "TG_FUSED_MLP_RECORDED",                                                                        \
    "the same MLPs recorded as one node, forward and backward in one kernel each (back to the layers' nodes)",         \
    "autograd/ops/mlp.cpp, cuda/kernels/linalg.cu")                                                                    \
  X(kCudnn, "TG_CUDNN", "cuDNN's convolutions (back to im2col + cuBLAS GEMMs)", "cuda/kernels/grid.cpp")               \
  X(kCudnnFind, "TG_CUDNN_FIND", "cuDNN's algorithms timed on first use of a shape (back to its heuristics)",          \
    "cuda/kernels/grid.cpp")                                                                                           \
  X(kCudnnGraph, "TG_CUDNN_GRAPH",                                                                                     \
    "cuDNN's graph API where timed faster (back to its legacy convolution API for every call)",                        \
    "cuda/kernels/grid.cpp")                                                                                           \
  X(kCudnnGraphFwd, "TG_CUDNN_GRAPH_FWD",                                                                              \
    "cuDNN's graph API also for eager forward calls and input gradients, where timed faster (back to its legacy API)", \
    "cuda/kernels/grid.cpp")                                                                                           \
  X(kGroupKernels, "TG_GROUP_KERNELS",                                                                                 \
    "the fused kernels of the group primitives (_group_sum/_center/_affine; back to reductions and broadcasts)",       \
    "cuda/kernels/group.cu")                                                                                           \
  X(kResampleKernels, "TG_RESAMPLE_KERNELS",                                                                           \
    "interpolate's linear modes as one resampling primitive per dim (back to gathers and weighted sums)",              \
    "tensor/grid.cpp, cuda/kernels/resample.cu")                                                                       \
  X(kCpuSmallArenas, "TG_CPU_SMALL_ARENAS",                                                                            \
    "CPU loops of fewer chunks than threads in an arena of their size (back to the whole pool)",                       \
    "tensor/cpu/loops.cpp")                                                                                            \
  X(kCpuSplitInner, "TG_CPU_SPLIT_INNER",                                                                              \
    "CPU products of few rows split their k, and reductions of few columns their rows (back to row blocks only)",      \
    "tensor/linalg.cpp, tensor/reduce.cpp")                                                                            \
  X(kCpuFusedBackward, "TG_CPU_FUSED_BACKWARD",                                                                        \
    "the CPU's fused backward kernels of activation_grad and its sums of weight-gradient products without "            \
    "concatenation (back to the public ops and one product of the concatenated operands)",                             \
    "autograd/kernels/cpu.cpp, tensor/linalg.cpp")                                                                     \
  X(kOdeStageRows, "TG_ODE_STAGE_ROWS",                                                                                \
    "odeint's adaptive stages as the rows of one buffer where nothing is recorded, its sums and dense output as "      \
    "products with it, and recorded dense output as one product with the stacked stages (back to elementwise sums)",   \
    "ode/odeint.cpp")

enum class OffSwitch {
#define TG_SWITCH_ENUM(e, var, what, where) e,
  TG_OFF_SWITCHES(TG_SWITCH_ENUM)
#undef TG_SWITCH_ENUM
};

// False only when the environment variable `name` is set to "0".
inline bool env_allows(const char* name) {
  const char* env = std::getenv(name);
  return !(env && std::strcmp(env, "0") == 0);
}

// The number in environment variable `name` (a non-negative decimal, "1e9"
// too), or `fallback` when it is unset, empty, signed, not a number, has
// trailing characters or is not finite. The tuning knobs (TG_CPU_GRAIN,
// TG_CPU_GEMM_BLOCK_FLOPS, TG_CUDA_FUSION_MAX_ELEMENTS,
// TG_SMALL_GEMM_MAX_MACS, TG_CUDA_GRAPH_REUSE_DELAY_MB) read theirs with it,
// once each, and clamp it to their own range.
inline double env_number(const char* name, double fallback) {
  const char* e = std::getenv(name);
  if (!e || *e < '0' || *e > '9' || e[std::strspn(e, "0123456789.eE+-")] != '\0') return fallback;  // no hex, inf, nan
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  return *end || !std::isfinite(v) ? fallback : v;
}

// The switches' variables, by OffSwitch.
inline constexpr const char* kOffSwitchVariables[] = {
#define TG_SWITCH_VARIABLE(e, var, what, where) var,
    TG_OFF_SWITCHES(TG_SWITCH_VARIABLE)
#undef TG_SWITCH_VARIABLE
};

// Whether switch `s` is on (its variable is not "0"); read once per switch.
template <OffSwitch s> bool switched_on() {
  static const bool on = env_allows(kOffSwitchVariables[int(s)]);
  return on;
}

}  // namespace tg::detail

// Internal: the CPU's vector math (exp, log, sin, cos, tanh, the sigmoid,
// rsqrt, reciprocal, and activation derivatives g * act^(k)(x)) over
// contiguous runs, compiled once per instruction set
// (tensor/cpu/vmath_impl.h) and chosen at run time from what the CPU
// supports, as the GEMM's kernels are (tensor/cpu/gemm.h): Eigen's packet
// functions at SSE2 width took a CPU PINN step's largest share in a
// portable build (tanh 3.6x faster with AVX2/FMA, 6x with AVX-512).
#pragma once

#include <cstdint>

namespace tg::cpu {

// The functions with a vector form; the elementwise kernels map their
// UnaryOp onto these (tensor/elementwise.cpp).
enum class VUnary : uint8_t { Exp, Log, Sin, Cos, Tanh, Sigmoid, Rsqrt, Reciprocal };
// The activations whose derivatives have a vector form.
enum class VAct : uint8_t { Tanh, Sigmoid, Silu };

struct VMathKernels {
  const char* isa;  // "generic", "avx2" or "avx512"
  // out[i] = f(x[i]), i < n (out may be x).
  void (*unary_f32)(VUnary f, float* out, const float* x, int64_t n);
  void (*unary_f64)(VUnary f, double* out, const double* x, int64_t n);
  // out[i] = g[i * g_step] * act^(order)(x[i]), order 0..4, g_step 0 (one
  // value) or 1.
  void (*act_grad_f32)(VAct act, int order, float* out, const float* g, int64_t g_step, const float* x, int64_t n);
};

// The kernels of one instruction set; null where this build lacks it.
const VMathKernels* vmath_kernels_generic();
const VMathKernels* vmath_kernels_avx2();
const VMathKernels* vmath_kernels_avx512();
// The kernels the elementwise ops use: the widest the CPU supports, or
// those TG_CPU_VMATH=generic|avx2|avx512 names (an error where unsupported).
const VMathKernels& vmath_kernels();

}  // namespace tg::cpu

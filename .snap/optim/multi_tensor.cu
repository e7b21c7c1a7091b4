// The optimizers' multi-tensor updates on CUDA (optim/kernels.h): Adam/AdamW,
// SGD, RMSprop, Adagrad, Adamax, NAdam and RAdam over every parameter in
// ceil(P / kListSize) launches (cuda/kernels/multi_tensor.cuh), and
// clip_grad_norm_'s norm and scaling. The step counts, the learning rate and
// the norm are read from device memory when the kernel runs (capturable).
#include <array>
#include <cmath>
#include <string>

#include <cub/block/block_reduce.cuh>

#include "cuda/kernels/multi_tensor.cuh"
#include "optim/kernels.h"
#include <tapegrad/tensor/ops.h>

namespace tg::optim::detail {

namespace {

using namespace tg::cuda;
using namespace tg::cuda::multi_tensor;

template <class T> __global__ void adam_kernel(ListArgs a, const double* steps, const double* lr_ptr, AdamUpdate u) {
  int64_t begin, end;
  const int t = find_tensor(a, &begin, &end);
  T* __restrict__ p = static_cast<T*>(a.ptr[0][t]);
  const T* __restrict__ g = static_cast<const T*>(a.ptr[1][t]);
  T* __restrict__ m = static_cast<T*>(a.ptr[2][t]);
  T* __restrict__ v = static_cast<T*>(a.ptr[3][t]);
  T* __restrict__ vmax = static_cast<T*>(a.ptr[4][t]);
  const double step = steps[a.arg[t]], lr = lr_ptr[0], beta1 = lr_ptr[1];
  const T bc1 = T(1 - ::pow(beta1, step)), sqrt_bc2 = T(::sqrt(1 - ::pow(u.beta2, step)));
  const T b1 = T(beta1), b2 = T(u.beta2), eps = T(u.eps), wd = T(u.weight_decay), tlr = T(lr);
  const T decay = T(1 - lr * u.weight_decay);
#pragma unroll 4
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T gi = g[i], pi = p[i];
    if (u.weight_decay != 0) {
      if (u.decoupled) pi = pi * decay;
      else gi = gi + wd * pi;
    }
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    T second = vi;
    if (u.amsgrad) {
      second = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = second;
    }
    const T denom = ::sqrt(second) / sqrt_bc2 + eps;
    p[i] = pi - (tlr / bc1) * (mi / denom);
  }
}

template <class T> __global__ void sgd_kernel(ListArgs a, const double* steps, const double* lr_ptr, SGDUpdate u) {
  int64_t begin, end;
  const int t = find_tensor(a, &begin, &end);
  T* __restrict__ p = static_cast<T*>(a.ptr[0][t]);
  const T* __restrict__ g = static_cast<const T*>(a.ptr[1][t]);
  T* __restrict__ buf = static_cast<T*>(a.ptr[2][t]);
  const bool first = steps[a.arg[t]] <= 1;
  const T lr = T(lr_ptr[0]), wd = T(u.weight_decay), mom = T(lr_ptr[1]), damp = T(1 - u.dampening);
#pragma unroll 4
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T d = g[i];
    if (u.weight_decay != 0) d = d + wd * p[i];
    if (u.momentum != 0) {
      const T b = first ? d : mom * buf[i] + damp * d;
      buf[i] = b;
      d = u.nesterov ? d + mom * b : b;
    }
    p[i] = p[i] - lr * d;
  }
}

// The larger of a and b, NaN when either is (torch.maximum).
template <class T> __device__ inline T nan_max(T a, T b) { return (a != a || a > b) ? a : b; }

// torch.optim's single-tensor rules (optim/adaptive.cpp), one element at a
// time; the per-tensor coefficients are worked out in double first.
template <class T>
__global__ void adaptive_kernel(ListArgs a, const double* steps, const double* lr_ptr, AdaptiveUpdate u) {
  int64_t begin, end;
  const int t = find_tensor(a, &begin, &end);
  T* __restrict__ p = static_cast<T*>(a.ptr[0][t]);
  const T* __restrict__ g = static_cast<const T*>(a.ptr[1][t]);
  T* __restrict__ s1 = static_cast<T*>(a.ptr[2][t]);
  T* __restrict__ s2 = static_cast<T*>(a.ptr[3][t]);
  T* __restrict__ s3 = static_cast<T*>(a.ptr[4][t]);
  const double step = steps[a.arg[t]], lr = lr_ptr[0], beta1 = lr_ptr[1];  // beta1: RMSprop's momentum
  const T wd = T(u.weight_decay), eps = T(u.eps), decay = T(1 - lr * u.weight_decay);
  // L2 weight decay adds wd p to the gradient; decoupled (NAdam, RAdam), p *= 1 - lr wd first.
  const bool l2 = u.weight_decay != 0 && !u.decoupled, decoupled = u.weight_decay != 0 && u.decoupled;
  auto grad = [&](int64_t i) {
    if (decoupled) p[i] = p[i] * decay;
    return l2 ? g[i] + wd * p[i] : g[i];
  };
  switch (u.rule) {
    case 0: {  // RMSprop
      const T alpha = T(u.alpha), rest = T(1 - u.alpha), mom = T(beta1), tlr = T(lr);
#pragma unroll 4
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const T gi = grad(i);
        const T sq = s1[i] * alpha + (gi * gi) * rest;
        s1[i] = sq;
        T avg;
        if (u.centered) {
          const T ga = s3[i] * alpha + gi * rest;
          s3[i] = ga;
          avg = ::sqrt(sq - ga * ga) + eps;
        } else {
          avg = ::sqrt(sq) + eps;
        }
        if (u.momentum > 0) {
          const T b = s2[i] * mom + gi / avg;
          s2[i] = b;
          p[i] = p[i] - tlr * b;
        } else {
          p[i] = p[i] - tlr * (gi / avg);
        }
      }
      break;
    }
    case 1: {  // Adagrad
      const T clr = T(lr / (1 + (step - 1) * u.lr_decay));
#pragma unroll 4
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const T gi = grad(i);
        const T sum = s1[i] + gi * gi;
        s1[i] = sum;
        p[i] = p[i] - clr * (gi / (::sqrt(sum) + eps));
      }
      break;
    }
    case 2: {  // Adamax
      const T b1 = T(beta1), rest = T(1 - beta1), b2 = T(u.beta2);
      const T clr = T(lr / (1 - ::pow(beta1, step)));
#pragma unroll 4
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const T gi = grad(i);
        const T m = s1[i] * b1 + gi * rest;
        const T inf = nan_max(s2[i] * b2, T(::fabs(gi) + eps));
        s1[i] = m;
        s2[i] = inf;
        p[i] = p[i] - clr * (m / inf);
      }
      break;
    }
    case 3: {  // NAdam
      const double mu = nadam_mu(beta1, u.momentum_decay, step);
      const double mu_next = nadam_mu(beta1, u.momentum_decay, step + 1);
      const int64_t slot = 2 * a.arg[t], parity = int64_t(step) & 1;
      const double product = u.mu_product[slot + (1 - parity)] * mu;
      if (begin == 0 && threadIdx.x == 0) u.mu_product[slot + parity] = product;
      const T b1 = T(beta1), rest1 = T(1 - beta1), b2 = T(u.beta2), rest2 = T(1 - u.beta2);
      const T bc2 = T(1 - ::pow(u.beta2, step));
      const T c_grad = T(lr * (1 - mu) / (1 - product)), c_avg = T(lr * mu_next / (1 - product * mu_next));
#pragma unroll 4
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const T gi = grad(i);
        const T m = s1[i] * b1 + gi * rest1;
        const T v = s2[i] * b2 + (gi * gi) * rest2;
        s1[i] = m;
        s2[i] = v;
        const T denom = ::sqrt(v / bc2) + eps;
        T pi = p[i] - c_grad * (gi / denom);
        p[i] = pi - c_avg * (m / denom);
      }
      break;
    }
    default: {  // RAdam
      const double bc1 = 1 - ::pow(beta1, step), bc2 = 1 - ::pow(u.beta2, step);
      const double rho_inf = 2 / (1 - u.beta2) - 1;
      const double rho_t = rho_inf - 2 * step * ::pow(u.beta2, step) / bc2;
      const bool rectified = rho_t > 5;
      const T rect =
          rectified ? T(::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))) : T(1);
      const T b1 = T(beta1), rest1 = T(1 - beta1), b2 = T(u.beta2), rest2 = T(1 - u.beta2);
      const T tbc1 = T(bc1), tlr = T(lr), sqrt_bc2 = T(::sqrt(bc2));
#pragma unroll 4
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const T gi = grad(i);
        const T m = s1[i] * b1 + gi * rest1;
        const T v = s2[i] * b2 + (gi * gi) * rest2;
        s1[i] = m;
        s2[i] = v;
        const T step_i = (m / tbc1) * tlr;
        p[i] = p[i] - (rectified ? step_i * (sqrt_bc2 / (::sqrt(v) + eps)) * rect : step_i);
      }
      break;
    }
  }
}

// A resumed NAdam: each parameter's product of its step count's factors
// (nadam_mu_product: up to 2^20 steps in the order the updates multiply
// them, beyond in closed form, so a huge count takes bounded time).
__global__ void nadam_products_kernel(const double* steps, double* product, int64_t P, double beta1,
                                      double momentum_decay) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= P) return;
  const int64_t n = int64_t(steps[i]);  // load_state_dict checked it: an integer in [0, 2^53]
  product[2 * i + (n & 1)] = nadam_mu_product(beta1, momentum_decay, n);
}

// clip_grad_norm_: block b's partial (sum |g|^p, or max |g| when p is
// infinite) into out[b]; `mode` 0: p = 2, 1: p = 1, 2: infinite, 3: other p.
template <class T> __global__ void norm_kernel(ListArgs a, int mode, double p, double* out) {
  using BlockReduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename BlockReduce::TempStorage tmp;
  int64_t begin, end;
  const int t = find_tensor(a, &begin, &end);
  const T* __restrict__ g = static_cast<const T*>(a.ptr[0][t]);
  double acc = 0;
#pragma unroll 4
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double x = ::fabs(double(g[i]));
    switch (mode) {
      case 0: acc += x * x; break;
      case 1: acc += x; break;
      case 2: acc = nan_max(acc, x); break;
      default: acc += ::pow(x, p);
    }
  }
  const double r = mode == 2 ? BlockReduce(tmp).Reduce(acc, [](double x, double y) { return nan_max(x, y); })
                             : BlockReduce(tmp).Sum(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = r;
}

// The norm from the partials of norm_kernel (every block alike, in a fixed
// order, so all agree).
__device__ inline double norm_of_partials(const double* part, int64_t nparts, int mode, double p) {
  using BlockReduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename BlockReduce::TempStorage tmp;
  __shared__ double total;
  double acc = 0;
  for (int64_t i = threadIdx.x; i < nparts; i += blockDim.x)
    acc = mode == 2 ? nan_max(acc, part[i]) : acc + part[i];
  const double r = mode == 2 ? BlockReduce(tmp).Reduce(acc, [](double x, double y) { return nan_max(x, y); })
                             : BlockReduce(tmp).Sum(acc);
  if (threadIdx.x == 0) total = mode == 0 ? ::sqrt(r) : mode == 3 ? ::pow(r, 1 / p) : r;
  __syncthreads();
  return total;
}

// clip_grad_norm_: the norm from the partials, then g *= min(max_norm /
// (norm + 1e-6), 1) (NaN stays NaN); the first block writes the norm to
// `out` (when given: float or double as `out_double`).
template <class T>
__global__ void clip_scale_kernel(ListArgs a, const double* part, int64_t nparts, int mode, double p, double max_norm,
                                  void* out, bool out_double) {
  const double total = norm_of_partials(part, nparts, mode, p);
  if (out && blockIdx.x == 0 && threadIdx.x == 0) {
    if (out_double) *static_cast<double*>(out) = total;
    else *static_cast<float*>(out) = float(total);
  }
  int64_t begin, end;
  const int t = find_tensor(a, &begin, &end);
  T* __restrict__ g = static_cast<T*>(a.ptr[0][t]);
  double c = max_norm / (total + 1e-6);
  if (c > 1) c = 1;
  const T tc = T(c);
#pragma unroll 4
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    g[i] = g[i] * tc;
}

// The lists as launch entries, after checking what the kernels assume.
std::vector<std::array<void*, 5>> entries(const TensorLists& l, int nstate, const char* op, std::vector<int64_t>* n) {
  const size_t P = l.param.size();
  TG_CHECK(l.grad.size() == P && l.step_index.size() == P, op, ": list sizes differ");
  std::vector<std::array<void*, 5>> out(P);
  const std::vector<Tensor>* state[3] = {&l.state1, &l.state2, &l.state3};
  for (size_t i = 0; i < P; ++i) {
    const Tensor& p = l.param[i];
    auto check = [&](const Tensor& t, const char* what) {
      TG_CHECK(t.defined() && t.is_cuda() && t.device() == p.device() && t.dtype() == p.dtype() && t.is_contiguous() &&
                   t.numel() == p.numel(),
               op, ": parameter ", i, "'s ", what, " must be a contiguous ", p.dtype(), " tensor of ", p.numel(),
               " elements on ", p.device());
      return t.data_ptr();
    };
    out[i][0] = check(p, "value");
    out[i][1] = check(l.grad[i], "gradient");
    for (int k = 0; k < 3; ++k)
      out[i][2 + k] =
          k < nstate && state[k]->size() > i && (*state[k])[i].defined() ? check((*state[k])[i], "state") : nullptr;
    n->push_back(p.numel());
  }
  return out;
}

// An update over the lists: each dtype's kernel, with the device step
// counts and learning rate.
template <class U>
void multi_tensor_update(const TensorLists& l, int nstate, const char* op, const Tensor& steps, const Tensor& lr,
                         const U& u, void (*k32)(ListArgs, const double*, const double*, U),
                         void (*k64)(ListArgs, const double*, const double*, U), const Tensor& also_written = {}) {
  if (l.param.empty()) return;
  TG_CHECK(lr.is_cuda() && lr.device() == l.param[0].device() && lr.dtype() == kFloat64 && lr.numel() == 2 &&
               lr.is_contiguous(),
           op, ": the group's options must be a Float64 [2] tensor {lr, momentum} on ", l.param[0].device());
  std::vector<int64_t> n;
  auto e = entries(l, nstate, op, &n);
  const double* st = static_cast<const double*>(steps.data_ptr());
  const double* r = static_cast<const double*>(lr.data_ptr());
  void (*kernel)(ListArgs, const double*, const double*, U) = nullptr;
  tg::kernels::dispatch_floating(l.param[0].dtype(), op,
                                 [&](auto tag) { kernel = std::is_same_v<decltype(tag), double> ? k64 : k32; });
  LaunchEncoder access(stream_of(l.param[0]));
  for (const auto* list : {&l.param, &l.state1, &l.state2, &l.state3})
    for (const Tensor& t : *list)
      access.write(t);
  for (const Tensor& t : l.grad)
    access.read(t);
  access.write(also_written);
  access.read(steps);
  access.read(lr);
  for_each_launch(l.param[0].device(), e, n, l.step_index, op, [&](const ListArgs& a, unsigned blocks, cudaStream_t s) {
    kernel<<<blocks, kThreads, 0, s>>>(a, st, r, u);
  });
}

void multi_tensor_adam(const TensorLists& l, const Tensor& steps, const Tensor& lr, const AdamUpdate& u) {
  multi_tensor_update(l, u.amsgrad ? 3 : 2, "Adam (multi-tensor)", steps, lr, u, &adam_kernel<float>,
                      &adam_kernel<double>);
}

void multi_tensor_sgd(const TensorLists& l, const Tensor& steps, const Tensor& lr, const SGDUpdate& u) {
  multi_tensor_update(l, u.momentum != 0 ? 1 : 0, "SGD (multi-tensor)", steps, lr, u, &sgd_kernel<float>,
                      &sgd_kernel<double>);
}

const char* const kRuleNames[] = {"RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"};

void multi_tensor_adaptive(const TensorLists& l, const Tensor& steps, const Tensor& lr, const Tensor& mu_product,
                           const AdaptiveUpdate& u) {
  const std::string op = std::string(kRuleNames[u.rule]) + " (multi-tensor)";
  AdaptiveUpdate d = u;
  d.mu_product = nullptr;
  if (u.rule == 3) {
    TG_CHECK(mu_product.defined() && mu_product.is_cuda() && mu_product.dtype() == kFloat64 &&
                 mu_product.is_contiguous() && mu_product.numel() == 2 * steps.numel(),
             op, ": mu_product must be a contiguous Float64 CUDA tensor of two entries per parameter");
    d.mu_product = static_cast<double*>(mu_product.data_ptr());
  }
  multi_tensor_update(l, 3, op.c_str(), steps, lr, d, &adaptive_kernel<float>, &adaptive_kernel<double>,
                      u.rule == 3 ? mu_product : Tensor());
}

void nadam_products(const Tensor& steps, const Tensor& mu_product, double beta1, double momentum_decay) {
  const int64_t P = steps.numel();
  TG_CHECK(mu_product.numel() == 2 * P && mu_product.is_contiguous() && steps.is_contiguous(),
           "NAdam (multi-tensor): mu_product must hold two entries per parameter");
  if (P == 0) return;
  DeviceGuard guard(steps.device().index());
  cudaStream_t s = stream_of(steps);
  LaunchEncoder access(s);
  access.read(steps);
  access.write(mu_product);
  const unsigned blocks = unsigned((P + kThreads - 1) / kThreads);
  nadam_products_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const double*>(steps.data_ptr()),
                                                    static_cast<double*>(mu_product.data_ptr()), P, beta1,
                                                    momentum_decay);
  TG_CUDA_CHECK(cudaGetLastError(), "NAdam (multi-tensor)");
}

// The gradients as list entries (checked), with their sizes and the blocks
// they take.
struct GradientEntries {
  std::vector<std::array<void*, 5>> ptr;
  std::vector<int64_t> n;
  int64_t blocks = 0;
};
GradientEntries gradient_entries(const std::vector<Tensor>& gs, const char* op) {
  GradientEntries e;
  for (size_t i = 0; i < gs.size(); ++i) {
    const Tensor& g = gs[i];
    TG_CHECK(g.is_cuda() && g.device() == gs[0].device() && g.is_contiguous() &&
                 (g.dtype() == kFloat32 || g.dtype() == kFloat64),
             op, ": gradient ", i, " must be a contiguous float32/float64 tensor on ", gs[0].device());
    e.ptr.push_back({g.data_ptr(), nullptr, nullptr, nullptr, nullptr});
    e.n.push_back(g.numel());
    e.blocks += (g.numel() + kChunk - 1) / kChunk;
  }
  return e;
}

// The launches over the entries of one dtype at a time: `launch(args,
// blocks, stream, dtype, first block)`, the first block counted over every
// launch before.
template <class Launch>
void per_dtype(const std::vector<Tensor>& gs, const GradientEntries& e, const char* op, Launch launch) {
  int64_t offset = 0;
  for (ScalarType dt : {kFloat32, kFloat64}) {
    std::vector<std::array<void*, 5>> mine;
    std::vector<int64_t> mine_n;
    for (size_t i = 0; i < gs.size(); ++i)
      if (gs[i].dtype() == dt) {
        mine.push_back(e.ptr[i]);
        mine_n.push_back(e.n[i]);
      }
    for_each_launch(gs[0].device(), mine, mine_n, std::vector<int64_t>(mine.size(), 0), op,
                    [&](const ListArgs& a, unsigned blocks, cudaStream_t s) {
                      launch(a, blocks, s, dt, offset);
                      offset += blocks;
                    });
  }
}

// norm_kernel's mode for the p-norm.
int norm_mode(double p) { return p == 2 ? 0 : p == 1 ? 1 : std::isinf(p) ? 2 : 3; }

Tensor norm_partials(const std::vector<Tensor>& gs, double p) {
  const char* op = "clip_grad_norm_ (multi-tensor)";
  TG_CHECK(!gs.empty(), op, ": no gradients");
  const GradientEntries e = gradient_entries(gs, op);
  Tensor out = tg::empty({e.blocks > 0 ? e.blocks : 1}, TensorOptions().dtype(kFloat64).device(gs[0].device()));
  if (e.blocks == 0) return out.zero_();
  const int mode = norm_mode(p);
  double* o = static_cast<double*>(out.data_ptr());
  LaunchEncoder access(stream_of(gs[0]));
  for (const Tensor& g : gs)
    access.read(g);
  access.write(out);
  per_dtype(gs, e, op, [&](const ListArgs& a, unsigned nb, cudaStream_t s, ScalarType dt, int64_t first) {
    tg::kernels::dispatch_floating(
        dt, op, [&](auto tag) { norm_kernel<decltype(tag)><<<nb, kThreads, 0, s>>>(a, mode, p, o + first); });
  });
  return out;
}

void clip_scale(const std::vector<Tensor>& gs, const Tensor& partials, double p, double max_norm, const Tensor& total) {
  const char* op = "clip_grad_norm_ (multi-tensor)";
  if (gs.empty()) return;
  TG_CHECK(partials.is_cuda() && partials.device() == gs[0].device() && partials.dtype() == kFloat64 &&
               partials.is_contiguous(),
           op, ": the partial norms must be a contiguous Float64 tensor on ", gs[0].device());
  TG_CHECK(total.is_cuda() && total.device() == gs[0].device() && total.numel() == 1 &&
               (total.dtype() == kFloat32 || total.dtype() == kFloat64),
           op, ": the norm's output must be one float32/float64 number on ", gs[0].device());
  const GradientEntries e = gradient_entries(gs, op);
  if (e.blocks == 0) {  // every gradient empty: the norm is 0
    total.zero_();
    return;
  }
  const double* part = static_cast<const double*>(partials.data_ptr());
  const int mode = norm_mode(p);
  const bool out_double = total.dtype() == kFloat64;
  LaunchEncoder access(stream_of(gs[0]));
  for (const Tensor& g : gs)
    access.write(g);
  access.read(partials);
  access.write(total);
  per_dtype(gs, e, op, [&](const ListArgs& a, unsigned nb, cudaStream_t s, ScalarType dt, int64_t first) {
    void* out = first == 0 ? total.data_ptr() : nullptr;  // the first launch writes the norm
    tg::kernels::dispatch_floating(dt, op, [&](auto tag) {
      clip_scale_kernel<decltype(tag)>
          <<<nb, kThreads, 0, s>>>(a, part, partials.numel(), mode, p, max_norm, out, out_double);
    });
  });
}

}  // namespace

const MultiTensorUpdates* cuda_multi_tensor_updates() {
  static const MultiTensorUpdates k{multi_tensor_adam, multi_tensor_sgd, multi_tensor_adaptive,
                                    nadam_products,    norm_partials,    clip_scale};
  return &k;
}

}  // namespace tg::optim::detail

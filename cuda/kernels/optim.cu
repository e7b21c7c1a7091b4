// CUDA backend: multi-tensor optimizer updates. One launch updates up to
// kListSize parameters: the kernel's argument holds every tensor's pointers
// and sizes, and each block finds its tensor and chunk from the block
// offsets, so a step over P parameters is ceil(P / kListSize) launches, not
// one per tensor per op. The step counts and the learning rate are read
// from device memory when the kernel runs (capturable).
#include <array>
#include <cmath>

#include "loops.cuh"
#include "register.h"

namespace tg::cuda {

namespace {

constexpr int kListSize = 48;
constexpr int kThreads = 256;
constexpr int64_t kChunk = 4 * 1024;  // elements per block

struct ListArgs {
  void* ptr[5][kListSize];
  int64_t n[kListSize];
  int64_t arg[kListSize];  // per tensor: its step-count index (updates), word size (zero)
  int64_t block_start[kListSize + 1];
  int ntensors;
};

// This block's tensor and the range of its chunk.
__device__ inline int find_tensor(const ListArgs& a, int64_t* begin, int64_t* end) {
  int t = 0;
  while (t + 1 < a.ntensors && a.block_start[t + 1] <= int64_t(blockIdx.x))
    ++t;
  *begin = (int64_t(blockIdx.x) - a.block_start[t]) * kChunk;
  *end = ::min(*begin + kChunk, a.n[t]);
  return t;
}

template <class T>
__global__ void adam_kernel(ListArgs a, const double* steps, const double* lr_ptr, kernels::AdamUpdate u) {
  int64_t begin, end;
  const int t = find_tensor(a, &begin, &end);
  T* p = static_cast<T*>(a.ptr[0][t]);
  const T* g = static_cast<const T*>(a.ptr[1][t]);
  T* m = static_cast<T*>(a.ptr[2][t]);
  T* v = static_cast<T*>(a.ptr[3][t]);
  T* vmax = static_cast<T*>(a.ptr[4][t]);
  const double step = steps[a.arg[t]], lr = *lr_ptr;
  const T bc1 = T(1 - ::pow(u.beta1, step)), sqrt_bc2 = T(::sqrt(1 - ::pow(u.beta2, step)));
  const T b1 = T(u.beta1), b2 = T(u.beta2), eps = T(u.eps), wd = T(u.weight_decay), tlr = T(lr);
  const T decay = T(1 - lr * u.weight_decay);
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

template <class T>
__global__ void sgd_kernel(ListArgs a, const double* steps, const double* lr_ptr, kernels::SGDUpdate u) {
  int64_t begin, end;
  const int t = find_tensor(a, &begin, &end);
  T* p = static_cast<T*>(a.ptr[0][t]);
  const T* g = static_cast<const T*>(a.ptr[1][t]);
  T* buf = static_cast<T*>(a.ptr[2][t]);
  const bool first = steps[a.arg[t]] <= 1;
  const T lr = T(*lr_ptr), wd = T(u.weight_decay), mom = T(u.momentum), damp = T(1 - u.dampening);
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

__global__ void zero_kernel(ListArgs a) {
  int64_t begin, end;  // in 4-byte words (sizes are whole words) or bytes
  const int t = find_tensor(a, &begin, &end);
  if (a.arg[t] == 4) {
    uint32_t* w = static_cast<uint32_t*>(a.ptr[0][t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      w[i] = 0;
  } else {
    char* c = static_cast<char*>(a.ptr[0][t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      c[i] = 0;
  }
}

// Launches `kernel(args)` over the entries of `ptrs` (up to five lists) with
// element counts `n` and per-tensor arguments `arg`, kListSize at a time, on
// the current stream of `dev`.
template <class Launch>
void for_each_launch(Device dev, const std::vector<std::array<void*, 5>>& ptrs, const std::vector<int64_t>& n,
                     const std::vector<int64_t>& arg, const char* op, Launch launch) {
  DeviceGuard guard(dev.index());
  cudaStream_t s = static_cast<cudaStream_t>(current_stream(dev.index()).handle());
  size_t i = 0;
  while (i < ptrs.size()) {
    ListArgs a{};
    int64_t blocks = 0;
    int k = 0;
    for (; i < ptrs.size() && k < kListSize; ++i) {
      if (n[i] == 0) continue;
      for (int l = 0; l < 5; ++l)
        a.ptr[l][k] = ptrs[i][l];
      a.n[k] = n[i];
      a.arg[k] = arg[i];
      a.block_start[k] = blocks;
      blocks += (n[i] + kChunk - 1) / kChunk;
      ++k;
    }
    if (k == 0) break;
    a.block_start[k] = blocks;
    a.ntensors = k;
    TG_CHECK(blocks <= INT32_MAX, op, ": too many elements for one launch");
    launch(a, unsigned(blocks), s);
    TG_CUDA_CHECK(cudaGetLastError(), op);
  }
}

// The lists as launch entries, after checking what the kernels assume.
std::vector<std::array<void*, 5>> entries(const kernels::TensorLists& l, int nstate, const char* op,
                                          std::vector<int64_t>* n) {
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
void multi_tensor_update(const kernels::TensorLists& l, int nstate, const char* op, const Tensor& steps,
                         const Tensor& lr, const U& u, void (*k32)(ListArgs, const double*, const double*, U),
                         void (*k64)(ListArgs, const double*, const double*, U)) {
  if (l.param.empty()) return;
  std::vector<int64_t> n;
  auto e = entries(l, nstate, op, &n);
  const double* st = static_cast<const double*>(steps.data_ptr());
  const double* r = static_cast<const double*>(lr.data_ptr());
  auto kernel = l.param[0].dtype() == kFloat64 ? k64 : k32;
  LaunchEncoder access(stream_of(l.param[0]));
  for (const auto* list : {&l.param, &l.state1, &l.state2, &l.state3})
    for (const Tensor& t : *list)
      access.write(t);
  for (const Tensor& t : l.grad)
    access.read(t);
  access.read(steps);
  access.read(lr);
  for_each_launch(l.param[0].device(), e, n, l.step_index, op, [&](const ListArgs& a, unsigned blocks, cudaStream_t s) {
    kernel<<<blocks, kThreads, 0, s>>>(a, st, r, u);
  });
}

void multi_tensor_adam(const kernels::TensorLists& l, const Tensor& steps, const Tensor& lr,
                       const kernels::AdamUpdate& u) {
  multi_tensor_update(l, u.amsgrad ? 3 : 2, "Adam (multi-tensor)", steps, lr, u, &adam_kernel<float>,
                      &adam_kernel<double>);
}

void multi_tensor_sgd(const kernels::TensorLists& l, const Tensor& steps, const Tensor& lr,
                      const kernels::SGDUpdate& u) {
  multi_tensor_update(l, u.momentum != 0 ? 1 : 0, "SGD (multi-tensor)", steps, lr, u, &sgd_kernel<float>,
                      &sgd_kernel<double>);
}

void multi_tensor_zero(const std::vector<Tensor>& ts) {
  if (ts.empty()) return;
  std::vector<std::array<void*, 5>> e;
  std::vector<int64_t> n, word;  // word: 4 when zeroed as 32-bit words, else 1 (bytes)
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    TG_CHECK(t.is_cuda() && t.device() == ts[0].device() && t.is_contiguous(), "zero_grad (multi-tensor): tensor ", i,
             " must be contiguous on ", ts[0].device());
    const int64_t bytes = t.numel() * int64_t(element_size(t.dtype()));
    const bool words = bytes % 4 == 0 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 4 == 0;
    e.push_back({t.data_ptr(), nullptr, nullptr, nullptr, nullptr});
    n.push_back(words ? bytes / 4 : bytes);
    word.push_back(words ? 4 : 1);
  }
  LaunchEncoder access(stream_of(ts[0]));
  for (const Tensor& t : ts)
    access.write(t);
  for_each_launch(
      ts[0].device(), e, n, word, "zero_grad (multi-tensor)",
      [&](const ListArgs& a, unsigned blocks, cudaStream_t s) { zero_kernel<<<blocks, kThreads, 0, s>>>(a); });
}

}  // namespace

void register_optim(kernels::Backend& b) {
  b.multi_tensor_adam = multi_tensor_adam;
  b.multi_tensor_sgd = multi_tensor_sgd;
  b.multi_tensor_zero = multi_tensor_zero;
}

}  // namespace tg::cuda

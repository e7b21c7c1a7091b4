// The optimizers' multi-tensor updates on CUDA (optim/kernels.h): Adam/AdamW
// and SGD over every parameter in ceil(P / kListSize) launches
// (cuda/kernels/multi_tensor.cuh). The step counts and the learning rate are
// read from device memory when the kernel runs (capturable).
#include <array>
#include <cmath>

#include "cuda/kernels/multi_tensor.cuh"
#include "optim/kernels.h"

namespace tg::optim::detail {

namespace {

using namespace tg::cuda;
using namespace tg::cuda::multi_tensor;

template <class T> __global__ void adam_kernel(ListArgs a, const double* steps, const double* lr_ptr, AdamUpdate u) {
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

template <class T> __global__ void sgd_kernel(ListArgs a, const double* steps, const double* lr_ptr, SGDUpdate u) {
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

void multi_tensor_adam(const TensorLists& l, const Tensor& steps, const Tensor& lr, const AdamUpdate& u) {
  multi_tensor_update(l, u.amsgrad ? 3 : 2, "Adam (multi-tensor)", steps, lr, u, &adam_kernel<float>,
                      &adam_kernel<double>);
}

void multi_tensor_sgd(const TensorLists& l, const Tensor& steps, const Tensor& lr, const SGDUpdate& u) {
  multi_tensor_update(l, u.momentum != 0 ? 1 : 0, "SGD (multi-tensor)", steps, lr, u, &sgd_kernel<float>,
                      &sgd_kernel<double>);
}

}  // namespace

const MultiTensorUpdates* cuda_multi_tensor_updates() {
  static const MultiTensorUpdates k{multi_tensor_adam, multi_tensor_sgd};
  return &k;
}

}  // namespace tg::optim::detail

// The grid family's CUDA kernel table (tensor/grid_kernels.h): convolutions
// from cuDNN when the build found it (TAPEGRAD_CUDNN), through its handles
// in cuda/runtime/libraries.h. Without cuDNN every slot is empty and
// the op layer's im2col + GEMM path runs on the GPU (strided copies and
// cuBLAS).
//
// Each call describes its operands (1-D convolutions as 2-D ones of height
// 1), asks cuDNN's heuristics for algorithms (cudnnGet*Algorithm_v7, as
// PyTorch does without benchmark mode) and keeps the first one that fits a
// workspace cap (the workspace comes from the caching allocator), is deterministic when deterministic mode is on, and
// honours the float32 math mode (no TF32 unless tg::cuda::set_allow_tf32):
// the choice is cached per shape, so a captured call repeats the eager one.
// A slot answers false (the op layer's path runs) where cuDNN has no such
// algorithm or refuses the descriptors.
#include "tensor/grid_kernels.h"

#if TAPEGRAD_CUDNN
// cuDNN 9 marks its convolution API (the one PyTorch's convolutions call)
// deprecated in favour of the graph API; it is supported through 9.x.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>

#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include <tapegrad/cuda/capture.h>
#include <tapegrad/cuda/device.h>
#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

#include "cuda/launch.h"
#include "cuda/runtime/libraries.h"
#include "tensor/env.h"
#include "tensor/op_util.h"
#endif

namespace tg::kernels {

#if TAPEGRAD_CUDNN
namespace {

#define TG_CUDNN_CHECK(call, op) \
  TG_LIBRARY_CHECK(cudnnStatus_t, CUDNN_STATUS_SUCCESS, "cuDNN", cudnnGetErrorString, call, op)

constexpr size_t kMaxWorkspace = size_t(1) << 30;   // algorithms that ask for more are skipped
constexpr size_t kFindWorkspace = size_t(1) << 28;  // the timed search's scratch

enum class Kind { Forward, BackwardData, BackwardFilter };

cudnnDataType_t data_type(ScalarType t) {
  switch (t) {
    case kFloat32: return CUDNN_DATA_FLOAT;
    case kFloat64: return CUDNN_DATA_DOUBLE;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    case kFloat16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}

// Sizes and strides as cuDNN's ints, a 1-D convolution's operands given a
// height of 1.
struct Shape {
  std::vector<int> sizes, strides;
};
Shape shape_of(const Tensor& t) {
  Shape s;
  for (int64_t d = 0; d < t.dim(); ++d) {
    s.sizes.push_back(int(t.size(d)));
    s.strides.push_back(int(t.stride(d)));
  }
  if (t.dim() == 3) {  // [N, C, L] -> [N, C, 1, L]
    s.sizes.insert(s.sizes.begin() + 2, 1);
    s.strides.insert(s.strides.begin() + 2, s.strides[2] * s.sizes[3]);
  }
  return s;
}

bool fits_int(const Tensor& t) {
  if (t.numel() > INT32_MAX) return false;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > INT32_MAX || t.stride(d) > INT32_MAX || t.stride(d) < 1) return false;
  return true;
}

struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~Descriptors() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

// The math mode: float32 without TF32 unless allowed (PyTorch's
// allow_tf32 = False gives CUDNN_FMA_MATH), tensor cores for the half types.
cudnnMathType_t math_type(ScalarType t) {
  if (t == kFloat32) return cuda::allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  if (t == kBFloat16 || t == kFloat16) return CUDNN_TENSOR_OP_MATH;
  return CUDNN_DEFAULT_MATH;
}

// Describes x, w, y and the convolution; false when cuDNN refuses them.
bool describe(Descriptors& d, const Tensor& x, const Tensor& w, const Tensor& y, const ConvGeometry& g) {
  const ScalarType dt = x.dtype();
  const cudnnDataType_t t = data_type(dt);
  const Shape xs = shape_of(x), ws = shape_of(w), ys = shape_of(y);
  const int nd = int(xs.sizes.size());
  std::vector<int> pad, stride, dil;
  if (x.dim() == 3) {
    pad.push_back(0);
    stride.push_back(1);
    dil.push_back(1);
  }
  for (size_t i = 0; i < g.stride.size(); ++i) {
    pad.push_back(int(g.padding[i]));
    stride.push_back(int(g.stride[i]));
    dil.push_back(int(g.dilation[i]));
  }
  if (cudnnCreateTensorDescriptor(&d.x) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateTensorDescriptor(&d.y) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateFilterDescriptor(&d.w) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateConvolutionDescriptor(&d.conv) != CUDNN_STATUS_SUCCESS)
    return false;
  if (cudnnSetTensorNdDescriptor(d.x, t, nd, xs.sizes.data(), xs.strides.data()) != CUDNN_STATUS_SUCCESS) return false;
  if (cudnnSetTensorNdDescriptor(d.y, t, nd, ys.sizes.data(), ys.strides.data()) != CUDNN_STATUS_SUCCESS) return false;
  if (cudnnSetFilterNdDescriptor(d.w, t, CUDNN_TENSOR_NCHW, nd, ws.sizes.data()) != CUDNN_STATUS_SUCCESS) return false;
  const cudnnDataType_t compute = dt == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  if (cudnnSetConvolutionNdDescriptor(d.conv, nd - 2, pad.data(), stride.data(), dil.data(), CUDNN_CROSS_CORRELATION,
                                      compute) != CUDNN_STATUS_SUCCESS)
    return false;
  if (cudnnSetConvolutionGroupCount(d.conv, int(g.groups)) != CUDNN_STATUS_SUCCESS) return false;
  return cudnnSetConvolutionMathType(d.conv, math_type(dt)) == CUDNN_STATUS_SUCCESS;
}

// The cached algorithm per call shape: -1 for "none that fits".
std::string key_of(Kind k, const Tensor& x, const Tensor& w, const Tensor& y, const ConvGeometry& g) {
  std::ostringstream s;
  s << int(k) << '|' << x.device().index() << '|' << int(x.dtype()) << '|' << int(math_type(x.dtype())) << '|'
    << are_deterministic_algorithms_enabled();
  for (const Tensor* t : {&x, &w, &y})
    s << shape_str(t->sizes()) << shape_str(t->strides());
  s << shape_str(g.stride) << shape_str(g.padding) << shape_str(g.dilation) << g.groups;
  return s.str();
}
std::mutex& algo_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, int>& algo_cache() {
  static auto* m = new std::map<std::string, int>();
  return *m;
}

// Whether the call being chosen for is float32 without TF32 (set by run()).
thread_local bool t_float32_strict = false;

// The first algorithm (heuristics' rank, or timed order) that succeeds,
// fits, is deterministic when asked and keeps float32 out of TF32: its id,
// or -1.
template <class Perf, class Query> int pick(size_t max_workspace, Query&& query) {
  constexpr int kCount = 16;
  Perf perf[kCount];
  int returned = 0;
  if (query(kCount, &returned, perf) != CUDNN_STATUS_SUCCESS) return -1;
  const bool tf32_ok = t_float32_strict ? false : true;
  const bool deterministic = are_deterministic_algorithms_enabled();
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > max_workspace) continue;
    // float32 without TF32: no tensor-core algorithm (the timed search may
    // report one; the heuristics honour the descriptor's math mode).
    if (!tf32_ok &&
        (perf[i].mathType == CUDNN_TENSOR_OP_MATH || perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    if (deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    return int(perf[i].algo);
  }
  return -1;
}

// One convolution call of kind k: out is y (Forward), x (BackwardData) or
// w (BackwardFilter); the other two operands are inputs.
bool run(Kind k, const Tensor& x_in, const Tensor& w_in, const Tensor& y_in, const ConvGeometry& g) {
  const char* op = k == Kind::Forward        ? "_convolution"
                   : k == Kind::BackwardData ? "_convolution_backward_input"
                                             : "_convolution_backward_weight";
  // The filter is dense row-major (cuDNN's NCHW filter); so are the other
  // operands unless their strides are positive (cuDNN reads strided tensors).
  const Tensor w = k == Kind::BackwardFilter ? w_in : raw::contiguous(w_in);
  const Tensor x = k == Kind::BackwardData ? x_in : raw::contiguous(x_in);
  const Tensor y = k == Kind::Forward ? y_in : raw::contiguous(y_in);
  if (!fits_int(x) || !fits_int(w) || !fits_int(y)) return false;
  const int device = x.device().index();
  cuda::DeviceGuard guard(device);
  auto stream = static_cast<cudaStream_t>(cuda::current_stream(device).handle());
  Descriptors d;
  if (!describe(d, x, w, y, g)) return false;
  cudnnHandle_t h = cuda::lib::cudnn(device, stream, op);
  const std::string key = key_of(k, x, w, y, g);
  t_float32_strict = x.dtype() == kFloat32 && !cuda::allow_tf32();
  int algo = -2;
  {
    std::lock_guard<std::mutex> lock(algo_mutex());
    auto it = algo_cache().find(key);
    if (it != algo_cache().end()) algo = it->second;
  }
  const bool capturing = cuda::is_current_stream_capturing();
  if (algo == -2) {
    // Eagerly, the algorithms are timed once per shape (cudnnFind*Ex:
    // PyTorch's benchmark mode) with up to kFindWorkspace of scratch; under
    // capture, or with TG_CUDNN_FIND=0, cuDNN's heuristics choose.
    Tensor scratch;
    size_t scratch_bytes = 0;
    if (!capturing && detail::switched_on<detail::OffSwitch::kCudnnFind>()) {
      try {
        scratch = detail::new_empty({int64_t(kFindWorkspace / 4)}, kFloat32, x.device());
        scratch_bytes = kFindWorkspace;
      } catch (const Error&) {  // no room to time them: the heuristics
      }
    }
    void* sp = scratch_bytes ? scratch.data_ptr() : nullptr;
    const bool timed = scratch_bytes > 0;
    switch (k) {
      case Kind::Forward:
        algo = pick<cudnnConvolutionFwdAlgoPerf_t>(
            timed ? scratch_bytes : kMaxWorkspace, [&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* p) {
              return timed ? cudnnFindConvolutionForwardAlgorithmEx(h, d.x, x.data_ptr(), d.w, w.data_ptr(), d.conv,
                                                                    d.y, y.data_ptr(), n, r, p, sp, scratch_bytes)
                           : cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, n, r, p);
            });
        break;
      case Kind::BackwardData:
        algo = pick<cudnnConvolutionBwdDataAlgoPerf_t>(
            timed ? scratch_bytes : kMaxWorkspace, [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* p) {
              return timed
                         ? cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, w.data_ptr(), d.y, y.data_ptr(), d.conv,
                                                                       d.x, x.data_ptr(), n, r, p, sp, scratch_bytes)
                         : cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, n, r, p);
            });
        break;
      case Kind::BackwardFilter:
        algo = pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
            timed ? scratch_bytes : kMaxWorkspace, [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* p) {
              return timed ? cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, x.data_ptr(), d.y, y.data_ptr(),
                                                                           d.conv, d.w, w.data_ptr(), n, r, p, sp,
                                                                           scratch_bytes)
                           : cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, n, r, p);
            });
        break;
    }
    if (!capturing) {
      std::lock_guard<std::mutex> lock(algo_mutex());
      if (algo_cache().size() > 4096) algo_cache().clear();
      algo_cache()[key] = algo;
    }
  }
  if (algo < 0) return false;
  size_t bytes = 0;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (k) {
    case Kind::Forward:
      st = cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, cudnnConvolutionFwdAlgo_t(algo), &bytes);
      break;
    case Kind::BackwardData:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, cudnnConvolutionBwdDataAlgo_t(algo),
                                                        &bytes);
      break;
    case Kind::BackwardFilter:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                          cudnnConvolutionBwdFilterAlgo_t(algo), &bytes);
      break;
  }
  if (st != CUDNN_STATUS_SUCCESS) return false;
  // The workspace is a tensor from the caching allocator (a CUDA graph's
  // pool under capture), freed when the call returns: later calls on the
  // stream reuse it in stream order, and the encoder records it written, so
  // a captured graph's relaxation keeps the calls that share it in order
  // (the encoder's own workspaces would stay the graph's, one per call:
  // gigabytes over a U-Net's hundreds of convolutions).
  const Tensor scratch = bytes ? detail::new_empty({int64_t((bytes + 15) / 16) * 4}, kFloat32, x.device()) : Tensor();
  cuda::LaunchEncoder access(stream);
  access.read(k == Kind::BackwardData ? y : x);
  access.read(k == Kind::BackwardFilter ? y : w);
  access.write(k == Kind::Forward ? y : k == Kind::BackwardData ? x : w);
  access.write(scratch);
  void* ws = bytes ? scratch.data_ptr() : nullptr;
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const bool dbl = x.dtype() == kFloat64;
  const void* alpha = dbl ? static_cast<const void*>(&one64) : static_cast<const void*>(&one32);
  const void* beta = dbl ? static_cast<const void*>(&zero64) : static_cast<const void*>(&zero32);
  switch (k) {
    case Kind::Forward:
      TG_CUDNN_CHECK(cudnnConvolutionForward(h, alpha, d.x, x.data_ptr(), d.w, w.data_ptr(), d.conv,
                                             cudnnConvolutionFwdAlgo_t(algo), ws, bytes, beta, d.y, y.data_ptr()),
                     op);
      break;
    case Kind::BackwardData:
      TG_CUDNN_CHECK(
          cudnnConvolutionBackwardData(h, alpha, d.w, w.data_ptr(), d.y, y.data_ptr(), d.conv,
                                       cudnnConvolutionBwdDataAlgo_t(algo), ws, bytes, beta, d.x, x.data_ptr()),
          op);
      break;
    case Kind::BackwardFilter:
      TG_CUDNN_CHECK(
          cudnnConvolutionBackwardFilter(h, alpha, d.x, x.data_ptr(), d.y, y.data_ptr(), d.conv,
                                         cudnnConvolutionBwdFilterAlgo_t(algo), ws, bytes, beta, d.w, w.data_ptr()),
          op);
      break;
  }
  return true;
}

bool conv_forward(const Tensor& out, const Tensor& x, const Tensor& w, const ConvGeometry& g) {
  return run(Kind::Forward, x, w, out, g);
}
bool conv_backward_input(const Tensor& out, const Tensor& y, const Tensor& w, const ConvGeometry& g) {
  return run(Kind::BackwardData, out, w, y, g);
}
bool conv_backward_weight(const Tensor& out, const Tensor& x, const Tensor& y, const ConvGeometry& g) {
  return run(Kind::BackwardFilter, x, out, y, g);
}

}  // namespace
#endif

const GridKernels* cuda_grid_kernels() {
  static const GridKernels t = [] {
    GridKernels k{};
#if TAPEGRAD_CUDNN
    if (detail::switched_on<detail::OffSwitch::kCudnn>()) {
      k.conv_forward = &conv_forward;
      k.conv_backward_input = &conv_backward_input;
      k.conv_backward_weight = &conv_backward_weight;
    }
#endif
    return k;
  }();
  return &t;
}

}  // namespace tg::kernels

// The grid family's CUDA kernel table (tensor/grid_kernels.h): convolutions
// from cuDNN when the build found it (TAPEGRAD_CUDNN), through its handles
// in cuda/runtime/libraries.h. Without cuDNN every slot is empty and
// the op layer's im2col + GEMM path runs on the GPU (strided copies and
// cuBLAS).
//
// Each call describes its operands (1-D convolutions as 2-D ones of height
// 1). Weight gradients go through cuDNN's graph API (cudnn_backend.h): one
// operation, the engine configurations its heuristics list (mode A, then
// the fallback list), of which the first eager call of a shape times those
// that are allowed (not TF32 for float32 unless tg::cuda::set_allow_tf32, no
// down-converted inputs, deterministic when deterministic mode is on, no FFT
// and no runtime-compiled engine) and keeps the fastest execution plan;
// under capture, or with TG_CUDNN_FIND=0, the first allowed one. Forward
// convolutions and input gradients, and weight gradients where the graph
// API builds no plan (or TG_CUDNN_GRAPH=0), go through the legacy
// convolution API: its algorithms timed (cudnnFind*Ex) or chosen by
// heuristics (cudnnGet*Algorithm_v7) under the same rules. Either choice is
// cached per shape, so a captured call repeats the eager one; workspaces
// come from the caching allocator. A slot answers false (the op layer's
// path runs) where cuDNN has no algorithm or refuses the descriptors.
//
// Why the graph API for weight gradients: the legacy API reaches only some
// of cuDNN 9's engines. Its weight gradient of a 3 x 3 convolution over
// [16, 128, 32, 32] (float32 without TF32) took 0.415 ms on an H200, the
// graph API's 0.085.
#include "tensor/grid_kernels.h"

#include "cuda/kernels/group.h"
#include "cuda/kernels/resample.h"

#if TAPEGRAD_CUDNN
// cuDNN 9 marks its convolution API (the one PyTorch's convolutions call)
// deprecated in favour of the graph API; it is supported through 9.x.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include <tapegrad/cuda/capture.h>
#include <tapegrad/cuda/device.h>
#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

#include "cuda/launch.h"
#include "cuda/runtime/check.h"
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
// A legacy algorithm and its timed milliseconds per call (negative when
// cuDNN's heuristics chose it untimed); id -1: none that fits.
struct Algo {
  int id = -1;
  float ms = -1;
};
std::map<std::string, Algo>& algo_cache() {
  static auto* m = new std::map<std::string, Algo>();
  return *m;
}

// Whether the call being chosen for is float32 without TF32 (set by run()).
thread_local bool t_float32_strict = false;

// The first algorithm (heuristics' rank, or timed order) that succeeds,
// fits, is deterministic when asked and keeps float32 out of TF32, with its
// time when `timed`; id -1 for none.
template <class Perf, class Query> Algo pick(size_t max_workspace, bool timed, Query&& query) {
  constexpr int kCount = 16;
  Perf perf[kCount];
  int returned = 0;
  if (query(kCount, &returned, perf) != CUDNN_STATUS_SUCCESS) return {};
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
    return {int(perf[i].algo), timed ? perf[i].time : -1.0f};
  }
  return {};
}

// ---- the graph API -------------------------------------------------------------------

// A backend descriptor owned by its holder (null when cuDNN refused it).
struct Backend {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Backend(cudnnBackendDescriptorType_t t) {
    if (cudnnBackendCreateDescriptor(t, &d) != CUDNN_STATUS_SUCCESS) d = nullptr;
  }
  ~Backend() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
};

template <class V>
bool set(const Backend& b, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const V* v) {
  return b.d && cudnnBackendSetAttribute(b.d, a, t, n, v) == CUDNN_STATUS_SUCCESS;
}
bool finalize(const Backend& b) { return b.d && cudnnBackendFinalize(b.d) == CUDNN_STATUS_SUCCESS; }

// The largest power of two (up to 16) dividing the address: part of a
// plan's key, since engines may need aligned operands.
int64_t alignment_of(const void* p) {
  int64_t a = 16;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % uintptr_t(a) != 0)
    a /= 2;
  return a;
}

bool describe_tensor(const Backend& t, int64_t uid, cudnnDataType_t dt, const Tensor& v) {
  const Shape s = shape_of(v);
  const std::vector<int64_t> dims(s.sizes.begin(), s.sizes.end()), strides(s.strides.begin(), s.strides.end());
  const int64_t align = alignment_of(v.data_ptr());
  return set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) &&
         set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, int64_t(dims.size()), dims.data()) &&
         set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, int64_t(strides.size()), strides.data()) &&
         set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) &&
         set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) && finalize(t);
}

// An execution plan and the workspace it asks for.
struct Plan {
  std::unique_ptr<Backend> plan;
  int64_t workspace = 0;
};

// The cached plan per call shape and handle (plans belong to a handle);
// null: no plan, the legacy API runs.
std::map<std::string, std::shared_ptr<Plan>>& plan_cache() {
  static auto* m = new std::map<std::string, std::shared_ptr<Plan>>();
  return *m;
}

// Runs `plan` on x, w, y (uids 1, 2, 3) with `ws` of workspace.
cudnnStatus_t execute(cudnnHandle_t h, const Plan& plan, const Tensor& x, const Tensor& w, const Tensor& y, void* ws) {
  Backend pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  void* ptrs[3] = {x.data_ptr(), w.data_ptr(), y.data_ptr()};
  const int64_t uids[3] = {1, 2, 3};
  if (!set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs) ||
      !set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids) ||
      !set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws) || !finalize(pack))
    return CUDNN_STATUS_BAD_PARAM;
  return cudnnBackendExecute(h, plan.plan->d, pack.d);
}

// Whether an engine configuration may run: no TF32 for strict float32 and
// no down-converted inputs there, deterministic when asked, not compiled at
// run time (seconds on first use).
bool allowed(cudnnBackendDescriptor_t cfg, bool strict_float32) {
  Backend engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  if (!engine.d || cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                            &engine.d) != CUDNN_STATUS_SUCCESS)
    return false;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS)
    return false;
  const bool deterministic = are_deterministic_algorithms_enabled();
  for (int64_t i = 0; i < n; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC && deterministic) return false;
    if (notes[i] == CUDNN_NUMERICAL_NOTE_FFT) return false;
    if (strict_float32 &&
        (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
      return false;
  }
  cudnnBackendBehaviorNote_t behaviour[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behaviour) != CUDNN_STATUS_SUCCESS)
    return false;
  for (int64_t i = 0; i < n; ++i)
    if (behaviour[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return false;
  return true;
}

// The operation graph of one convolution of kind k over x, w, y.
struct OpGraph {
  Backend xt{CUDNN_BACKEND_TENSOR_DESCRIPTOR}, wt{CUDNN_BACKEND_TENSOR_DESCRIPTOR}, yt{CUDNN_BACKEND_TENSOR_DESCRIPTOR};
  Backend conv{CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR};
  std::unique_ptr<Backend> op;
  Backend graph{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
};

bool build_graph(OpGraph& og, cudnnHandle_t h, Kind k, const Tensor& x, const Tensor& w, const Tensor& y,
                 const ConvGeometry& g) {
  const cudnnDataType_t dt = data_type(x.dtype());
  if (!describe_tensor(og.xt, 1, dt, x) || !describe_tensor(og.wt, 2, dt, w) || !describe_tensor(og.yt, 3, dt, y))
    return false;
  std::vector<int64_t> pad, stride, dil;
  if (x.dim() == 3) {
    pad.push_back(0);
    stride.push_back(1);
    dil.push_back(1);
  }
  for (size_t i = 0; i < g.stride.size(); ++i) {
    pad.push_back(g.padding[i]);
    stride.push_back(g.stride[i]);
    dil.push_back(g.dilation[i]);
  }
  // The post padding: the pre padding where that gives y's sizes (cuDNN
  // checks they agree), else the one that does.
  std::vector<int64_t> post = pad;
  const Shape xs = shape_of(x), ws = shape_of(w), ys = shape_of(y);
  for (size_t i = 0; i < pad.size(); ++i) {
    const int64_t in = xs.sizes[i + 2], span = dil[i] * (ws.sizes[i + 2] - 1) + 1, out = ys.sizes[i + 2];
    if (in + 2 * pad[i] >= span && (in + 2 * pad[i] - span) / stride[i] + 1 == out) continue;
    post[i] = (out - 1) * stride[i] + span - in - pad[i];
    if (post[i] < 0) return false;
  }
  const int64_t nsp = int64_t(pad.size());
  const cudnnDataType_t comp = x.dtype() == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  if (!set(og.conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) ||
      !set(og.conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
      !set(og.conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp) ||
      !set(og.conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nsp, dil.data()) ||
      !set(og.conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nsp, stride.data()) ||
      !set(og.conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nsp, pad.data()) ||
      !set(og.conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nsp, post.data()) || !finalize(og.conv))
    return false;
  const bool dbl = x.dtype() == kFloat64;
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const cudnnBackendAttributeType_t st = dbl ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  const void* alpha = dbl ? static_cast<const void*>(&one64) : static_cast<const void*>(&one32);
  const void* beta = dbl ? static_cast<const void*>(&zero64) : static_cast<const void*>(&zero32);
  // The operation's descriptor type and its attributes' names: alpha, beta,
  // the convolution, then x (dx), w (dw), y (dy).
  struct Names {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
  };
  const Names n = k == Kind::Forward        ? Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                             CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                             CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                             CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                             CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                             CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                             CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y}
                  : k == Kind::BackwardData ? Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY}
                                            : Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
  og.op = std::make_unique<Backend>(n.type);
  const cudnnBackendAttributeType_t desc = CUDNN_TYPE_BACKEND_DESCRIPTOR;
  const bool ok = set(*og.op, n.alpha, st, 1, alpha) && set(*og.op, n.beta, st, 1, beta) &&
                  set(*og.op, n.conv, desc, 1, &og.conv.d) && set(*og.op, n.x, desc, 1, &og.xt.d) &&
                  set(*og.op, n.w, desc, 1, &og.wt.d) && set(*og.op, n.y, desc, 1, &og.yt.d);
  if (!ok || !finalize(*og.op)) return false;
  return set(og.graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og.op->d) &&
         set(og.graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) && finalize(og.graph);
}

// The allowed plans of the graph, heuristics mode A's order then the
// fallback list's (at most `limit`, none asking more than `max_workspace`).
std::vector<std::shared_ptr<Plan>> candidate_plans(cudnnHandle_t h, const OpGraph& og, bool strict_float32,
                                                   size_t limit, int64_t max_workspace) {
  std::vector<std::shared_ptr<Plan>> plans;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Backend heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    if (!set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og.graph.d) ||
        !set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) || !finalize(heur))
      continue;
    int64_t count = 0;
    if (cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr) != CUDNN_STATUS_SUCCESS ||
        count <= 0)
      continue;
    std::vector<std::unique_ptr<Backend>> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      cfgs.push_back(std::make_unique<Backend>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      if (!cfgs.back()->d) return plans;
      raw.push_back(cfgs.back()->d);
    }
    if (cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                 raw.data()) != CUDNN_STATUS_SUCCESS)
      continue;
    for (int64_t i = 0; i < count && plans.size() < limit; ++i) {
      if (!allowed(raw[size_t(i)], strict_float32)) continue;
      auto p = std::make_shared<Plan>();
      p->plan = std::make_unique<Backend>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      int64_t n = 0;
      if (!set(*p->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
          !set(*p->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[size_t(i)]) ||
          !finalize(*p->plan) ||
          cudnnBackendGetAttribute(p->plan->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                   &p->workspace) != CUDNN_STATUS_SUCCESS ||
          p->workspace < 0 || p->workspace > max_workspace)
        continue;
      plans.push_back(std::move(p));
    }
    if (plans.size() >= limit) break;
  }
  return plans;
}

// A workspace tensor of `bytes` from the caching allocator (null for 0).
Tensor workspace_of(int64_t bytes, Device device) {
  return bytes ? detail::new_empty({(bytes + 15) / 16 * 4}, kFloat32, device) : Tensor();
}

// The call's workspace of `bytes` (null for 0), its write recorded on
// `access`; `holder` keeps the caching allocator's block until the call
// returns (later calls on the stream reuse it in stream order). Under
// capture a workspace of each call's own (the encoder's) measured no gain
// in the U-Net step (H200, 128^2: 77.1 against 77.4 ms), so they share.
void* call_workspace(cuda::LaunchEncoder& access, int64_t bytes, Tensor& holder, Device device) {
  if (bytes <= 0) return nullptr;
  holder = workspace_of(bytes, device);
  access.write(holder);
  return holder.data_ptr();
}

// The fastest of `plans` over three timed runs each after one untimed run
// (each writes the call's output, which the chosen plan then overwrites),
// its milliseconds per run in `ms`; of plans within 3% of the fastest, the
// one with the smallest workspace. Plans that fail are skipped.
std::shared_ptr<Plan> fastest(cudnnHandle_t h, cudaStream_t stream, std::vector<std::shared_ptr<Plan>>& plans,
                              const Tensor& x, const Tensor& w, const Tensor& y, float* ms_per_run) {
  *ms_per_run = -1;
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    if (start) cudaEventDestroy(start);
    cudaGetLastError();
    return plans.empty() ? nullptr : plans.front();
  }
  std::vector<std::pair<float, std::shared_ptr<Plan>>> timed;
  for (auto& p : plans) {
    Tensor ws;
    try {
      ws = workspace_of(p->workspace, x.device());
    } catch (const Error&) {
      continue;  // no room for this one's workspace
    }
    void* wp = p->workspace ? ws.data_ptr() : nullptr;
    if (execute(h, *p, x, w, y, wp) != CUDNN_STATUS_SUCCESS) continue;
    cudaEventRecord(start, stream);
    bool ok = true;
    for (int r = 0; r < 3 && ok; ++r)
      ok = execute(h, *p, x, w, y, wp) == CUDNN_STATUS_SUCCESS;
    cudaEventRecord(stop, stream);
    float ms = 0;
    if (!ok || cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    timed.emplace_back(ms / 3, p);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (timed.empty()) return nullptr;
  float best_ms = timed.front().first;
  for (const auto& t : timed)
    best_ms = std::min(best_ms, t.first);
  std::shared_ptr<Plan> best;
  for (const auto& t : timed)
    if (t.first <= best_ms * 1.03f && (!best || t.second->workspace < best->workspace)) {
      best = t.second;
      *ms_per_run = t.first;
    }
  return best;
}

// Records a call's reads and its write on `access`.
void record_operands(cuda::LaunchEncoder& access, Kind k, const Tensor& x, const Tensor& w, const Tensor& y) {
  access.read(k == Kind::BackwardData ? y : x);
  access.read(k == Kind::BackwardFilter ? y : w);
  access.write(k == Kind::Forward ? y : k == Kind::BackwardData ? x : w);
}

// One call through the graph API; false when it builds no plan, or when
// its timed plans were no faster than the legacy API's choice (`legacy_ms`
// per call, negative when untimed): the legacy API then runs.
bool run_graph(Kind k, const char* op, cudnnHandle_t h, cudaStream_t stream, const Tensor& x, const Tensor& w,
               const Tensor& y, const ConvGeometry& g, const std::string& shape_key, float legacy_ms) {
  std::ostringstream ks;
  ks << shape_key << "|h" << static_cast<const void*>(h) << '|' << alignment_of(x.data_ptr()) << '|'
     << alignment_of(w.data_ptr()) << '|' << alignment_of(y.data_ptr());
  const std::string key = ks.str();
  std::shared_ptr<Plan> plan;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(algo_mutex());
    auto it = plan_cache().find(key);
    if (it != plan_cache().end()) {
      plan = it->second;
      cached = true;
    }
  }
  const bool capturing = cuda::is_current_stream_capturing();
  if (!cached) {
    OpGraph og;
    if (build_graph(og, h, k, x, w, y, g)) {
      const bool timed = !capturing && detail::switched_on<detail::OffSwitch::kCudnnFind>();
      auto plans =
          candidate_plans(h, og, t_float32_strict, timed ? 12 : 1, int64_t(timed ? kFindWorkspace : kMaxWorkspace));
      if (timed) {
        // Kept only when faster than the legacy API's timed choice.
        float ms = -1;
        plan = fastest(h, stream, plans, x, w, y, &ms);
        if (plan && legacy_ms >= 0 && ms >= legacy_ms) plan = nullptr;
      } else if (!plans.empty()) {
        plan = plans.front();
      }
    }
    if (!capturing) {
      std::lock_guard<std::mutex> lock(algo_mutex());
      if (plan_cache().size() > 4096) plan_cache().clear();
      plan_cache()[key] = plan;
    }
  }
  if (!plan) return false;
  cuda::LaunchEncoder access(stream);
  record_operands(access, k, x, w, y);
  Tensor scratch;
  void* ws = call_workspace(access, plan->workspace, scratch, x.device());
  TG_CUDNN_CHECK(execute(h, *plan, x, w, y, ws), op);
  return true;
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
  const bool capturing = cuda::is_current_stream_capturing();
  Algo algo;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(algo_mutex());
    auto it = algo_cache().find(key);
    if (it != algo_cache().end()) {
      algo = it->second;
      known = true;
    }
  }
  if (!known) {
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
    const size_t limit = timed ? scratch_bytes : kMaxWorkspace;
    switch (k) {
      case Kind::Forward:
        algo = pick<cudnnConvolutionFwdAlgoPerf_t>(limit, timed, [&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* p) {
          return timed ? cudnnFindConvolutionForwardAlgorithmEx(h, d.x, x.data_ptr(), d.w, w.data_ptr(), d.conv, d.y,
                                                                y.data_ptr(), n, r, p, sp, scratch_bytes)
                       : cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, n, r, p);
        });
        break;
      case Kind::BackwardData:
        algo = pick<cudnnConvolutionBwdDataAlgoPerf_t>(
            limit, timed, [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* p) {
              return timed
                         ? cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, w.data_ptr(), d.y, y.data_ptr(), d.conv,
                                                                       d.x, x.data_ptr(), n, r, p, sp, scratch_bytes)
                         : cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, n, r, p);
            });
        break;
      case Kind::BackwardFilter:
        algo = pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
            limit, timed, [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* p) {
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
  // The graph API's engines, where faster than the legacy API's timed
  // choice (both timed once per shape): for weight gradients (4-5x faster
  // than the legacy API's at 32^2 and below), and for eager forward calls
  // and input gradients (TG_CUDNN_GRAPH_FWD): H200, U-Net step at 128^2,
  // eager 89.0 against 122.4 ms. Under capture those two stay on the legacy
  // API: with the graph API's plans there the replay took 99.4 ms against
  // 77.1 (docs/PERFORMANCE.md). A captured call and an eager one of the same
  // shape may so take different algorithms (results equal to rounding).
  const bool graph_kind =
      k == Kind::BackwardFilter || (!capturing && detail::switched_on<detail::OffSwitch::kCudnnGraphFwd>());
  if (graph_kind && detail::switched_on<detail::OffSwitch::kCudnnGraph>() &&
      run_graph(k, op, h, stream, x, w, y, g, key, algo.ms))
    return true;
  if (algo.id < 0) return false;
  size_t bytes = 0;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (k) {
    case Kind::Forward:
      st =
          cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, cudnnConvolutionFwdAlgo_t(algo.id), &bytes);
      break;
    case Kind::BackwardData:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x,
                                                        cudnnConvolutionBwdDataAlgo_t(algo.id), &bytes);
      break;
    case Kind::BackwardFilter:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                          cudnnConvolutionBwdFilterAlgo_t(algo.id), &bytes);
      break;
  }
  if (st != CUDNN_STATUS_SUCCESS) return false;
  // The workspace is a tensor from the caching allocator (a CUDA graph's
  // pool under capture), freed when the call returns: later calls on the
  // stream reuse it in stream order, and the encoder records it written, so
  // a captured graph's relaxation keeps the calls that share it in order
  // (the encoder's own workspaces would stay the graph's, one per call:
  // gigabytes over a U-Net's hundreds of convolutions).
  cuda::LaunchEncoder access(stream);
  record_operands(access, k, x, w, y);
  Tensor scratch;
  void* ws = call_workspace(access, int64_t(bytes), scratch, x.device());
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const bool dbl = x.dtype() == kFloat64;
  const void* alpha = dbl ? static_cast<const void*>(&one64) : static_cast<const void*>(&one32);
  const void* beta = dbl ? static_cast<const void*>(&zero64) : static_cast<const void*>(&zero32);
  switch (k) {
    case Kind::Forward:
      TG_CUDNN_CHECK(cudnnConvolutionForward(h, alpha, d.x, x.data_ptr(), d.w, w.data_ptr(), d.conv,
                                             cudnnConvolutionFwdAlgo_t(algo.id), ws, bytes, beta, d.y, y.data_ptr()),
                     op);
      break;
    case Kind::BackwardData:
      TG_CUDNN_CHECK(
          cudnnConvolutionBackwardData(h, alpha, d.w, w.data_ptr(), d.y, y.data_ptr(), d.conv,
                                       cudnnConvolutionBwdDataAlgo_t(algo.id), ws, bytes, beta, d.x, x.data_ptr()),
          op);
      break;
    case Kind::BackwardFilter:
      TG_CUDNN_CHECK(
          cudnnConvolutionBackwardFilter(h, alpha, d.x, x.data_ptr(), d.y, y.data_ptr(), d.conv,
                                         cudnnConvolutionBwdFilterAlgo_t(algo.id), ws, bytes, beta, d.w, w.data_ptr()),
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
    k.group_sum = &cuda::group_sum;
    k.group_center = &cuda::group_center;
    k.group_affine = &cuda::group_affine;
    k.resample_linear = &cuda::resample_linear;
    k.resample_linear_backward = &cuda::resample_linear_backward;
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

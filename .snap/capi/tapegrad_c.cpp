// The C API (include/tapegrad_c.h) over the C++ one: a handle owns one
// tg::Tensor; every entry point runs its body in `guarded`, which turns
// exceptions into a status and this thread's last-error message.
#include <tapegrad_c.h>

#include <any>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

struct tg_tensor_s {
  tg::Tensor t;
};

namespace {

thread_local std::string t_last_error;

// A status for an argument the caller got wrong (no exception involved).
struct InvalidArgument {
  std::string message;
};

template <class F> tg_status guarded(const char* fn, F&& body) {
  try {
    body();
    return TG_OK;
  } catch (const InvalidArgument& e) {
    t_last_error = std::string(fn) + ": " + e.message;
    return TG_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    t_last_error = std::string(fn) + ": out of host memory";
    return TG_OUT_OF_MEMORY;
  } catch (const tg::Error& e) {
    t_last_error = e.what();
    const bool oom = t_last_error.find("out of memory") != std::string::npos;
    return oom ? TG_OUT_OF_MEMORY : TG_ERROR;
  } catch (const std::exception& e) {
    t_last_error = std::string(fn) + ": " + e.what();
    return TG_ERROR;
  } catch (...) {
    t_last_error = std::string(fn) + ": an unknown exception";
    return TG_ERROR;
  }
}

void require(bool ok, const char* what) {
  if (!ok) throw InvalidArgument{what};
}

const tg::Tensor& in(tg_tensor h, const char* name) {
  if (!h) throw InvalidArgument{std::string(name) + " is a null tg_tensor"};
  return h->t;
}

tg_tensor wrap(tg::Tensor t) { return new tg_tensor_s{std::move(t)}; }

// Writes a new handle to *out only once everything succeeded.
void put(tg_tensor* out, tg::Tensor t) { *out = wrap(std::move(t)); }

// Enums arrive from C as any int: their bytes are read as an int, never
// loaded as an out-of-range enum value (undefined behaviour in C++, which
// UBSan reports).
template <class E> int enum_int(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

tg::ScalarType dtype_of(const tg_dtype& d_in) {
  const int d = enum_int(d_in);
  switch (d) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, Rank, DlCode, DlBits, CudaType, NcclType, py, st, numpy, \
                 CEnum)                                                                                            \
  case CEnum:                                                                                                      \
    return tg::ScalarType::Name;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  throw InvalidArgument{"unknown tg_dtype " + std::to_string(d)};
}

tg_dtype c_dtype(tg::ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, Rank, DlCode, DlBits, CudaType, NcclType, py, st, numpy, \
                 CEnum)                                                                                            \
  case tg::ScalarType::Name:                                                                                       \
    return CEnum;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return TG_FLOAT32;
}

tg::Device device_of(const tg_device& d) {
  const int type = enum_int(d.type);
  if (type == TG_CPU) return tg::Device(tg::kCPU);
  if (type == TG_CUDA) return tg::Device(tg::kCUDA, d.index);
  throw InvalidArgument{"unknown tg_device_type " + std::to_string(type)};
}

// More dims than any tensor has: an ndim beyond it is a caller's mistake
// (and would read past the shape array).
constexpr int kMaxDims = 64;

tg::IntList shape_of(const int64_t* shape, int ndim) {
  require(ndim >= 0, "ndim is negative");
  if (ndim > kMaxDims)
    throw InvalidArgument{"ndim " + std::to_string(ndim) + " is more than " + std::to_string(kMaxDims) + " dims"};
  require(ndim == 0 || shape, "shape is NULL");
  return tg::IntList(shape, shape + ndim);
}

// A callback's result handle: `result` may be the handle the callback was
// given (`given`): then it is freed once, and its tensor kept.
tg::Tensor take_result(tg_tensor given, tg_tensor result) {
  tg::Tensor t = result->t;
  if (result != given) tg_tensor_free(result);
  tg_tensor_free(given);
  return t;
}

tg::TensorOptions options(const tg_dtype& dtype, const tg_device& device) {
  return tg::TensorOptions().dtype(dtype_of(dtype)).device(device_of(device));
}

// A C callback as a TensorFn: its failure becomes a tg::Error carrying the
// message it left (or a generic one).
tg::autograd::TensorFn function_of(tg_function fn, void* context) {
  if (!fn) throw InvalidArgument{"fn is NULL"};
  return [fn, context](const tg::Tensor& x) {
    tg_tensor xh = wrap(x), yh = nullptr;
    t_last_error.clear();
    const tg_status s = fn(xh, &yh, context);
    if (s != TG_OK || !yh) {
      if (yh != xh) tg_tensor_free(yh);
      tg_tensor_free(xh);
      TG_CHECK(false, "the C function returned ", s != TG_OK ? "status " + std::to_string(int(s)) : "no tensor",
               t_last_error.empty() ? std::string() : ": " + t_last_error);
    }
    return take_result(xh, yh);
  };
}

std::vector<tg::Tensor> tensors(const tg_tensor* h, int n, const char* name) {
  require(n >= 0, "a negative count");
  require(n == 0 || h, "an array is NULL");
  std::vector<tg::Tensor> v;
  for (int i = 0; i < n; ++i)
    v.push_back(in(h[i], name));
  return v;
}

// How many hook pairs the C API pushed on this thread (the pairs live on
// the autograd stack, their one owner, which frees them at thread exit).
thread_local int t_c_hooks = 0;

}  // namespace

extern "C" {

void tg_c_api_version(int* major, int* minor) {
  if (major) *major = TG_C_API_VERSION_MAJOR;
  if (minor) *minor = TG_C_API_VERSION_MINOR;
}

const char* tg_last_error(void) { return t_last_error.c_str(); }

tg_status tg_tensor_from_data(const void* data, const int64_t* shape, int ndim, tg_dtype dtype, tg_device device,
                              tg_tensor* out) {
  return guarded("tg_tensor_from_data", [&] {
    require(out, "out is NULL");
    tg::IntList sizes = shape_of(shape, ndim);
    tg::Tensor host = tg::empty(sizes, tg::TensorOptions().dtype(dtype_of(dtype)));
    const size_t nbytes = size_t(host.numel()) * tg::element_size(host.dtype());
    require(nbytes == 0 || data, "data is NULL");
    if (nbytes) std::memcpy(host.data_ptr(), data, nbytes);
    put(out, host.to(device_of(device)));
  });
}

tg_status tg_tensor_from_blob(void* data, const int64_t* shape, const int64_t* strides, int ndim, tg_dtype dtype,
                              tg_device device, void (*release)(void*), void* context, tg_tensor* out) {
  return guarded("tg_tensor_from_blob", [&] {
    require(out, "out is NULL");
    tg::IntList sizes = shape_of(shape, ndim);
    tg::IntList st = strides ? tg::IntList(strides, strides + ndim) : tg::IntList();
    for (int64_t x : st)
      require(x >= 0, "a negative stride");
    put(out, tg::from_blob(data, sizes, st, dtype_of(dtype), device_of(device), release, context));
  });
}

tg_status tg_zeros(const int64_t* shape, int ndim, tg_dtype dtype, tg_device device, tg_tensor* out) {
  return guarded("tg_zeros", [&] {
    require(out, "out is NULL");
    put(out, tg::zeros(shape_of(shape, ndim), options(dtype, device)));
  });
}

tg_status tg_ones(const int64_t* shape, int ndim, tg_dtype dtype, tg_device device, tg_tensor* out) {
  return guarded("tg_ones", [&] {
    require(out, "out is NULL");
    put(out, tg::ones(shape_of(shape, ndim), options(dtype, device)));
  });
}

tg_status tg_randn(const int64_t* shape, int ndim, tg_dtype dtype, tg_device device, tg_tensor* out) {
  return guarded("tg_randn", [&] {
    require(out, "out is NULL");
    put(out, tg::randn(shape_of(shape, ndim), options(dtype, device)));
  });
}

tg_status tg_manual_seed(uint64_t seed) {
  return guarded("tg_manual_seed", [&] { tg::manual_seed(seed); });
}

tg_status tg_tensor_copy_to(tg_tensor t, void* data, size_t nbytes) {
  return guarded("tg_tensor_copy_to", [&] {
    const tg::Tensor& x = in(t, "t");
    tg::Tensor host = x.detach().to(tg::Device(tg::kCPU)).contiguous();
    const size_t want = size_t(host.numel()) * tg::element_size(host.dtype());
    TG_CHECK(nbytes == want, "tg_tensor_copy_to: the tensor (", x.dtype(), " ", x.sizes(), ") has ", want,
             " bytes, the buffer ", nbytes);
    require(want == 0 || data, "data is NULL");
    if (want) std::memcpy(data, host.data_ptr(), want);
  });
}

tg_status tg_tensor_from_dlpack(void* managed, tg_tensor* out) {
  return guarded("tg_tensor_from_dlpack", [&] {
    // Refused or not, tapegrad owns `managed` now: from_dlpack runs its
    // deleter on every refusal, and so does a missing `out`.
    tg::Tensor t = tg::from_dlpack(static_cast<DLManagedTensor*>(managed));
    require(out, "out is NULL");
    put(out, std::move(t));
  });
}

tg_status tg_tensor_to_dlpack(tg_tensor t, void** managed) {
  return guarded("tg_tensor_to_dlpack", [&] {
    require(managed, "managed is NULL");
    *managed = tg::to_dlpack(in(t, "t"));
  });
}

void tg_tensor_free(tg_tensor t) { delete t; }

tg_status tg_tensor_ndim(tg_tensor t, int* ndim) {
  return guarded("tg_tensor_ndim", [&] {
    require(ndim, "ndim is NULL");
    *ndim = int(in(t, "t").dim());
  });
}

tg_status tg_tensor_shape(tg_tensor t, int64_t* shape) {
  return guarded("tg_tensor_shape", [&] {
    const tg::Tensor& x = in(t, "t");
    require(shape || x.dim() == 0, "shape is NULL");
    for (int64_t d = 0; d < x.dim(); ++d)
      shape[d] = x.size(d);
  });
}

tg_status tg_tensor_numel(tg_tensor t, int64_t* numel) {
  return guarded("tg_tensor_numel", [&] {
    require(numel, "numel is NULL");
    *numel = in(t, "t").numel();
  });
}

tg_status tg_tensor_dtype(tg_tensor t, tg_dtype* dtype) {
  return guarded("tg_tensor_dtype", [&] {
    require(dtype, "dtype is NULL");
    *dtype = c_dtype(in(t, "t").dtype());
  });
}

tg_status tg_tensor_device(tg_tensor t, tg_device* device) {
  return guarded("tg_tensor_device", [&] {
    require(device, "device is NULL");
    const tg::Device d = in(t, "t").device();
    *device = d.is_cuda() ? tg_device{TG_CUDA, d.index()} : tg_device{TG_CPU, 0};
  });
}

tg_status tg_tensor_item(tg_tensor t, double* value) {
  return guarded("tg_tensor_item", [&] {
    require(value, "value is NULL");
    *value = in(t, "t").detach().to(tg::kFloat64).item<double>();
  });
}

tg_status tg_binary(tg_binary_op op, tg_tensor a, tg_tensor b, tg_tensor* out) {
  return guarded("tg_binary", [&] {
    require(out, "out is NULL");
    const tg::Tensor &x = in(a, "a"), &y = in(b, "b");
    switch (enum_int(op)) {
      case TG_ADD: return put(out, tg::add(x, y));
      case TG_SUB: return put(out, tg::sub(x, y));
      case TG_MUL: return put(out, tg::mul(x, y));
      case TG_DIV: return put(out, tg::div(x, y));
      case TG_POW: return put(out, tg::pow(x, y));
      case TG_MAXIMUM: return put(out, tg::maximum(x, y));
      case TG_MINIMUM: return put(out, tg::minimum(x, y));
    }
    throw InvalidArgument{"unknown tg_binary_op " + std::to_string(enum_int(op))};
  });
}

tg_status tg_binary_scalar(tg_binary_op op, tg_tensor a, double s, tg_tensor* out) {
  return guarded("tg_binary_scalar", [&] {
    require(out, "out is NULL");
    const tg::Tensor& x = in(a, "a");
    switch (enum_int(op)) {
      case TG_ADD: return put(out, x + s);
      case TG_SUB: return put(out, x - s);
      case TG_MUL: return put(out, x * s);
      case TG_DIV: return put(out, x / s);
      case TG_POW: return put(out, tg::pow(x, s));
      case TG_MAXIMUM: return put(out, tg::clamp(x, s, std::nullopt));
      case TG_MINIMUM: return put(out, tg::clamp(x, std::nullopt, s));
    }
    throw InvalidArgument{"unknown tg_binary_op " + std::to_string(enum_int(op))};
  });
}

tg_status tg_unary(tg_unary_op op, tg_tensor a, tg_tensor* out) {
  return guarded("tg_unary", [&] {
    require(out, "out is NULL");
    const tg::Tensor& x = in(a, "a");
    switch (enum_int(op)) {
      case TG_NEG: return put(out, tg::neg(x));
      case TG_EXP: return put(out, tg::exp(x));
      case TG_LOG: return put(out, tg::log(x));
      case TG_SIN: return put(out, tg::sin(x));
      case TG_COS: return put(out, tg::cos(x));
      case TG_TANH: return put(out, tg::tanh(x));
      case TG_SIGMOID: return put(out, tg::sigmoid(x));
      case TG_RELU: return put(out, tg::relu(x));
      case TG_SILU: return put(out, tg::silu(x));
      case TG_GELU: return put(out, tg::gelu(x));
      case TG_SOFTPLUS: return put(out, tg::softplus(x));
      case TG_SQRT: return put(out, tg::sqrt(x));
      case TG_SQUARE: return put(out, tg::square(x));
      case TG_ABS: return put(out, tg::abs(x));
      case TG_RECIPROCAL: return put(out, tg::reciprocal(x));
    }
    throw InvalidArgument{"unknown tg_unary_op " + std::to_string(enum_int(op))};
  });
}

tg_status tg_matmul(tg_tensor a, tg_tensor b, tg_tensor* out) {
  return guarded("tg_matmul", [&] {
    require(out, "out is NULL");
    put(out, tg::matmul(in(a, "a"), in(b, "b")));
  });
}

tg_status tg_linear(tg_tensor x, tg_tensor w, tg_tensor b, tg_tensor* out) {
  return guarded("tg_linear", [&] {
    require(out, "out is NULL");
    put(out, tg::linear(in(x, "x"), in(w, "w"), b ? b->t : tg::Tensor()));
  });
}

tg_status tg_sum(tg_tensor a, const int64_t* dims, int ndims, int keepdim, tg_tensor* out) {
  return guarded("tg_sum", [&] {
    require(out, "out is NULL");
    const tg::Tensor& x = in(a, "a");
    put(out, ndims == 0 ? tg::sum(x) : tg::sum(x, shape_of(dims, ndims), keepdim != 0));
  });
}

tg_status tg_mean(tg_tensor a, const int64_t* dims, int ndims, int keepdim, tg_tensor* out) {
  return guarded("tg_mean", [&] {
    require(out, "out is NULL");
    const tg::Tensor& x = in(a, "a");
    put(out, ndims == 0 ? tg::mean(x) : tg::mean(x, shape_of(dims, ndims), keepdim != 0));
  });
}

tg_status tg_reshape(tg_tensor a, const int64_t* shape, int ndim, tg_tensor* out) {
  return guarded("tg_reshape", [&] {
    require(out, "out is NULL");
    put(out, in(a, "a").reshape(shape_of(shape, ndim)));
  });
}

tg_status tg_transpose(tg_tensor a, int64_t dim0, int64_t dim1, tg_tensor* out) {
  return guarded("tg_transpose", [&] {
    require(out, "out is NULL");
    put(out, in(a, "a").transpose(dim0, dim1));
  });
}

tg_status tg_select(tg_tensor a, int64_t dim, int64_t index, tg_tensor* out) {
  return guarded("tg_select", [&] {
    require(out, "out is NULL");
    put(out, in(a, "a").select(dim, index));
  });
}

tg_status tg_cat(const tg_tensor* ts, int n, int64_t dim, tg_tensor* out) {
  return guarded("tg_cat", [&] {
    require(out, "out is NULL");
    put(out, tg::cat(tensors(ts, n, "tensors[i]"), dim));
  });
}

tg_status tg_detach(tg_tensor a, tg_tensor* out) {
  return guarded("tg_detach", [&] {
    require(out, "out is NULL");
    put(out, in(a, "a").detach());
  });
}

tg_status tg_tensor_set_requires_grad(tg_tensor t, int requires_grad) {
  return guarded("tg_tensor_set_requires_grad", [&] {
    tg::Tensor x = in(t, "t");
    x.requires_grad_(requires_grad != 0);
  });
}

tg_status tg_tensor_requires_grad(tg_tensor t, int* requires_grad) {
  return guarded("tg_tensor_requires_grad", [&] {
    require(requires_grad, "requires_grad is NULL");
    *requires_grad = in(t, "t").requires_grad() ? 1 : 0;
  });
}

tg_status tg_tensor_grad(tg_tensor t, tg_tensor* out) {
  return guarded("tg_tensor_grad", [&] {
    require(out, "out is NULL");
    tg::Tensor g = in(t, "t").grad();
    *out = g.defined() ? wrap(g) : nullptr;
  });
}

tg_status tg_backward(tg_tensor t, tg_tensor gradient, int create_graph) {
  return guarded("tg_backward", [&] {
    std::vector<tg::Tensor> g;
    if (gradient) g.push_back(gradient->t);
    tg::autograd::backward({in(t, "t")}, g, std::nullopt, create_graph != 0);
  });
}

tg_status tg_grad(const tg_tensor* outputs, int n_outputs, const tg_tensor* inputs, int n_inputs,
                  const tg_tensor* grad_outputs, int create_graph, int allow_unused, tg_tensor* grads) {
  return guarded("tg_grad", [&] {
    require(grads || n_inputs == 0, "grads is NULL");
    std::vector<tg::Tensor> outs = tensors(outputs, n_outputs, "outputs[i]");
    std::vector<tg::Tensor> ins = tensors(inputs, n_inputs, "inputs[i]");
    std::vector<tg::Tensor> gos;
    if (grad_outputs)
      for (int i = 0; i < n_outputs; ++i)
        gos.push_back(grad_outputs[i] ? grad_outputs[i]->t : tg::Tensor());
    std::vector<tg::Tensor> g = tg::autograd::grad(outs, ins, gos, std::nullopt, create_graph != 0, allow_unused != 0);
    for (int i = 0; i < n_inputs; ++i)
      grads[i] = g[size_t(i)].defined() ? wrap(g[size_t(i)]) : nullptr;
  });
}

tg_status tg_set_grad_enabled(int enabled, int* previous) {
  return guarded("tg_set_grad_enabled", [&] {
    if (previous) *previous = tg::autograd::is_grad_enabled() ? 1 : 0;
    tg::autograd::set_grad_enabled(enabled != 0);
  });
}

tg_status tg_jacobian(tg_function fn, void* context, tg_tensor x, int create_graph, tg_tensor* out) {
  return guarded("tg_jacobian", [&] {
    require(out, "out is NULL");
    put(out, tg::autograd::jacobian(function_of(fn, context), in(x, "x"), create_graph != 0));
  });
}

tg_status tg_hessian(tg_function fn, void* context, tg_tensor x, int create_graph, tg_tensor* out) {
  return guarded("tg_hessian", [&] {
    require(out, "out is NULL");
    put(out, tg::autograd::hessian(function_of(fn, context), in(x, "x"), create_graph != 0));
  });
}

tg_status tg_hvp(tg_function fn, void* context, tg_tensor x, tg_tensor v, int create_graph, tg_tensor* value,
                 tg_tensor* out) {
  return guarded("tg_hvp", [&] {
    require(out, "out is NULL");
    auto r = tg::autograd::hvp(function_of(fn, context), in(x, "x"), in(v, "v"), create_graph != 0);
    if (value) *value = wrap(r.first);
    put(out, r.second);
  });
}

tg_status tg_per_sample_hessian(tg_function fn, void* context, tg_tensor x, tg_hessian_strategy strategy,
                                int create_graph, tg_tensor* out) {
  return guarded("tg_per_sample_hessian", [&] {
    require(out, "out is NULL");
    using S = tg::autograd::HessianStrategy;
    S s;
    switch (enum_int(strategy)) {
      case TG_HESSIAN_BATCHED_COTANGENTS: s = S::BatchedCotangents; break;
      case TG_HESSIAN_ROWS: s = S::Rows; break;
      case TG_HESSIAN_FORWARD_OVER_REVERSE: s = S::ForwardOverReverse; break;
      case TG_HESSIAN_TAYLOR: s = S::Taylor; break;
      default: throw InvalidArgument{"unknown tg_hessian_strategy " + std::to_string(enum_int(strategy))};
    }
    put(out, tg::autograd::per_sample_hessian(function_of(fn, context), in(x, "x"), s, create_graph != 0));
  });
}

tg_status tg_laplacian(tg_function fn, void* context, tg_tensor x, int create_graph, tg_tensor* out) {
  return guarded("tg_laplacian", [&] {
    require(out, "out is NULL");
    put(out, tg::autograd::laplacian(function_of(fn, context), in(x, "x"), create_graph != 0));
  });
}

tg_status tg_saved_tensor_hooks_push(tg_pack_hook pack, tg_unpack_hook unpack, void* context) {
  return guarded("tg_saved_tensor_hooks_push", [&] {
    require(pack && unpack, "pack or unpack is NULL");
    auto call = [](const char* which, auto hook, const tg::Tensor& t, void* ctx) {
      tg_tensor th = wrap(t), r = nullptr;
      t_last_error.clear();
      const tg_status s = hook(th, &r, ctx);
      if (s != TG_OK || !r) {
        if (r != th) tg_tensor_free(r);
        tg_tensor_free(th);
        TG_CHECK(false, "the C saved-tensor ", which, " hook returned ",
                 s != TG_OK ? "status " + std::to_string(int(s)) : "no tensor",
                 t_last_error.empty() ? std::string() : ": " + t_last_error);
      }
      return take_result(th, r);
    };
    tg::autograd::PackHook p = [pack, context, call](const tg::Tensor& t) -> std::any {
      return call("pack", pack, t, context);
    };
    tg::autograd::UnpackHook u = [unpack, context, call](const std::any& packed) {
      return call("unpack", unpack, std::any_cast<const tg::Tensor&>(packed), context);
    };
    tg::autograd::push_saved_tensor_hooks({std::move(p), std::move(u)});
    ++t_c_hooks;
  });
}

tg_status tg_saved_tensor_hooks_pop(void) {
  return guarded("tg_saved_tensor_hooks_pop", [&] {
    require(t_c_hooks > 0, "no hooks were pushed on this thread");
    tg::autograd::pop_saved_tensor_hooks();
    --t_c_hooks;
  });
}

int tg_cuda_is_available(void) {
  try {
    return tg::cuda::is_available() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int tg_cuda_device_count(void) {
  try {
    return tg::cuda::device_count();
  } catch (...) {
    return 0;
  }
}

tg_status tg_cuda_set_stream(int device, void* stream) {
  return guarded("tg_cuda_set_stream", [&] {
    TG_CHECK(tg::cuda::is_available() && device >= 0 && device < tg::cuda::device_count(),
             "tg_cuda_set_stream: CUDA device ", device, " is not available (", tg::cuda::device_count(),
             " device(s))");
    tg::cuda::set_current_stream(tg::cuda::Stream(device, stream));
  });
}

tg_status tg_cuda_current_stream(int device, void** stream) {
  return guarded("tg_cuda_current_stream", [&] {
    require(stream, "stream is NULL");
    *stream = tg::cuda::current_stream(device).handle();
  });
}

tg_status tg_cuda_synchronize(int device) {
  return guarded("tg_cuda_synchronize", [&] { tg::cuda::synchronize(device); });
}

}  // extern "C"

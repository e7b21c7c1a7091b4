/* tapegrad's C API: opaque tensor handles, status codes and the last error's
 * message, for C, Fortran (bind(C)), Julia and other languages that call C
 * (docs/INTEROP.md "The C API"). Link tapegrad::c (libtapegrad_c). No C++
 * exception crosses it: every call that can fail returns a tg_status, and
 * tg_last_error() gives the message of this thread's last failure.
 *
 * Handles: every tg_tensor a call returns is the caller's, released with
 * tg_tensor_free (a handle is a reference: the memory lives while any
 * handle, view or autograd graph uses it). Output parameters are written
 * only on TG_OK. */
#ifndef TAPEGRAD_C_H
#define TAPEGRAD_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The C API's version: a header and a library of one major version work
 *  together; minor versions only add. */
#define TG_C_API_VERSION_MAJOR 0
/** Minor version (additions only). */
#define TG_C_API_VERSION_MINOR 1

/** The library's C API version (compare with the header's macros). */
void tg_c_api_version(int* major, int* minor);

/** Outcome of a call. */
typedef enum tg_status {
  TG_OK = 0,               /**< success */
  TG_ERROR = 1,            /**< the operation failed (tg_last_error says why) */
  TG_INVALID_ARGUMENT = 2, /**< a null handle or pointer, or an argument out of range */
  TG_OUT_OF_MEMORY = 3     /**< host or device memory ran out */
} tg_status;

/** This thread's last failure's message ("" when none): valid until the
 *  thread's next failing call. */
const char* tg_last_error(void);

/** Element types. */
/* clang-format off */
typedef enum tg_dtype {
  TG_FLOAT32 = 0, TG_FLOAT64 = 1, TG_BFLOAT16 = 2, TG_FLOAT16 = 3, TG_INT64 = 4, TG_BOOL = 5, TG_COMPLEX64 = 6,
  TG_COMPLEX128 = 7
} tg_dtype;
/* clang-format on */

/** Devices: the CPU, or CUDA device `index`. */
typedef enum tg_device_type { TG_CPU = 0, TG_CUDA = 1 } tg_device_type;
/** A device. */
typedef struct tg_device {
  tg_device_type type; /**< CPU or CUDA */
  int index;           /**< the CUDA device (0 for the CPU) */
} tg_device;

/** A tensor handle (opaque). */
typedef struct tg_tensor_s* tg_tensor;

/* ---- creation and export -------------------------------------------------------- */

/** A new tensor holding a copy of `data` (row-major, `ndim` sizes in
 *  `shape`, host memory) on `device`. */
tg_status tg_tensor_from_data(const void* data, const int64_t* shape, int ndim, tg_dtype dtype, tg_device device,
                              tg_tensor* out);
/** A tensor viewing the caller's memory (no copy): `data` on `device`, sizes
 *  `shape`, `strides` in elements (NULL: row-major). `release(context)` runs
 *  once when tapegrad no longer uses the memory (NULL: the caller keeps it
 *  valid for the tensor's life); on failure it does not run. */
tg_status tg_tensor_from_blob(void* data, const int64_t* shape, const int64_t* strides, int ndim, tg_dtype dtype,
                              tg_device device, void (*release)(void* context), void* context, tg_tensor* out);
/** Zeros, ones, standard normal samples (tg_manual_seed seeds them). */
tg_status tg_zeros(const int64_t* shape, int ndim, tg_dtype dtype, tg_device device, tg_tensor* out);
/** Ones of the given shape. */
tg_status tg_ones(const int64_t* shape, int ndim, tg_dtype dtype, tg_device device, tg_tensor* out);
/** Standard normal samples of the given shape. */
tg_status tg_randn(const int64_t* shape, int ndim, tg_dtype dtype, tg_device device, tg_tensor* out);
/** Seeds the random number generator. */
tg_status tg_manual_seed(uint64_t seed);
/** Copies the tensor's elements, row-major, into host memory `data` of
 *  `nbytes` (which must be numel * element size; any device, any layout). */
tg_status tg_tensor_copy_to(tg_tensor t, void* data, size_t nbytes);
/** A DLPack DLManagedTensor* (passed as void*, <dlpack/dlpack.h>) as a
 *  tensor, no copy; tapegrad takes it (its deleter runs once). */
tg_status tg_tensor_from_dlpack(void* managed, tg_tensor* out);
/** The tensor as a DLManagedTensor* (no copy); the consumer calls its
 *  deleter once. */
tg_status tg_tensor_to_dlpack(tg_tensor t, void** managed);
/** Releases a handle (NULL: nothing). */
void tg_tensor_free(tg_tensor t);

/* ---- queries ---------------------------------------------------------------------- */

/** Rank, sizes (into `shape`, tg_tensor_ndim entries), element count, dtype,
 *  device. */
tg_status tg_tensor_ndim(tg_tensor t, int* ndim);
/** The sizes, into `shape` (tg_tensor_ndim entries). */
tg_status tg_tensor_shape(tg_tensor t, int64_t* shape);
/** The element count. */
tg_status tg_tensor_numel(tg_tensor t, int64_t* numel);
/** The element type. */
tg_status tg_tensor_dtype(tg_tensor t, tg_dtype* dtype);
/** The device. */
tg_status tg_tensor_device(tg_tensor t, tg_device* device);
/** The value of a one-element tensor, as a double. */
tg_status tg_tensor_item(tg_tensor t, double* value);

/* ---- ops (differentiable; results are new handles) ------------------------------ */

/** Elementwise binary ops with broadcasting. */
/* clang-format off */
typedef enum tg_binary_op { TG_ADD = 0, TG_SUB = 1, TG_MUL = 2, TG_DIV = 3, TG_POW = 4, TG_MAXIMUM = 5,
                            TG_MINIMUM = 6 } tg_binary_op;
/* clang-format on */
/** out = a op b. */
tg_status tg_binary(tg_binary_op op, tg_tensor a, tg_tensor b, tg_tensor* out);
/** out = a op s (a scalar on the right). */
tg_status tg_binary_scalar(tg_binary_op op, tg_tensor a, double s, tg_tensor* out);
/** Elementwise unary ops. */
typedef enum tg_unary_op {
  TG_NEG = 0,
  TG_EXP = 1,
  TG_LOG = 2,
  TG_SIN = 3,
  TG_COS = 4,
  TG_TANH = 5,
  TG_SIGMOID = 6,
  TG_RELU = 7,
  TG_SILU = 8,
  TG_GELU = 9,
  TG_SOFTPLUS = 10,
  TG_SQRT = 11,
  TG_SQUARE = 12,
  TG_ABS = 13,
  TG_RECIPROCAL = 14
} tg_unary_op;
/** out = op(a). */
tg_status tg_unary(tg_unary_op op, tg_tensor a, tg_tensor* out);
/** Matrix products with batching and broadcasting (as tg::matmul). */
tg_status tg_matmul(tg_tensor a, tg_tensor b, tg_tensor* out);
/** x w^T + b (b may be NULL). */
tg_status tg_linear(tg_tensor x, tg_tensor w, tg_tensor b, tg_tensor* out);
/** Sum of all elements (ndims = 0) or over `dims`, keeping them as size 1
 *  when `keepdim`. */
tg_status tg_sum(tg_tensor a, const int64_t* dims, int ndims, int keepdim, tg_tensor* out);
/** Mean of all elements (ndims = 0) or over `dims`. */
tg_status tg_mean(tg_tensor a, const int64_t* dims, int ndims, int keepdim, tg_tensor* out);
/** A view (or copy) with the sizes `shape` (one entry may be -1). */
tg_status tg_reshape(tg_tensor a, const int64_t* shape, int ndim, tg_tensor* out);
/** Swaps two dims (a view). */
tg_status tg_transpose(tg_tensor a, int64_t dim0, int64_t dim1, tg_tensor* out);
/** Index `index` of dim `dim` (a view one rank lower). */
tg_status tg_select(tg_tensor a, int64_t dim, int64_t index, tg_tensor* out);
/** Concatenation of `n` tensors along `dim`. */
tg_status tg_cat(const tg_tensor* tensors, int n, int64_t dim, tg_tensor* out);
/** A new tensor with the same values, not attached to any graph. */
tg_status tg_detach(tg_tensor a, tg_tensor* out);

/* ---- autograd ----------------------------------------------------------------------- */

/** Marks a tensor (a leaf) as requiring gradients, or not. */
tg_status tg_tensor_set_requires_grad(tg_tensor t, int requires_grad);
/** Whether the tensor requires gradients (0 or 1). */
tg_status tg_tensor_requires_grad(tg_tensor t, int* requires_grad);
/** The accumulated .grad of a leaf; *out is NULL when there is none. */
tg_status tg_tensor_grad(tg_tensor t, tg_tensor* out);
/** Accumulates d t / d leaves into the leaves' .grad; `gradient` NULL for a
 *  one-element t; `create_graph` records the backward for higher orders. */
tg_status tg_backward(tg_tensor t, tg_tensor gradient, int create_graph);
/** Gradients of `outputs` (weighted by `grad_outputs`, NULL: ones for
 *  one-element outputs) with respect to `inputs`, into `grads` (n_inputs
 *  handles; NULL entries for unused inputs when `allow_unused`). */
tg_status tg_grad(const tg_tensor* outputs, int n_outputs, const tg_tensor* inputs, int n_inputs,
                  const tg_tensor* grad_outputs, int create_graph, int allow_unused, tg_tensor* grads);
/** Turns gradient recording off (0) or on (1) for this thread; returns the
 *  previous setting in *previous (may be NULL). */
tg_status tg_set_grad_enabled(int enabled, int* previous);

/* ---- the functional API: functions are C callbacks ---------------------------------- */

/** A function of one tensor: writes a new handle to *out (tapegrad frees
 *  it; it may be `x` itself, which is then freed once) and returns TG_OK, or a failure status (its tg_last_error
 * message, if it set one through a failing tapegrad call, is reported). */
typedef tg_status (*tg_function)(tg_tensor x, tg_tensor* out, void* context);

/** J [fn(x).shape + x.shape]. */
tg_status tg_jacobian(tg_function fn, void* context, tg_tensor x, int create_graph, tg_tensor* out);
/** H [x.shape + x.shape] of a one-element fn. */
tg_status tg_hessian(tg_function fn, void* context, tg_tensor x, int create_graph, tg_tensor* out);
/** The Hessian-vector product H v of a one-element fn (forward over
 *  reverse); *value (may be NULL) gets fn(x). */
tg_status tg_hvp(tg_function fn, void* context, tg_tensor x, tg_tensor v, int create_graph, tg_tensor* value,
                 tg_tensor* out);
/** Per-sample Hessians of a batched fn, x [B, n] -> [B, m]: H [B, m, n, n]. */
typedef enum tg_hessian_strategy {
  TG_HESSIAN_BATCHED_COTANGENTS = 0,
  TG_HESSIAN_ROWS = 1,
  TG_HESSIAN_FORWARD_OVER_REVERSE = 2,
  TG_HESSIAN_TAYLOR = 3
} tg_hessian_strategy;
/** Per-sample Hessians with the given strategy. */
tg_status tg_per_sample_hessian(tg_function fn, void* context, tg_tensor x, tg_hessian_strategy strategy,
                                int create_graph, tg_tensor* out);
/** Per-sample Laplacians of a batched fn, [B, m] (Taylor mode). */
tg_status tg_laplacian(tg_function fn, void* context, tg_tensor x, int create_graph, tg_tensor* out);

/* ---- saved-tensor hooks ---------------------------------------------------------------- */

/** Pack: called when an op saves `t` for backward; writes what to keep to
 *  *packed (a new handle, tapegrad frees it; it may be `t` itself). Unpack: called when backward
 *  needs it back, from `packed`; writes the tensor to *out. */
typedef tg_status (*tg_pack_hook)(tg_tensor t, tg_tensor* packed, void* context);
/** Unpack hook: the saved tensor back from what pack kept. */
typedef tg_status (*tg_unpack_hook)(tg_tensor packed, tg_tensor* out, void* context);
/** Makes (pack, unpack) this thread's default saved-tensor hooks until the
 *  matching tg_saved_tensor_hooks_pop (they nest). Hooks still pushed when
 *  the thread ends are freed with it. */
tg_status tg_saved_tensor_hooks_push(tg_pack_hook pack, tg_unpack_hook unpack, void* context);
/** Ends the innermost hooks pushed on this thread. */
tg_status tg_saved_tensor_hooks_pop(void);

/* ---- CUDA ------------------------------------------------------------------------------ */

/** Whether a CUDA GPU can be used (0 or 1), and how many there are. */
int tg_cuda_is_available(void);
/** The number of CUDA devices (0 without a GPU or CUDA build). */
int tg_cuda_device_count(void);
/** Makes the cudaStream_t `stream` (NULL: the legacy default stream) this
 *  thread's current stream of CUDA device `device`: tapegrad's kernels for
 *  that device run on it. */
tg_status tg_cuda_set_stream(int device, void* stream);
/** This thread's current cudaStream_t of `device`. */
tg_status tg_cuda_current_stream(int device, void** stream);
/** Waits on the host for all work on `device` (-1: the current one). */
tg_status tg_cuda_synchronize(int device);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_C_H */

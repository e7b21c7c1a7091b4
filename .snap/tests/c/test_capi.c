/* The C API from C (include/tapegrad_c.h): creation and export, ops,
 * autograd to the second order, the functional helpers against closed forms,
 * zero-copy user memory and DLPack with their release callbacks, saved-tensor
 * hooks as C callbacks, and the error paths (status codes and messages, the
 * library usable afterwards). Every handle is freed: the ASan build's leak
 * check fails the test otherwise. Prints each check; exits non-zero on the
 * first failure. On the GPU machine the numeric checks run on CUDA too. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlpack/dlpack.h>
#include <pthread.h>
#include <tapegrad_c.h>

static int failures = 0;

#define EXPECT(cond, ...)                                 \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "FAILED line %d: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, "\n");                              \
      ++failures;                                         \
    }                                                     \
  } while (0)

#define OK(call)                                                                     \
  do {                                                                               \
    tg_status st_ = (call);                                                          \
    if (st_ != TG_OK) {                                                              \
      fprintf(stderr, "FAILED line %d: %s returned %d: %s\n", __LINE__, #call, (int)st_, tg_last_error()); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static int contains(const char* s, const char* part) { return strstr(s, part) != NULL; }

/* Frees the n handles that follow (NULL ones too). */
static void free_tensors(int n, ...) {
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; ++i)
    tg_tensor_free(va_arg(ap, tg_tensor));
  va_end(ap);
}

/* ---- functions for the functional API --------------------------------------------------- */

/* sum(x^3) / 3 + x0 x1: gradient x^2 + (x1, x0, 0...), Hessian diag(2x) + the (0,1) pair. */
static tg_status cubic(tg_tensor x, tg_tensor* out, void* context) {
  tg_tensor c = NULL, s = NULL, x0 = NULL, x1 = NULL, p = NULL;
  tg_status st;
  int* calls = (int*)context;
  ++*calls;
  if ((st = tg_binary_scalar(TG_POW, x, 3.0, &c)) != TG_OK) return st;
  st = tg_sum(c, NULL, 0, 0, &s);
  tg_tensor_free(c);
  if (st != TG_OK) return st;
  if ((st = tg_select(x, 0, 0, &x0)) == TG_OK && (st = tg_select(x, 0, 1, &x1)) == TG_OK &&
      (st = tg_binary(TG_MUL, x0, x1, &p)) == TG_OK) {
    tg_tensor third = NULL;
    st = tg_binary_scalar(TG_DIV, s, 3.0, &third);
    if (st == TG_OK) {
      st = tg_binary(TG_ADD, third, p, out);
      tg_tensor_free(third);
    }
  }
  free_tensors(4, s, x0, x1, p);
  return st;
}

/* Batched: x [B, 2] -> [B, 1], u = x^2 y + sin(y); Laplacian 2y - sin(y); Hessian [[2y, 2x], [2x, -sin y]]. */
static tg_status batched(tg_tensor x, tg_tensor* out, void* context) {
  tg_tensor a = NULL, b = NULL, a2 = NULL, t = NULL, sb = NULL, u = NULL;
  const int64_t col[2] = {-1, 1};
  tg_status st;
  (void)context;
  if ((st = tg_select(x, 1, 0, &a)) != TG_OK) return st;
  if ((st = tg_select(x, 1, 1, &b)) == TG_OK && (st = tg_unary(TG_SQUARE, a, &a2)) == TG_OK &&
      (st = tg_binary(TG_MUL, a2, b, &t)) == TG_OK && (st = tg_unary(TG_SIN, b, &sb)) == TG_OK &&
      (st = tg_binary(TG_ADD, t, sb, &u)) == TG_OK)
    st = tg_reshape(u, col, 2, out);
  free_tensors(6, a, b, a2, t, sb, u);
  return st;
}

/* A function that fails: the error reaches the caller. */
static tg_status failing(tg_tensor x, tg_tensor* out, void* context) {
  tg_tensor w = NULL;
  const int64_t shape[1] = {7};
  tg_status st;
  (void)context;
  if ((st = tg_zeros(shape, 1, TG_FLOAT64, (tg_device){TG_CPU, 0}, &w)) != TG_OK) return st;
  st = tg_binary(TG_ADD, x, w, out); /* shape mismatch: fails with tapegrad's message */
  tg_tensor_free(w);
  return st;
}

/* ---- saved-tensor hooks: count packs and unpacks ---------------------------------------- */
static int packs = 0, unpacks = 0;
static tg_status pack(tg_tensor t, tg_tensor* packed, void* context) {
  (void)context;
  ++packs;
  return tg_detach(t, packed);
}
static tg_status unpack(tg_tensor packed, tg_tensor* out, void* context) {
  (void)context;
  ++unpacks;
  return tg_detach(packed, out);
}

/* ---- misuse: callbacks that hand back the handle they were given ----------------------- */
static tg_status same_handle(tg_tensor x, tg_tensor* out, void* context) {
  (void)context;
  *out = x; /* its own handle: tapegrad must free it once */
  return TG_OK;
}
static tg_status pack_same(tg_tensor t, tg_tensor* packed, void* context) { return same_handle(t, packed, context); }
static tg_status unpack_same(tg_tensor p, tg_tensor* out, void* context) { return same_handle(p, out, context); }

/* A thread that pushes hooks and ends without popping them. */
static void* push_and_leave(void* arg) {
  (void)arg;
  if (tg_saved_tensor_hooks_push(pack, unpack, NULL) != TG_OK) return (void*)1;
  if (tg_saved_tensor_hooks_push(pack_same, unpack_same, NULL) != TG_OK) return (void*)1;
  return NULL;
}

/* ---- DLPack producers that get things wrong: count deleter calls ------------------------ */
static int dl_deletes = 0;
static void dl_deleter(DLManagedTensor* m) {
  ++dl_deletes;
  free(m->manager_ctx);
  free(m);
}
static DLManagedTensor* dl_make(int64_t* shape, int ndim, int device_type, uint64_t byte_offset) {
  DLManagedTensor* m = (DLManagedTensor*)calloc(1, sizeof *m);
  float* data = (float*)calloc(8, sizeof(float));
  m->dl_tensor.data = data;
  m->dl_tensor.ndim = ndim;
  m->dl_tensor.shape = shape;
  m->dl_tensor.strides = NULL;
  m->dl_tensor.byte_offset = byte_offset;
  m->dl_tensor.dtype.code = kDLFloat;
  m->dl_tensor.dtype.bits = 32;
  m->dl_tensor.dtype.lanes = 1;
  memcpy(&m->dl_tensor.device.device_type, &device_type, sizeof device_type); /* any int, as a producer may */
  m->dl_tensor.device.device_id = 0;
  m->manager_ctx = data;
  m->deleter = dl_deleter;
  return m;
}

/* ---- user memory: count releases -------------------------------------------------------- */
static int releases = 0;
static void release(void* context) {
  ++releases;
  free(context);
}

static void numeric_checks(tg_device dev) {
  const char* where = dev.type == TG_CUDA ? "cuda" : "cpu";
  const double xs[3] = {0.5, -1.5, 2.0};
  const int64_t shape[1] = {3};
  tg_tensor x = NULL, y = NULL, g = NULL, h = NULL, v = NULL, hv = NULL, val = NULL;
  double out[9];
  int calls = 0, i, j;

  /* Creation, copy back, queries. */
  OK(tg_tensor_from_data(xs, shape, 1, TG_FLOAT64, dev, &x));
  {
    int ndim = 0;
    int64_t sz[1] = {0}, n = 0;
    tg_dtype dt;
    tg_device d;
    OK(tg_tensor_ndim(x, &ndim));
    OK(tg_tensor_shape(x, sz));
    OK(tg_tensor_numel(x, &n));
    OK(tg_tensor_dtype(x, &dt));
    OK(tg_tensor_device(x, &d));
    EXPECT(ndim == 1 && sz[0] == 3 && n == 3 && dt == TG_FLOAT64 && d.type == dev.type, "%s: queries", where);
    OK(tg_tensor_copy_to(x, out, 3 * sizeof(double)));
    EXPECT(out[0] == 0.5 && out[1] == -1.5 && out[2] == 2.0, "%s: copy back", where);
  }

  /* backward: d/dx of the cubic into .grad. */
  OK(tg_tensor_set_requires_grad(x, 1));
  OK(cubic(x, &y, &calls));
  OK(tg_backward(y, NULL, 0));
  OK(tg_tensor_grad(x, &g));
  EXPECT(g != NULL, "%s: .grad is set", where);
  OK(tg_tensor_copy_to(g, out, 3 * sizeof(double)));
  EXPECT(fabs(out[0] - (0.25 - 1.5)) < 1e-14 && fabs(out[1] - (2.25 + 0.5)) < 1e-14 && fabs(out[2] - 4.0) < 1e-14,
         "%s: gradient %g %g %g", where, out[0], out[1], out[2]);
  tg_tensor_free(g);
  tg_tensor_free(y);

  /* grad with create_graph, then the second derivative of g0 = x0^2 + x1: d g0 / dx = (2 x0, 1, 0). */
  {
    tg_tensor gs[1] = {NULL}, g0 = NULL, hs[1] = {NULL};
    OK(cubic(x, &y, &calls));
    OK(tg_grad(&y, 1, &x, 1, NULL, 1, 0, gs));
    OK(tg_select(gs[0], 0, 0, &g0));
    OK(tg_grad(&g0, 1, &x, 1, NULL, 0, 0, hs));
    OK(tg_tensor_copy_to(hs[0], out, 3 * sizeof(double)));
    EXPECT(fabs(out[0] - 1.0) < 1e-14 && fabs(out[1] - 1.0) < 1e-14 && out[2] == 0.0, "%s: second order %g %g %g",
           where, out[0], out[1], out[2]);
    free_tensors(4, gs[0], g0, hs[0], y);
  }

  /* hessian and hvp against the closed form. */
  OK(tg_hessian(cubic, &calls, x, 0, &h));
  OK(tg_tensor_copy_to(h, out, 9 * sizeof(double)));
  for (i = 0; i < 3; ++i)
    for (j = 0; j < 3; ++j) {
      double want = (i == j ? 2 * xs[i] : 0) + ((i == 0 && j == 1) || (i == 1 && j == 0) ? 1 : 0);
      EXPECT(fabs(out[i * 3 + j] - want) < 1e-13, "%s: H[%d][%d] = %g, want %g", where, i, j, out[i * 3 + j], want);
    }
  {
    const double vs[3] = {1.0, 2.0, -1.0};
    OK(tg_tensor_from_data(vs, shape, 1, TG_FLOAT64, dev, &v));
    OK(tg_hvp(cubic, &calls, x, v, 0, &val, &hv));
    OK(tg_tensor_copy_to(hv, out, 3 * sizeof(double)));
    EXPECT(fabs(out[0] - (1.0 + 2.0)) < 1e-13 && fabs(out[1] - (-6.0 + 1.0)) < 1e-13 && fabs(out[2] + 4.0) < 1e-13,
           "%s: hvp %g %g %g", where, out[0], out[1], out[2]);
  }
  EXPECT(calls > 0, "%s: the C function was called", where);

  /* Per-sample Hessians (every strategy) and the Laplacian of a batched function. */
  {
    const double pts[4] = {0.5, 1.0, -2.0, 0.3};
    const int64_t pshape[2] = {2, 2};
    tg_tensor p = NULL, lap = NULL;
    tg_hessian_strategy s;
    OK(tg_tensor_from_data(pts, pshape, 2, TG_FLOAT64, dev, &p));
    for (s = TG_HESSIAN_BATCHED_COTANGENTS; s <= TG_HESSIAN_TAYLOR; s = (tg_hessian_strategy)(s + 1)) {
      tg_tensor ph = NULL;
      double H[8];
      OK(tg_per_sample_hessian(batched, NULL, p, s, 0, &ph));
      OK(tg_tensor_copy_to(ph, H, sizeof H));
      for (i = 0; i < 2; ++i) {
        double a = pts[2 * i], b = pts[2 * i + 1];
        double want[4] = {2 * b, 2 * a, 2 * a, -sin(b)};
        for (j = 0; j < 4; ++j)
          EXPECT(fabs(H[4 * i + j] - want[j]) < 1e-13, "%s: strategy %d, sample %d, entry %d: %g vs %g", where, (int)s,
                 i, j, H[4 * i + j], want[j]);
      }
      tg_tensor_free(ph);
    }
    OK(tg_laplacian(batched, NULL, p, 0, &lap));
    OK(tg_tensor_copy_to(lap, out, 2 * sizeof(double)));
    for (i = 0; i < 2; ++i)
      EXPECT(fabs(out[i] - (2 * pts[2 * i + 1] - sin(pts[2 * i + 1]))) < 1e-13, "%s: Laplacian %d", where, i);
    tg_tensor_free(lap);
    tg_tensor_free(p);
  }

  /* DLPack round trip through void*: the same memory. */
  {
    void* m = NULL;
    tg_tensor back = NULL;
    double first = 0;
    tg_tensor xd = NULL;
    OK(tg_detach(x, &xd));
    OK(tg_tensor_to_dlpack(xd, &m));
    EXPECT(((DLManagedTensor*)m)->dl_tensor.ndim == 1, "%s: DLPack ndim", where);
    OK(tg_tensor_from_dlpack(m, &back));
    {
      tg_tensor s0 = NULL;
      OK(tg_select(back, 0, 0, &s0));
      OK(tg_tensor_item(s0, &first));
      tg_tensor_free(s0);
    }
    EXPECT(first == 0.5, "%s: DLPack round trip", where);
    tg_tensor_free(back);
    tg_tensor_free(xd);
  }

  free_tensors(5, val, hv, v, h, x);
  printf("numeric checks on the %s: done\n", where);
}

int main(void) {
  int major = -1, minor = -1;
  tg_c_api_version(&major, &minor);
  EXPECT(major == TG_C_API_VERSION_MAJOR && minor == TG_C_API_VERSION_MINOR, "version %d.%d", major, minor);
  OK(tg_manual_seed(42));

  numeric_checks((tg_device){TG_CPU, 0});
  if (tg_cuda_is_available()) {
    void* stream = (void*)1;
    numeric_checks((tg_device){TG_CUDA, 0});
    OK(tg_cuda_current_stream(0, &stream));
    OK(tg_cuda_set_stream(0, stream));
    OK(tg_cuda_synchronize(0));
  } else {
    printf("no CUDA GPU here: the CUDA checks run on the GPU machine\n");
    EXPECT(tg_cuda_set_stream(0, NULL) == TG_ERROR && contains(tg_last_error(), "not available"),
           "set_stream without a GPU: %s", tg_last_error());
  }

  /* User memory without a copy: writes are seen, release runs once at the end. */
  {
    const int64_t shape[2] = {2, 3}, strides[2] = {1, 2}; /* column-major */
    double* buf = (double*)malloc(6 * sizeof(double));
    tg_tensor t = NULL, row = NULL, s = NULL;
    double total = 0, r1[3];
    int k;
    for (k = 0; k < 6; ++k) buf[k] = k;
    OK(tg_tensor_from_blob(buf, shape, strides, 2, TG_FLOAT64, (tg_device){TG_CPU, 0}, release, buf, &t));
    OK(tg_select(t, 0, 1, &row)); /* elements 1, 3, 5 */
    OK(tg_tensor_copy_to(row, r1, sizeof r1));
    EXPECT(r1[0] == 1 && r1[1] == 3 && r1[2] == 5, "from_blob strides: %g %g %g", r1[0], r1[1], r1[2]);
    buf[5] = 100; /* the caller's write is seen */
    OK(tg_sum(t, NULL, 0, 0, &s));
    OK(tg_tensor_item(s, &total));
    EXPECT(total == 0 + 1 + 2 + 3 + 4 + 100, "from_blob sees writes: %g", total);
    tg_tensor_free(t);
    EXPECT(releases == 0, "a view still uses the memory");
    tg_tensor_free(row);
    tg_tensor_free(s);
    EXPECT(releases == 1, "release ran once: %d", releases);
  }

  /* Saved-tensor hooks as C callbacks. */
  {
    const int64_t shape[1] = {4};
    tg_tensor x = NULL, y = NULL, z = NULL;
    OK(tg_randn(shape, 1, TG_FLOAT64, (tg_device){TG_CPU, 0}, &x));
    OK(tg_tensor_set_requires_grad(x, 1));
    OK(tg_saved_tensor_hooks_push(pack, unpack, NULL));
    OK(tg_unary(TG_SIN, x, &y)); /* saves x */
    OK(tg_saved_tensor_hooks_pop());
    OK(tg_sum(y, NULL, 0, 0, &z));
    OK(tg_backward(z, NULL, 0));
    EXPECT(packs >= 1 && unpacks >= 1, "hooks ran: %d packs, %d unpacks", packs, unpacks);
    free_tensors(3, x, y, z);
  }

  /* Error paths: codes and messages, and the library stays usable. */
  {
    const int64_t s3[1] = {3}, s4[1] = {4};
    tg_tensor a = NULL, b = NULL, c = NULL, h = NULL;
    double v = 0;
    EXPECT(tg_unary(TG_EXP, NULL, &c) == TG_INVALID_ARGUMENT && contains(tg_last_error(), "null tg_tensor"),
           "null handle: %s", tg_last_error());
    EXPECT(c == NULL, "no output on failure");
    OK(tg_ones(s3, 1, TG_FLOAT32, (tg_device){TG_CPU, 0}, &a));
    OK(tg_ones(s4, 1, TG_FLOAT32, (tg_device){TG_CPU, 0}, &b));
    EXPECT(tg_binary(TG_ADD, a, b, &c) == TG_ERROR && contains(tg_last_error(), "add") &&
               contains(tg_last_error(), "[3]") && contains(tg_last_error(), "[4]"),
           "shape mismatch names the op and shapes: %s", tg_last_error());
    EXPECT(tg_tensor_item(a, &v) == TG_ERROR, "item of three elements");
    EXPECT(tg_backward(a, NULL, 0) == TG_ERROR, "backward of a tensor without grad: %s", tg_last_error());
    EXPECT(tg_hessian(failing, NULL, a, 0, &h) == TG_ERROR && contains(tg_last_error(), "the C function returned") &&
               contains(tg_last_error(), "add"),
           "a failing callback's message reaches the caller: %s", tg_last_error());
    EXPECT(tg_saved_tensor_hooks_pop() == TG_INVALID_ARGUMENT, "pop without push");
    EXPECT(tg_tensor_copy_to(a, &v, sizeof v) == TG_ERROR && contains(tg_last_error(), "12 bytes"),
           "copy_to size: %s", tg_last_error());
    EXPECT(tg_zeros(s3, -1, TG_FLOAT32, (tg_device){TG_CPU, 0}, &c) == TG_INVALID_ARGUMENT, "negative ndim");
    EXPECT(tg_tensor_from_dlpack(NULL, &c) == TG_ERROR, "null DLPack");
    OK(tg_binary(TG_ADD, a, a, &c)); /* still usable */
    OK(tg_sum(c, NULL, 0, 0, &h));
    OK(tg_tensor_item(h, &v));
    EXPECT(v == 6.0, "usable after errors: %g", v);
    free_tensors(4, a, b, c, h);
    tg_tensor_free(NULL);
  }

  /* Misuse: overflowing sizes, handles handed back, hooks left pushed,
   * broken DLPack producers, unknown enums. Each refused with a status, the
   * producer's deleter run exactly once, nothing freed twice. */
  {
    const int64_t huge[2] = {(int64_t)1 << 32, (int64_t)1 << 32}, zero_strides[2] = {0, 0}, s3[1] = {3};
    int64_t shape2[2] = {2, 2}, shape1[1] = {4};
    tg_tensor t = NULL, x = NULL, j = NULL, y = NULL, z = NULL;
    pthread_t th;
    void* thread_status = NULL;
    int k;
    double jv[9], v = 0;
    EXPECT(tg_tensor_from_blob(NULL, huge, zero_strides, 2, TG_FLOAT32, (tg_device){TG_CPU, 0}, NULL, NULL, &t) ==
                   TG_ERROR &&
               contains(tg_last_error(), "more elements than fit in 64 bits") && t == NULL,
           "from_blob with 2^64 elements: %s", tg_last_error());
    /* A function that returns the handle it was given (the identity). */
    OK(tg_ones(s3, 1, TG_FLOAT64, (tg_device){TG_CPU, 0}, &x));
    OK(tg_jacobian(same_handle, NULL, x, 0, &j));
    OK(tg_tensor_copy_to(j, jv, sizeof jv));
    for (k = 0; k < 9; ++k) EXPECT(jv[k] == (k % 4 == 0 ? 1.0 : 0.0), "jacobian of the identity [%d] = %g", k, jv[k]);
    /* Hooks that return the handle they were given. */
    OK(tg_tensor_set_requires_grad(x, 1));
    OK(tg_saved_tensor_hooks_push(pack_same, unpack_same, NULL));
    OK(tg_binary(TG_MUL, x, x, &y)); /* saves x twice */
    OK(tg_saved_tensor_hooks_pop());
    OK(tg_sum(y, NULL, 0, 0, &z));
    OK(tg_backward(z, NULL, 0));
    tg_tensor_free(z);
    z = NULL;
    OK(tg_tensor_grad(x, &z));
    OK(tg_sum(z, NULL, 0, 0, &t));
    OK(tg_tensor_item(t, &v));
    EXPECT(v == 6.0, "d sum(x*x)/dx through same-handle hooks: sum %g", v);
    free_tensors(5, t, z, y, j, x);
    /* Hooks left pushed when a thread ends: freed with the thread. */
    EXPECT(pthread_create(&th, NULL, push_and_leave, NULL) == 0, "pthread_create");
    pthread_join(th, &thread_status);
    EXPECT(thread_status == NULL, "the thread's pushes failed");
    /* DLPack: each refusal runs the deleter once. */
    dl_deletes = 0;
    EXPECT(tg_tensor_from_dlpack(dl_make(NULL, 2, kDLCPU, 0), &t) == TG_ERROR && contains(tg_last_error(), "shape is NULL"),
           "DLPack shape NULL: %s", tg_last_error());
    EXPECT(tg_tensor_from_dlpack(dl_make(shape2, 1 << 20, kDLCPU, 0), &t) == TG_ERROR &&
               contains(tg_last_error(), "ndim 1048576"),
           "DLPack huge ndim: %s", tg_last_error());
    EXPECT(tg_tensor_from_dlpack(dl_make(shape1, 1, kDLCPU, 2), &t) == TG_ERROR && contains(tg_last_error(), "aligned"),
           "DLPack unaligned byte_offset: %s", tg_last_error());
    EXPECT(tg_tensor_from_dlpack(dl_make(shape1, 1, 12345, 0), &t) == TG_ERROR &&
               contains(tg_last_error(), "device type 12345"),
           "DLPack unknown device type: %s", tg_last_error());
    EXPECT(tg_tensor_from_dlpack(dl_make(shape1, 1, kDLCPU, 0), NULL) == TG_INVALID_ARGUMENT,
           "DLPack with out NULL: %s", tg_last_error());
    {
      DLManagedTensor* m = dl_make(shape1, 1, kDLCPU, 13402712491054596099ull); /* a fuzzer's offset */
      m->dl_tensor.data = NULL; /* its memory stays in manager_ctx, freed by the deleter */
      EXPECT(tg_tensor_from_dlpack(m, &t) == TG_ERROR && contains(tg_last_error(), "data is NULL with byte_offset"),
             "DLPack NULL data with an offset: %s", tg_last_error());
    }
    EXPECT(dl_deletes == 6, "every refused DLPack tensor's deleter ran once: %d of 6", dl_deletes);
    OK(tg_tensor_from_dlpack(dl_make(shape2, 2, kDLCPU, 4), &t)); /* a good one, 4-byte offset */
    EXPECT(dl_deletes == 6, "an accepted tensor's deleter waits for the tensor");
    tg_tensor_free(t);
    EXPECT(dl_deletes == 7, "then runs once: %d", dl_deletes);
    /* Enum values a C caller may pass that name nothing. */
    OK(tg_ones(s3, 1, TG_FLOAT32, (tg_device){TG_CPU, 0}, &x));
    EXPECT(tg_unary((tg_unary_op)999, x, &y) == TG_INVALID_ARGUMENT && contains(tg_last_error(), "999"),
           "unknown unary op: %s", tg_last_error());
    EXPECT(tg_binary((tg_binary_op)-7, x, x, &y) == TG_INVALID_ARGUMENT, "unknown binary op");
    EXPECT(tg_zeros(s3, 1, (tg_dtype)77, (tg_device){TG_CPU, 0}, &y) == TG_INVALID_ARGUMENT, "unknown dtype");
    EXPECT(tg_zeros(s3, 1, TG_FLOAT32, (tg_device){(tg_device_type)5, 0}, &y) == TG_INVALID_ARGUMENT,
           "unknown device type");
    EXPECT(tg_zeros(s3, 1 << 30, TG_FLOAT32, (tg_device){TG_CPU, 0}, &y) == TG_INVALID_ARGUMENT &&
               contains(tg_last_error(), "more than 64 dims"),
           "absurd ndim: %s", tg_last_error());
    tg_tensor_free(x);
    /* Hooks still pushed when main returns: the library frees them at exit. */
    OK(tg_saved_tensor_hooks_push(pack, unpack, NULL));
  }

  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("C API: all checks passed\n");
  return 0;
}

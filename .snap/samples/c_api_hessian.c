/* The C API from C: the Hessian of logsumexp(x) = log(sum(exp(x))) at a
 * point, checked against its closed form H = diag(p) - p p^T, p = softmax(x).
 * On the GPU when there is one. Exits non-zero when the check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <tapegrad_c.h>

/* Stops on a failed call, printing tapegrad's message. */
#define CHECK(call)                                                        \
  do {                                                                     \
    if ((call) != TG_OK) {                                                 \
      fprintf(stderr, "%s failed: %s\n", #call, tg_last_error());         \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

/* The function, as the functional API takes it: x [n] -> a one-element tensor. */
static tg_status logsumexp(tg_tensor x, tg_tensor* out, void* context) {
  tg_tensor e = NULL, s = NULL;
  tg_status st;
  (void)context;
  if ((st = tg_unary(TG_EXP, x, &e)) != TG_OK) return st;
  st = tg_sum(e, NULL, 0, 0, &s);
  tg_tensor_free(e);
  if (st != TG_OK) return st;
  st = tg_unary(TG_LOG, s, out);
  tg_tensor_free(s);
  return st;
}

int main(void) {
  enum { N = 5 };
  const double xs[N] = {0.3, -1.2, 2.0, 0.7, -0.1};
  const int64_t shape[1] = {N};
  tg_device dev = {tg_cuda_is_available() ? TG_CUDA : TG_CPU, 0};
  tg_tensor x = NULL, h = NULL;
  double H[N * N], p[N], z = 0, worst = 0;
  int i, j, major, minor;

  tg_c_api_version(&major, &minor);
  CHECK(tg_tensor_from_data(xs, shape, 1, TG_FLOAT64, dev, &x));
  CHECK(tg_hessian(logsumexp, NULL, x, 0, &h));
  CHECK(tg_tensor_copy_to(h, H, sizeof H));

  for (i = 0; i < N; ++i) z += exp(xs[i]);
  for (i = 0; i < N; ++i) p[i] = exp(xs[i]) / z;
  for (i = 0; i < N; ++i)
    for (j = 0; j < N; ++j) {
      double want = (i == j ? p[i] : 0.0) - p[i] * p[j];
      double err = fabs(H[i * N + j] - want);
      if (err > worst) worst = err;
    }
  printf("tapegrad C API %d.%d on the %s: Hessian of logsumexp, %dx%d, max |error| %.2e\n", major, minor,
         dev.type == TG_CUDA ? "GPU" : "CPU", N, N, worst);
  tg_tensor_free(h);
  tg_tensor_free(x);
  return worst < 1e-12 ? 0 : 1;
}

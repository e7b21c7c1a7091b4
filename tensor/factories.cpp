// Factories and the global Philox generator state.
#include <cmath>
#include <cstring>
#include <mutex>

#include <tapegrad/cuda/capture.h>
#include "tensor/op_util.h"
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/random.h>

namespace tg {

namespace {

std::mutex g_rng_mutex;
constexpr uint64_t kDefaultSeed = 67280421310721ull;
uint64_t g_seed = kDefaultSeed;
uint64_t g_offset = 0;

// requires_grad(true) in the options: set on the finished tensor (which
// checks the dtype), never on an intermediate one.
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad()) t.requires_grad_(true);
  return t;
}
TensorOptions plain(TensorOptions o) { return o.requires_grad(false); }

void check_sizes(const IntList& sizes, const char* op) {
  for (int64_t s : sizes)
    TG_CHECK(s >= 0, op, ": negative dimension ", s, " in shape ", shape_str(sizes));
}

Tensor make(const IntList& sizes, const TensorOptions& o, const char* op) {
  check_sizes(sizes, op);
  return detail::new_empty(sizes, o.dtype(), o.device());
}

}  // namespace

PhiloxState philox_reserve(uint64_t n) {
  std::lock_guard<std::mutex> g(g_rng_mutex);
  PhiloxState s{g_seed, g_offset};
  g_offset += n;
  return s;
}
uint64_t default_seed() { return kDefaultSeed; }

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> g(g_rng_mutex);
  g_seed = seed;
  g_offset = 0;
}

Tensor empty(const IntList& sizes, TensorOptions o) { return finish(make(sizes, o, "empty"), o); }

Tensor full(const IntList& sizes, Scalar v, TensorOptions o) {
  detail::check_scalar_fits(v, o.dtype(), "full");
  Tensor t = make(sizes, o, "full");
  if (t.numel()) kernels::backend(t.device(), "full").fill(t, v);
  return finish(t, o);
}
Tensor zeros(const IntList& sizes, TensorOptions o) { return full(sizes, 0, o); }
Tensor ones(const IntList& sizes, TensorOptions o) { return full(sizes, 1, o); }

static Tensor random_tensor(const IntList& sizes, TensorOptions o, bool normal, const char* op) {
  if (is_complex(o.dtype())) {
    // As PyTorch's: the real and imaginary parts independent, each U[0, 1)
    // (rand) or N(0, 1/2) (randn: E|z|^2 = 1).
    check_sizes(sizes, op);
    IntList parts = sizes;
    parts.push_back(2);
    Tensor r = random_tensor(parts, plain(o).dtype(real_type(o.dtype())), normal, op);
    if (normal) raw::mul_(r, Scalar(std::sqrt(0.5)));
    return finish(raw::view_as_complex(r), o);
  }
  TG_CHECK(is_floating_point(o.dtype()), op, ": expected a floating-point or complex dtype, got ", o.dtype());
  Tensor t = make(sizes, o.dtype(detail::compute_type(o.dtype())), op);
  // rand in float16 / bfloat16: drawn in float32, whose values within half
  // a step of 1 would round to 1.0 (U[0, 1) excludes it): clamped first to
  // the type's largest value below 1.
  auto below_one = [&](Tensor r) {
    if (!normal && (o.dtype() == kFloat16 || o.dtype() == kBFloat16) && r.numel())
      r.clamp_max_(Scalar(o.dtype() == kFloat16 ? 1.0 - 0x1p-11 : 1.0 - 0x1p-8));
    return r;
  };
  const int64_t* state = nullptr;
  uint64_t rel = 0;
  if (t.is_cuda() && t.numel() && cuda::detail::capture_random(t.device().index(), uint64_t(t.numel()), &state, &rel)) {
    kernels::backend(t.device(), op).random_from_state(t, normal, state, rel);
    return finish(detail::cast(below_one(t), o.dtype()), o);
  }
  PhiloxState s = philox_reserve(uint64_t(t.numel()));
  if (t.numel()) {
    const kernels::Backend& b = kernels::backend(t.device(), op);
    (normal ? b.normal : b.uniform)(t, s.seed, s.offset);
  }
  return finish(detail::cast(below_one(t), o.dtype()), o);
}
Tensor rand(const IntList& sizes, TensorOptions o) { return random_tensor(sizes, o, false, "rand"); }
Tensor randn(const IntList& sizes, TensorOptions o) { return random_tensor(sizes, o, true, "randn"); }

Tensor tensor(const std::vector<double>& values, const IntList& sizes, TensorOptions o) {
  IntList shape = sizes.empty() ? IntList{int64_t(values.size())} : sizes;
  check_sizes(shape, "tensor");
  TG_CHECK(shape_numel(shape) == int64_t(values.size()), "tensor: ", values.size(), " values do not fill shape ",
           shape_str(shape), " (", shape_numel(shape), " elements)");
  Tensor t = detail::new_empty(shape, kFloat64, Device(kCPU));
  if (!values.empty()) std::copy(values.begin(), values.end(), t.data_ptr<double>());
  return finish(raw::to(raw::to(t, o.device()), o.dtype()), o);
}

Tensor scalar_tensor(Scalar v, TensorOptions o) { return full({}, v, o); }

Tensor arange(Scalar end, TensorOptions o) { return arange(0, end, 1, o); }

// A host [n] tensor of `dtype` filled by fill(data), then converted and
// placed as o asks (its size checked by the allocator, not a host vector).
template <class T, class F> static Tensor host_filled(int64_t n, ScalarType dtype, TensorOptions o, F fill) {
  Tensor t = detail::new_empty({n}, dtype, Device(kCPU));
  if (n > 0) fill(t.data_ptr<T>());
  return finish(raw::to(raw::to(t, o.device()), o.dtype()), o);
}

Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions o) {
  bool integral = start.is_integral() && end.is_integral() && step.is_integral();
  if (!o.has_dtype()) o = o.dtype(integral ? kInt64 : kFloat32);
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  TG_CHECK(std::isfinite(s) && std::isfinite(e) && std::isfinite(st), "arange: unsupported range ", s, " -> ", e,
           " with step ", st, "; start, end and step must be finite");
  TG_CHECK(st != 0, "arange: step must be nonzero");
  TG_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "arange: upper bound ", e, " and lower bound ", s,
           " are inconsistent with step sign ", st);
  if (integral) {  // exact in integers: no rounding through double (2^62 + 1 stays itself)
    const __int128 a = start.to_int(), b = end.to_int(), d = step.to_int();
    const __int128 count = (b - a + d + (d > 0 ? -1 : 1)) / d;  // ceil((b - a) / d), signs agree
    TG_CHECK(count <= INT64_MAX, "arange: ", start.to_int(), " to ", end.to_int(), " by ", step.to_int(),
             " has more elements than fit in 64 bits");
    return host_filled<int64_t>(int64_t(count), kInt64, o, [&](int64_t* v) {
      for (int64_t i = 0; i < int64_t(count); ++i)
        v[i] = int64_t(a + __int128(i) * d);  // in [start, end): fits
    });
  }
  if (!is_floating_point(o.dtype())) {  // a floating bound must fit the integer dtype, as PyTorch's
    detail::check_scalar_fits(start, o.dtype(), "arange");
    detail::check_scalar_fits(end, o.dtype(), "arange");
  }
  const double count = std::ceil((e - s) / st);
  TG_CHECK(count < 9223372036854775808.0, "arange: ", s, " to ", e, " by ", st, " has ", count,
           " elements, more than fit in 64 bits");
  const int64_t n = int64_t(count);
  return host_filled<double>(n, kFloat64, o, [&](double* v) {
    for (int64_t i = 0; i < n; ++i)
      v[i] = s + double(i) * st;
  });
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  TG_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  return host_filled<double>(steps, kFloat64, o, [&](double* v) {
    if (steps == 1) v[0] = start;
    if (steps > 1) {
      double step = (end - start) / double(steps - 1);
      int64_t half = steps / 2;  // fill from both ends for symmetric rounding
      for (int64_t i = 0; i < steps; ++i)
        v[i] = i < half ? start + step * double(i) : end - step * double(steps - 1 - i);
    }
  });
}

Tensor eye(int64_t n, TensorOptions o) { return eye(n, n, o); }
Tensor eye(int64_t n, int64_t m, TensorOptions o) {
  TG_CHECK(n >= 0 && m >= 0, "eye: n and m must be non-negative, got ", n, " and ", m);
  if (is_complex(o.dtype()))  // the real identity, converted (ones on the diagonal, imaginary parts 0)
    return finish(raw::to(eye(n, m, plain(o).dtype(real_type(o.dtype()))), o.dtype()), o);
  Tensor t = zeros({n, m}, plain(o));
  int64_t k = std::min(n, m);
  if (k > 0) t.as_strided({k}, {m + 1}, 0).fill_(1);
  return finish(t, o);
}

// t's dtype and device where `o` sets none.
static TensorOptions like(const Tensor& t, const TensorOptions& o, const char* op) {
  detail::check_defined(t, op, "tensor");
  return TensorOptions()
      .dtype(o.has_dtype() ? o.dtype() : t.dtype())
      .device(o.has_device() ? o.device() : t.device())
      .requires_grad(o.requires_grad());
}
Tensor empty_like(const Tensor& t, TensorOptions o) { return empty(t.sizes(), like(t, o, "empty_like")); }
Tensor zeros_like(const Tensor& t, TensorOptions o) { return zeros(t.sizes(), like(t, o, "zeros_like")); }
Tensor ones_like(const Tensor& t, TensorOptions o) { return ones(t.sizes(), like(t, o, "ones_like")); }
Tensor full_like(const Tensor& t, Scalar v, TensorOptions o) { return full(t.sizes(), v, like(t, o, "full_like")); }
Tensor rand_like(const Tensor& t, TensorOptions o) { return rand(t.sizes(), like(t, o, "rand_like")); }
Tensor randn_like(const Tensor& t, TensorOptions o) { return randn(t.sizes(), like(t, o, "randn_like")); }

// The largest integer below which every integer is exact in `dt` (2^53 for
// Float64, 2^24 Float32, 2^11 Float16, 2^8 BFloat16; Int64: its maximum).
static double exact_integers(ScalarType dt) {
  switch (dt) {
    case kInt64: return 9223372036854775807.0;
    case kFloat64: return 9007199254740992.0;
    case kFloat32: return 16777216.0;
    case kFloat16: return 2048.0;
    case kBFloat16: return 256.0;
    default: return 0;
  }
}

Tensor randint(int64_t high, const IntList& sizes, TensorOptions o) { return randint(0, high, sizes, o); }
Tensor randint(int64_t low, int64_t high, const IntList& sizes, TensorOptions o) {
  TG_CHECK(low < high, "randint: expected low < high, got [", low, ", ", high, ")");
  // floor(low + u (high - low)) from a float64 u in [0, 1): exact while the
  // range fits the 53 bits of u's mantissa.
  const double range = double(high) - double(low);
  TG_CHECK(range <= 9007199254740992.0, "randint: the range [", low, ", ", high,
           ") is wider than 2^53, which a float64 draw cannot cover evenly");
  const ScalarType dt = o.has_dtype() ? o.dtype() : kInt64;
  const double exact = exact_integers(dt);
  TG_CHECK(exact > 0, "randint: expected Int64 or a floating dtype, got ", dt);
  TG_CHECK(double(low) >= -exact && double(high - 1) <= exact, "randint: [", low, ", ", high, ") holds integers that ",
           dt, " cannot represent exactly (it does up to ", exact, "); use a wider dtype");
  Tensor u = rand(sizes, plain(o).dtype(kFloat64));
  Tensor k = tg::clamp_max(tg::floor(u * range), Scalar(range - 1));
  Tensor r = k.to(kInt64) + Scalar(low);
  return finish(r.to(dt), o.dtype(dt));
}
Tensor randint_like(const Tensor& t, int64_t low, int64_t high, TensorOptions o) {
  return randint(low, high, t.sizes(), like(t, o, "randint_like"));
}
Tensor randperm(int64_t n, TensorOptions o) {
  TG_CHECK(n >= 0, "randperm: n must be >= 0, got ", n);
  const ScalarType dt = o.has_dtype() ? o.dtype() : kInt64;
  TG_CHECK(n == 0 || double(n - 1) <= exact_integers(dt), "randperm: ", dt, " cannot hold every integer below ", n,
           " exactly; use Int64 or a wider floating dtype");
  // The order of n independent uniform draws (argsort is a permutation
  // whatever the ties).
  Tensor order = tg::argsort(rand({n}, plain(o).dtype(kFloat64)), 0, false);
  return finish(order.to(dt), o.dtype(dt));
}

Tensor get_rng_state() {
  std::lock_guard<std::mutex> g(g_rng_mutex);
  Tensor s = detail::new_empty({2}, kInt64, Device(kCPU));
  int64_t* p = s.data_ptr<int64_t>();
  std::memcpy(&p[0], &g_seed, sizeof(int64_t));
  std::memcpy(&p[1], &g_offset, sizeof(int64_t));
  return s;
}
void set_rng_state(const Tensor& state) {
  detail::check_defined(state, "set_rng_state", "state");
  TG_CHECK(state.dtype() == kInt64 && state.dim() == 1 && state.size(0) == 2 && !state.is_sparse(),
           "set_rng_state: expected the Int64 [2] tensor get_rng_state gives, got ", state.dtype(), " ",
           shape_str(state.sizes()));
  TG_CHECK(!cuda::is_current_stream_capturing(),
           "set_rng_state: a CUDA graph is capturing on this stream; set the state before or after the capture");
  Tensor c = raw::contiguous(raw::to(state, Device(kCPU)));
  std::lock_guard<std::mutex> g(g_rng_mutex);
  std::memcpy(&g_seed, c.data_ptr<int64_t>(), sizeof(int64_t));
  std::memcpy(&g_offset, c.data_ptr<int64_t>() + 1, sizeof(int64_t));
}

}  // namespace tg

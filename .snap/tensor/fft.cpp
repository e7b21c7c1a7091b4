// The discrete Fourier transforms: the three primitives of the op list
// (_fft_c2c, _fft_r2c, _fft_c2r: argument checks, the backend's unscaled
// kernel, the norm's scale), their CPU kernels (Eigen's FFT module, kissfft,
// one line of a dim at a time, lines in parallel), and tg::fft, written over
// the primitives with the public ops (so every derivative follows from the
// primitives' rules, autograd/ops/fft.cpp). The CUDA kernels are
// cuda/kernels/fft.cu.
#include <tapegrad/tensor/fft.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <vector>

#include <unsupported/Eigen/FFT>

#include "tensor/cpu/cpu_kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/checked.h"
#include "tensor/op_util.h"

namespace tg {

namespace {

// The dims of a transform: wrapped, distinct, sorted; every one of size > 0.
IntList fft_dims(const Tensor& x, const IntList& dims, const char* op) {
  TG_CHECK(x.dim() > 0 || dims.empty(), op, ": a 0-dim tensor has no dim ", shape_str(dims),
           " to transform; give it one with unsqueeze(0)");
  IntList d;
  for (int64_t k : dims)
    d.push_back(detail::wrap_dim(k, x.dim(), op, x.sizes()));
  std::sort(d.begin(), d.end());
  TG_CHECK(std::adjacent_find(d.begin(), d.end()) == d.end(), op, ": a dim appears twice in ", shape_str(dims),
           " (shape ", shape_str(x.sizes()), ")");
  for (int64_t k : d)
    TG_CHECK(x.size(k) > 0, op, ": a transform over dim ", k, " of size 0 (shape ", shape_str(x.sizes()),
             "); give n (or s) to pad it");
  return d;
}

void check_normalization(int64_t norm, const char* op) {
  TG_CHECK(norm >= 0 && norm <= 2, op, ": normalization must be 0 (none), 1 (1/sqrt(n)) or 2 (1/n), got ", norm);
}

// The normalization's factor for a signal of `n` points.
double norm_scale(int64_t norm, double n) { return norm == 0 ? 1.0 : norm == 1 ? 1 / std::sqrt(n) : 1 / n; }
// out scaled in place by the normalization for a signal of `n` points.
Tensor normalized(Tensor out, int64_t norm, double n) {
  if (norm == 0 || out.numel() == 0) return out;
  // The parts scaled (a complex spectrum by a real factor, as pocketfft
  // does): on CUDA one launch, no 0-dim tensor.
  raw::mul_(is_complex(out.dtype()) ? raw::view_as_real(out) : out, Scalar(norm_scale(norm, n)));
  return out;
}

double signal_points(const IntList& sizes, const IntList& dims) {
  double n = 1;
  for (int64_t k : dims)
    n *= double(sizes[size_t(k)]);
  return n;
}

}  // namespace

namespace raw {

Tensor _fft_c2c(const Tensor& self, const IntList& dims, int64_t normalization, bool forward) {
  const char* op = "_fft_c2c";
  detail::check_defined(self, op);
  TG_CHECK(is_complex(self.dtype()), op, ": expected a complex tensor, got ", self.dtype(), " (shape ",
           shape_str(self.sizes()), ")");
  check_normalization(normalization, op);
  const IntList d = fft_dims(self, dims, op);
  Tensor out = detail::new_empty(self.sizes(), self.dtype(), self.device());
  if (out.numel() == 0) return out;
  if (d.empty()) {
    raw::copy_(out, self);
    return out;
  }
  kernels::backend(self.device(), op).fft_c2c(out, raw::contiguous(self), d, forward);
  return normalized(out, normalization, signal_points(self.sizes(), d));
}

Tensor _fft_r2c(const Tensor& self, const IntList& dims, int64_t normalization, bool onesided,
                int64_t onesided_length) {
  const char* op = "_fft_r2c";
  detail::check_defined(self, op);
  TG_CHECK(category(self.dtype()) == DtypeCategory::Floating, op, ": expected a Float32 or Float64 tensor, got ",
           self.dtype(), " (shape ", shape_str(self.sizes()), ")");
  check_normalization(normalization, op);
  const IntList d = fft_dims(self, dims, op);
  TG_CHECK(!d.empty(), op, ": no dims to transform");
  const int64_t full = self.size(d.back()) / 2 + 1;
  TG_CHECK(onesided_length == -1 || (onesided && onesided_length >= 1 && onesided_length <= full), op,
           ": onesided_length must be -1 (all) or 1 .. ", full, " (n / 2 + 1 of dim ", d.back(), "'s ",
           self.size(d.back()), " points) with onesided, got ", onesided_length, onesided ? "" : " (not onesided)");
  if (!onesided) return raw::_fft_c2c(raw::to(self, complex_type(self.dtype())), dims, normalization, true);
  IntList shape = self.sizes();
  shape[size_t(d.back())] = full;
  Tensor out = detail::new_empty(shape, complex_type(self.dtype()), self.device());
  if (out.numel() > 0) kernels::backend(self.device(), op).fft_r2c(out, raw::contiguous(self), d);
  // The first entries: a view of the transform's own buffer (its other
  // entries are never read, nor scaled).
  if (onesided_length != -1 && onesided_length != full) out = raw::narrow(out, d.back(), 0, onesided_length);
  return normalized(out, normalization, signal_points(self.sizes(), d));
}

Tensor _fft_c2r(const Tensor& self, const IntList& dims, int64_t normalization, int64_t last_dim_size) {
  const char* op = "_fft_c2r";
  detail::check_defined(self, op);
  TG_CHECK(is_complex(self.dtype()), op, ": expected a complex tensor, got ", self.dtype(), " (shape ",
           shape_str(self.sizes()), ")");
  check_normalization(normalization, op);
  const IntList d = fft_dims(self, dims, op);
  TG_CHECK(!d.empty(), op, ": no dims to transform");
  TG_CHECK(last_dim_size >= 1, op, ": last_dim_size must be >= 1, got ", last_dim_size);
  const int64_t last = d.back();
  TG_CHECK(self.size(last) >= 1 && self.size(last) <= last_dim_size / 2 + 1, op, ": a onesided spectrum of ",
           last_dim_size, " points has ", last_dim_size / 2 + 1, " entries along dim ", last,
           " (fewer: the rest are zero), got ", self.size(last), " (shape ", shape_str(self.sizes()), ")");
  IntList shape = self.sizes();
  shape[size_t(last)] = last_dim_size;
  Tensor out = detail::new_empty(shape, real_type(self.dtype()), self.device());
  if (out.numel() == 0) return out;
  kernels::backend(self.device(), op).fft_c2r(out, self, d, norm_scale(normalization, signal_points(shape, d)));
  return out;
}

Tensor spectral_mix2d(const Tensor& self, const Tensor& weight1, const Tensor& weight2) {
  const char* op = "spectral_mix2d";
  TG_CHECK(self.defined() && weight1.defined() && weight2.defined(), op, ": ",
           !self.defined()      ? "the spectrum (self)"
           : !weight1.defined() ? "weight1"
                                : "weight2",
           " is an undefined tensor");
  const ScalarType common = is_complex(self.dtype())      ? self.dtype()
                            : is_complex(weight1.dtype()) ? weight1.dtype()
                            : is_complex(weight2.dtype()) ? weight2.dtype()
                                                          : kComplex64;
  TG_CHECK(is_complex(self.dtype()) && weight1.dtype() == self.dtype() && weight2.dtype() == self.dtype(), op,
           ": expected complex tensors of one dtype, got ", self.dtype(), ", ", weight1.dtype(), " and ",
           weight2.dtype(), "; convert them with .to(", common, ")");
  detail::check_same_device(self, weight1, op);
  detail::check_same_device(self, weight2, op);
  TG_CHECK(
      self.dim() >= 3 && weight1.dim() == 4 && weight1.sizes() == weight2.sizes() && weight1.size(0) == self.size(-3),
      op, ": expected a spectrum [..., in, h, wf] and two weights [in, out, m1, m2] of one shape, got ",
      shape_str(self.sizes()), ", ", shape_str(weight1.sizes()), " and ", shape_str(weight2.sizes()));
  const int64_t in = weight1.size(0), out_ch = weight1.size(1), m1 = weight1.size(2), m2 = weight1.size(3);
  const int64_t h = self.size(-2), wf = self.size(-1);
  TG_CHECK(2 * m1 <= h && m2 <= wf, op, ": ", m1, " x ", m2, " modes need a spectrum of at least ", 2 * m1, " x ", m2,
           " (h x wf), got ", h, " x ", wf, " (shape ", shape_str(self.sizes()), ")");
  IntList shape = self.sizes();
  shape[shape.size() - 3] = out_ch;
  // [N, in, h, wf]: the leading dims as one (a copy only where they do not
  // merge).
  IntList lead(self.sizes().begin(), self.sizes().end() - 3);
  int64_t n = 1;
  for (int64_t d : lead)
    n = detail::checked_mul(n, d, op, self.sizes());
  Tensor x = self.dim() == 4 ? self : raw::reshape(self, {n, in, h, wf});
  // out in x's memory order (its dims ordered by x's strides): channel-major
  // in, channel-major out; a spectrum stored by columns, out by columns.
  IntList order{0, 1, 2, 3};
  std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
    return (x.size(i) == 1 ? 0 : x.stride(i)) > (x.size(j) == 1 ? 0 : x.stride(j));
  });
  const IntList sizes{n, out_ch, h, wf};
  IntList stored, back(4);
  for (size_t k = 0; k < 4; ++k) {
    stored.push_back(sizes[size_t(order[k])]);
    back[size_t(order[k])] = int64_t(k);
  }
  Tensor out = raw::permute(detail::new_empty(stored, self.dtype(), self.device()), back);
  if (out.numel() > 0) kernels::backend(self.device(), op).spectral_mix2d(out, x, weight1, weight2);
  return self.dim() == 4 ? out : raw::reshape(out, shape);
}

}  // namespace raw

// ---- the CPU kernels ------------------------------------------------------------------
namespace cpu {
namespace {

// A contiguous tensor's lines along one dim: line l starts at element
// (l / inner) * n * inner + l % inner and steps by inner.
struct Lines {
  int64_t n, inner, count;
  Lines(const IntList& sizes, int64_t dim) : n(sizes[size_t(dim)]), inner(1), count(1) {
    for (size_t k = size_t(dim) + 1; k < sizes.size(); ++k)
      inner *= sizes[k];
    for (size_t k = 0; k < sizes.size(); ++k)
      if (int64_t(k) != dim) count *= sizes[k];
  }
  int64_t start(int64_t l, int64_t len) const { return (l / inner) * len * inner + l % inner; }
};

// Lines of a few thousand points per task.
int64_t lines_grain(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }

template <class R> Eigen::FFT<R> unscaled_fft() {
  Eigen::FFT<R> f;
  f.SetFlag(Eigen::FFT<R>::Unscaled);
  f.SetFlag(Eigen::FFT<R>::HalfSpectrum);
  return f;
}

// In place along `dim` of contiguous complex data of shape `sizes`. (A
// transform of one point is the identity; kissfft's planner cannot take n =
// 1, so no line of one point reaches it, here or below.)
template <class R> void c2c_dim(std::complex<R>* data, const IntList& sizes, int64_t dim, bool forward) {
  const Lines ln(sizes, dim);
  if (ln.n == 1) return;
  parallel_for(ln.count, lines_grain(ln.n), [&](int64_t b, int64_t e) {
    Eigen::FFT<R> f = unscaled_fft<R>();
    std::vector<std::complex<R>> in(size_t(ln.n)), out(size_t(ln.n));
    for (int64_t l = b; l < e; ++l) {
      std::complex<R>* p = data + ln.start(l, ln.n);
      for (int64_t k = 0; k < ln.n; ++k)
        in[size_t(k)] = p[k * ln.inner];
      if (forward) f.fwd(out.data(), in.data(), ln.n);
      else f.inv(out.data(), in.data(), ln.n);
      for (int64_t k = 0; k < ln.n; ++k)
        p[k * ln.inner] = out[size_t(k)];
    }
  });
}

template <class F> void dispatch_parts(ScalarType t, F&& f) {
  const bool done = kernels::dispatch_if<is_complex>(t, [&](auto tag) { f(decltype(decltype(tag){}.re){}); });
  TG_INTERNAL_ASSERT(done, "fft: not a complex dtype: ", t);
}

void fft_c2c_kernel(const Tensor& out, const Tensor& in, const IntList& dims, bool forward) {
  raw::copy_(out, in);
  dispatch_parts(out.dtype(), [&](auto r) {
    using R = decltype(r);
    auto* data = static_cast<std::complex<R>*>(out.data_ptr());
    for (int64_t d : dims)
      c2c_dim<R>(data, out.sizes(), d, forward);
  });
}

void fft_r2c_kernel(const Tensor& out, const Tensor& in, const IntList& dims) {
  dispatch_parts(out.dtype(), [&](auto r) {
    using R = decltype(r);
    const int64_t last = dims.back();
    const Lines src(in.sizes(), last), dst(out.sizes(), last);
    const R* x = static_cast<const R*>(in.data_ptr());
    auto* y = static_cast<std::complex<R>*>(out.data_ptr());
    parallel_for(src.count, lines_grain(src.n), [&](int64_t b, int64_t e) {
      Eigen::FFT<R> f = unscaled_fft<R>();
      std::vector<R> line(size_t(src.n));
      std::vector<std::complex<R>> half(size_t(dst.n));
      for (int64_t l = b; l < e; ++l) {
        const R* p = x + src.start(l, src.n);
        for (int64_t k = 0; k < src.n; ++k)
          line[size_t(k)] = p[k * src.inner];
        if (src.n == 1) half[0] = line[0];
        else f.fwd(half.data(), line.data(), src.n);
        std::complex<R>* q = y + dst.start(l, dst.n);
        for (int64_t k = 0; k < dst.n; ++k)
          q[k * dst.inner] = half[size_t(k)];
      }
    });
    for (size_t i = 0; i + 1 < dims.size(); ++i)
      c2c_dim<R>(y, out.sizes(), dims[i], true);
  });
}

void fft_c2r_kernel(const Tensor& out, const Tensor& in_given, const IntList& dims, double scale) {
  const Tensor in = raw::contiguous(in_given);
  dispatch_parts(in.dtype(), [&](auto r) {
    using R = decltype(r);
    Tensor work = in;
    if (dims.size() > 1) {  // the other dims first, on a copy
      work = raw::clone(in);
      for (size_t i = 0; i + 1 < dims.size(); ++i)
        c2c_dim<R>(static_cast<std::complex<R>*>(work.data_ptr()), work.sizes(), dims[i], false);
    }
    const int64_t last = dims.back();
    const Lines src(work.sizes(), last), dst(out.sizes(), last);
    const auto* x = static_cast<const std::complex<R>*>(work.data_ptr());
    R* y = static_cast<R*>(out.data_ptr());
    parallel_for(src.count, lines_grain(dst.n), [&](int64_t b, int64_t e) {
      Eigen::FFT<R> f = unscaled_fft<R>();
      std::vector<std::complex<R>> half(size_t(dst.n / 2 + 1));  // a short spectrum's tail stays zero
      std::vector<R> line(size_t(dst.n));
      for (int64_t l = b; l < e; ++l) {
        const std::complex<R>* p = x + src.start(l, src.n);
        for (int64_t k = 0; k < src.n; ++k)
          half[size_t(k)] = p[k * src.inner];
        if (dst.n == 1) line[0] = half[0].real();
        else f.inv(line.data(), half.data(), dst.n);
        R* q = y + dst.start(l, dst.n);
        for (int64_t k = 0; k < dst.n; ++k)
          q[k * dst.inner] = line[size_t(k)] * R(scale);
      }
    });
  });
}

// The mode mixing, one (n, o) plane per task: each kept mode a sum over the
// input channels, every other entry zero.
void spectral_mix2d_kernel(const Tensor& out, const Tensor& x, const Tensor& w1, const Tensor& w2) {
  const int64_t n = out.size(0), oc = out.size(1), h = out.size(2), wf = out.size(3);
  const int64_t in = w1.size(0), m1 = w1.size(2), m2 = w1.size(3);
  dispatch_parts(out.dtype(), [&](auto r) {
    using R = decltype(r);
    using C = std::complex<R>;
    C* y = static_cast<C*>(out.data_ptr());
    const C* xp = static_cast<const C*>(x.data_ptr());
    const C* a = static_cast<const C*>(w1.data_ptr());
    const C* b = static_cast<const C*>(w2.data_ptr());
    const IntList so = out.strides(), sx = x.strides(), sw = w1.strides(), sw2 = w2.strides();
    parallel_for(n * oc, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t bi = p / oc, o = p % oc;
        for (int64_t row = 0; row < h; ++row) {
          const bool top = row < m1, bottom = row >= h - m1;
          for (int64_t c = 0; c < wf; ++c) {
            C acc(0, 0);
            if ((top || bottom) && c < m2) {
              const C* w = top ? a : b;
              const IntList& st = top ? sw : sw2;
              const int64_t wr = top ? row : row - (h - m1);
              for (int64_t i = 0; i < in; ++i)
                acc += xp[bi * sx[0] + i * sx[1] + row * sx[2] + c * sx[3]] *
                       w[i * st[0] + o * st[1] + wr * st[2] + c * st[3]];
            }
            y[bi * so[0] + o * so[1] + row * so[2] + c * so[3]] = acc;
          }
        }
      }
    });
  });
}

}  // namespace

void register_fft(kernels::Backend& b) {
  b.fft_c2c = fft_c2c_kernel;
  b.fft_r2c = fft_r2c_kernel;
  b.fft_c2r = fft_c2r_kernel;
  b.spectral_mix2d = spectral_mix2d_kernel;
}

}  // namespace cpu

// ---- tg::fft ---------------------------------------------------------------------------
namespace fft {
namespace {

// The primitives' normalization for `norm` in the direction of the
// transform (forward: e^-; the inverse transforms are scaled by "backward").
int64_t norm_mode(const std::string& norm, bool forward, const char* op) {
  if (norm.empty() || norm == "backward") return forward ? 0 : 2;
  if (norm == "forward") return forward ? 2 : 0;
  if (norm == "ortho") return 1;
  TG_ERROR(op, ": norm must be \"backward\", \"forward\" or \"ortho\", got \"", norm, "\"");
  return 0;
}

// A complex input (real, integer and half inputs converted: Complex64, or
// Complex128 from Float64).
Tensor as_complex(const Tensor& x, const char* op) {
  detail::check_defined(x, op);
  if (is_complex(x.dtype())) return x;
  return x.to(complex_type(x.dtype() == kFloat64 ? kFloat64 : kFloat32));
}
// A real Float32/Float64 input (complex refused).
Tensor as_real(const Tensor& x, const char* op) {
  detail::check_defined(x, op);
  TG_CHECK(!is_complex(x.dtype()), op, ": expects a real input, got ", x.dtype(), " (shape ", shape_str(x.sizes()),
           "); use the complex transform (fft, fftn) instead");
  return x.dtype() == kFloat32 || x.dtype() == kFloat64 ? x : x.to(kFloat32);
}

// x padded with zeros or cropped to n points along dim.
Tensor resized(const Tensor& x, int64_t dim, int64_t n, const char* op) {
  TG_CHECK(n >= 1, op, ": invalid number of data points (", n, ") specified");
  const int64_t have = x.size(dim);
  if (n == have) return x;
  if (n < have) return x.narrow(dim, 0, n);
  IntList pad = x.sizes();
  pad[size_t(dim)] = n - have;
  return tg::cat({x, tg::zeros({}, x.options()).expand(pad)}, dim);  // the zeros read as one element
}

// fftn's dims and signal sizes, as torch.fft's: dims default to the last
// s.size() dims when s is given, else every dim; s defaults to the sizes.
struct Shape {
  IntList dims, s;
};
Shape canonical(const Tensor& x, const std::optional<IntList>& s, const std::optional<IntList>& dim, const char* op) {
  Shape r;
  TG_CHECK(!(dim && !dim->empty() && x.dim() == 0), op, ": a 0-dim tensor has no dim ", shape_str(*dim),
           " to transform");
  if (dim) {
    for (int64_t d : *dim)
      r.dims.push_back(detail::wrap_dim(d, x.dim(), op, x.sizes()));
    IntList sorted = r.dims;
    std::sort(sorted.begin(), sorted.end());
    TG_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), op, ": dims must be distinct, got ",
             shape_str(*dim));
    TG_CHECK(!s || s->size() == dim->size(), op, ": s and dim must have the same length, got ", shape_str(*s), " and ",
             shape_str(*dim));
  } else if (s) {
    TG_CHECK(int64_t(s->size()) <= x.dim(), op, ": s has ", s->size(), " entries for a ", x.dim(), "-D input");
    for (int64_t k = x.dim() - int64_t(s->size()); k < x.dim(); ++k)
      r.dims.push_back(k);
  } else {
    for (int64_t k = 0; k < x.dim(); ++k)
      r.dims.push_back(k);
  }
  for (size_t i = 0; i < r.dims.size(); ++i)
    r.s.push_back(s && (*s)[i] != -1 ? (*s)[i] : x.size(r.dims[i]));
  return r;
}

Tensor c2c(const char* op, const Tensor& input, const std::optional<IntList>& s, const std::optional<IntList>& dim,
           const std::string& norm, bool forward) {
  Tensor x = as_complex(input, op);
  const Shape sh = canonical(x, s, dim, op);
  for (size_t i = 0; i < sh.dims.size(); ++i)
    x = resized(x, sh.dims[i], sh.s[i], op);
  return tg::_fft_c2c(x, sh.dims, norm_mode(norm, forward, op), forward);
}

Tensor r2c(const char* op, const Tensor& input, const std::optional<IntList>& s, const std::optional<IntList>& dim,
           const std::string& norm, bool forward) {
  Tensor x = as_real(input, op);
  const Shape sh = canonical(x, s, dim, op);
  TG_CHECK(!sh.dims.empty(), op, ": needs at least one dim to transform");
  for (size_t i = 0; i < sh.dims.size(); ++i)
    x = resized(x, sh.dims[i], sh.s[i], op);
  // The onesided dim is the last of the given dims (the primitive's is its
  // highest): moved there when they differ.
  const int64_t last = sh.dims.back();
  const int64_t top = *std::max_element(sh.dims.begin(), sh.dims.end());
  if (last != top) x = x.transpose(last, top);
  Tensor y = tg::_fft_r2c(x, sh.dims, norm_mode(norm, forward, op), true);
  if (last != top) y = y.transpose(last, top);
  return forward ? y : tg::conj(y);
}

Tensor c2r(const char* op, const Tensor& input, const std::optional<IntList>& s, const std::optional<IntList>& dim,
           const std::string& norm, bool forward) {
  Tensor x = as_complex(input, op);
  Shape sh = canonical(x, s, dim, op);
  TG_CHECK(!sh.dims.empty(), op, ": needs at least one dim to transform");
  const int64_t last = sh.dims.back();
  const int64_t n = s && s->back() != -1 ? s->back() : 2 * (x.size(last) - 1);
  TG_CHECK(n >= 1, op, ": invalid number of data points (", n, ") specified (", x.size(last),
           " input entries along dim ", last, "; give n)");
  sh.s.back() = n / 2 + 1;
  // A short onesided dim is padded by the primitive (no copy here); one
  // with no entries is padded here (the primitive transforms no empty dim).
  for (size_t i = 0; i < sh.dims.size(); ++i)
    if (i + 1 < sh.dims.size() || x.size(sh.dims[i]) > sh.s[i] || x.size(sh.dims[i]) == 0)
      x = resized(x, sh.dims[i], sh.s[i], op);
  if (forward) x = tg::conj(x);  // hfft: the inverse transform of the conjugate
  const int64_t top = *std::max_element(sh.dims.begin(), sh.dims.end());
  if (last != top) x = x.transpose(last, top);
  Tensor y = tg::_fft_c2r(x, sh.dims, norm_mode(norm, forward, op), n);
  return last != top ? y.transpose(last, top) : y;
}

// A 1-D transform's n (-1 is not "keep the size" there, as in torch.fft).
std::optional<IntList> one(std::optional<int64_t> n, const char* op) {
  TG_CHECK(!n || *n >= 1, op, ": invalid number of data points (", n ? *n : 0, ") specified");
  return n ? std::optional<IntList>(IntList{*n}) : std::nullopt;
}

}  // namespace

Tensor fft(const Tensor& input, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return c2c("fft", input, one(n, "fft"), IntList{dim}, norm, true);
}
Tensor ifft(const Tensor& input, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return c2c("ifft", input, one(n, "ifft"), IntList{dim}, norm, false);
}
Tensor rfft(const Tensor& input, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return r2c("rfft", input, one(n, "rfft"), IntList{dim}, norm, true);
}
Tensor irfft(const Tensor& input, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return c2r("irfft", input, one(n, "irfft"), IntList{dim}, norm, false);
}
Tensor hfft(const Tensor& input, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return c2r("hfft", input, one(n, "hfft"), IntList{dim}, norm, true);
}
Tensor ihfft(const Tensor& input, std::optional<int64_t> n, int64_t dim, const std::string& norm) {
  return r2c("ihfft", input, one(n, "ihfft"), IntList{dim}, norm, false);
}
Tensor fftn(const Tensor& input, std::optional<IntList> s, std::optional<IntList> dim, const std::string& norm) {
  return c2c("fftn", input, s, dim, norm, true);
}
Tensor ifftn(const Tensor& input, std::optional<IntList> s, std::optional<IntList> dim, const std::string& norm) {
  return c2c("ifftn", input, s, dim, norm, false);
}
Tensor rfftn(const Tensor& input, std::optional<IntList> s, std::optional<IntList> dim, const std::string& norm) {
  return r2c("rfftn", input, s, dim, norm, true);
}
Tensor irfftn(const Tensor& input, std::optional<IntList> s, std::optional<IntList> dim, const std::string& norm) {
  return c2r("irfftn", input, s, dim, norm, false);
}
Tensor fft2(const Tensor& input, std::optional<IntList> s, IntList dim, const std::string& norm) {
  return c2c("fft2", input, s, dim, norm, true);
}
Tensor ifft2(const Tensor& input, std::optional<IntList> s, IntList dim, const std::string& norm) {
  return c2c("ifft2", input, s, dim, norm, false);
}
Tensor rfft2(const Tensor& input, std::optional<IntList> s, IntList dim, const std::string& norm) {
  return r2c("rfft2", input, s, dim, norm, true);
}
Tensor irfft2(const Tensor& input, std::optional<IntList> s, IntList dim, const std::string& norm) {
  return c2r("irfft2", input, s, dim, norm, false);
}

namespace {
Tensor frequencies(int64_t n, double d, const TensorOptions& options, bool onesided, const char* op) {
  TG_CHECK(n >= 1, op, ": n must be >= 1, got ", n);
  TG_CHECK(d != 0 && std::isfinite(d), op, ": the spacing d must be finite and nonzero, got ", d);
  const ScalarType t = options.dtype();  // Float32 unless set
  TG_CHECK(is_floating_point(t), op, ": expected a floating dtype, got ", t);
  const int64_t count = onesided ? n / 2 + 1 : n;
  Tensor k = tg::arange(0, count, 1, TensorOptions().dtype(kFloat64).device(options.device()));
  if (!onesided) k = tg::where(tg::ge(k, double((n + 1) / 2)), k - double(n), k);  // the negative ones
  return (k / (d * double(n))).to(t);
}
Tensor shifted(const Tensor& x, const std::optional<IntList>& dim, bool inverse, const char* op) {
  detail::check_defined(x, op);
  IntList dims, shifts;
  if (dim) dims = *dim;
  else
    for (int64_t k = 0; k < x.dim(); ++k)
      dims.push_back(k);
  for (int64_t d : dims) {
    const int64_t n = x.size(detail::wrap_dim(d, x.dim(), op, x.sizes()));
    shifts.push_back(inverse ? (n + 1) / 2 : n / 2);
  }
  if (dims.empty()) return x.clone();
  return tg::roll(x, shifts, dims);
}
}  // namespace

Tensor fftfreq(int64_t n, double d, const TensorOptions& options) {
  return frequencies(n, d, options, false, "fftfreq");
}
Tensor rfftfreq(int64_t n, double d, const TensorOptions& options) {
  return frequencies(n, d, options, true, "rfftfreq");
}
Tensor fftshift(const Tensor& input, std::optional<IntList> dim) { return shifted(input, dim, false, "fftshift"); }
Tensor ifftshift(const Tensor& input, std::optional<IntList> dim) { return shifted(input, dim, true, "ifftshift"); }

}  // namespace fft
}  // namespace tg

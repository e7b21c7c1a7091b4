// operator<< in the style of PyTorch: nested brackets, summarised with
// "..." past 1000 elements, dtype shown unless it is Float32.
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>

#include "tensor/op_util.h"

namespace tg {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Printer {
  const std::vector<double>& v;  // the values (a complex tensor's real parts)
  const IntList& sizes;
  IntList strides;  // contiguous, in elements
  bool integral, boolean, sci, summarize;
  const std::vector<double>* im = nullptr;     // a complex tensor's imaginary parts
  const std::vector<int64_t>* ints = nullptr;  // an Int64 tensor's values (a double holds 53 bits)
  int width = 0;

  // Element i: a real value, or re+imj / re-imj as PyTorch prints complex.
  std::string element(size_t i) const {
    if (ints) return std::to_string((*ints)[i]);
    if (!im) return fmt(v[i]);
    const double b = (*im)[i];
    const bool minus = std::signbit(b) && !std::isnan(b);
    return fmt(v[i]) + (minus ? "-" : "+") + fmt(minus ? -b : b) + "j";
  }

  std::string fmt(double x) const {
    char buf[64];
    if (boolean) return x != 0 ? "True" : "False";
    if (integral) std::snprintf(buf, sizeof buf, "%lld", (long long)x);
    else if (std::isnan(x)) std::snprintf(buf, sizeof buf, "nan");
    else if (std::isinf(x)) std::snprintf(buf, sizeof buf, x > 0 ? "inf" : "-inf");
    else if (sci) std::snprintf(buf, sizeof buf, "%.4e", x);
    else std::snprintf(buf, sizeof buf, "%.4f", x);
    return buf;
  }

  void print(std::ostream& os, int64_t dim, int64_t off, int indent) const {
    if (dim == int64_t(sizes.size())) {
      std::string s = element(size_t(off));
      os << std::string(size_t(std::max<int>(0, width - int(s.size()))), ' ') << s;
      return;
    }
    os << '[';
    int64_t n = sizes[size_t(dim)];
    bool cut = summarize && n > 2 * kEdgeItems;
    bool last = dim + 1 == int64_t(sizes.size());
    for (int64_t i = 0; i < n; ++i) {
      if (cut && i == kEdgeItems) {
        os << (last ? ", ..." : ",\n" + std::string(size_t(indent + 1), ' ') + "...");
        i = n - kEdgeItems - 1;
        continue;
      }
      if (i > 0) {
        os << ',';
        if (last) os << ' ';
        else os << std::string(size_t(sizes.size() - size_t(dim) - 1), '\n') << std::string(size_t(indent + 1), ' ');
      }
      print(os, dim + 1, off + i * strides[size_t(dim)], indent + 1);
    }
    os << ']';
  }
};

}  // namespace

std::string Tensor::to_string() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

void print_sparse(std::ostream& os, const Tensor& s);  // tensor/sparse.cpp

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "[ undefined tensor ]";
  if (t.is_sparse()) {
    print_sparse(os, t);
    return os;
  }
  std::vector<double> v, im;
  if (is_complex(t.dtype())) {
    for (const complex<double>& z : t.to_vector<complex<double>>()) {
      v.push_back(z.re);
      im.push_back(z.im);
    }
  } else {
    v = t.to_vector<double>();
  }
  Printer p{v,
            t.sizes(),
            contiguous_strides(t.sizes()),
            is_integral(t.dtype(), false),
            t.dtype() == kBool,
            false,
            t.numel() > kSummarizeAbove};
  if (is_complex(t.dtype())) p.im = &im;
  std::vector<int64_t> ints;
  if (p.integral) {
    ints = t.to_vector<int64_t>();
    p.ints = &ints;
  }
  double amax = 0, amin_nz = INFINITY;
  for (const std::vector<double>* part : {&v, &im})
    for (double x : *part)
      if (std::isfinite(x)) {
        amax = std::max(amax, std::fabs(x));
        if (x != 0) amin_nz = std::min(amin_nz, std::fabs(x));
      }
  p.sci = !p.integral && !p.boolean && (amax >= 1e8 || amin_nz < 1e-4);
  for (size_t i = 0; i < v.size(); ++i)
    p.width = std::max<int>(p.width, int(p.element(i).size()));
  os << "tensor(";
  p.print(os, 0, 0, 7);
  if (t.numel() == 0) os << ", size=" << shape_str(t.sizes());
  if (t.dtype() != kFloat32) os << ", dtype=" << t.dtype();
  if (!t.device().is_cpu()) os << ", device=" << t.device();
  return os << ')';
}

}  // namespace tg

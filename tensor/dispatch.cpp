#include <atomic>

#include "tensor/op_util.h"

namespace tg {

namespace {
std::atomic<bool> g_deterministic{false};
}  // namespace

void use_deterministic_algorithms(bool enabled) { g_deterministic.store(enabled); }
bool are_deterministic_algorithms_enabled() { return g_deterministic.load(std::memory_order_relaxed); }
DeterministicGuard::DeterministicGuard(bool enabled) : prev_(are_deterministic_algorithms_enabled()) {
  use_deterministic_algorithms(enabled);
}
DeterministicGuard::~DeterministicGuard() { use_deterministic_algorithms(prev_); }

std::ostream& operator<<(std::ostream& os, const Device& d) {
  if (d.is_cpu()) return os << "cpu";
  return os << "cuda:" << d.index();
}

std::ostream& operator<<(std::ostream& os, Layout l) { return os << (l == Layout::Strided ? "Strided" : "SparseCoo"); }

ScalarType promote_with_scalar(ScalarType t, const Scalar& s) {
  return s.is_bool() ? t : promote_with_scalar(t, s.is_integral());
}
std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_bool()) return os << (s.to_int() ? "true" : "false");
  if (s.is_integral()) return os << s.to_int();
  return os << s.to_double();
}

namespace kernels {

const Backend& backend(Device d, const char* op) {
  if (d.is_cpu()) return cpu_backend();
  const Backend* b = cuda_backend();
  TG_CHECK(b != nullptr, op, ": no kernels for device ", d, " in this build; CUDA tensor kernels are not available");
  return *b;
}

void copy_pairs(const std::vector<Tensor>& dst, const std::vector<Tensor>& src, const char* op) {
  TG_INTERNAL_ASSERT(dst.size() == src.size(), "copy_pairs: ", dst.size(), " destinations for ", src.size(),
                     " sources");
  if (dst.empty()) return;
  const ScalarType t = dst[0].dtype();
  const Device dev = dst[0].device();
  const auto copy_n = t == kFloat32 || t == kFloat64 ? backend(dev, op).copy_n : nullptr;
  std::vector<Tensor> d, s;
  auto flush = [&] {
    if (!d.empty()) copy_n(d, s);
    d.clear();
    s.clear();
  };
  for (size_t j = 0; j < dst.size(); ++j) {
    if (copy_n && src[j].is_contiguous() && dst[j].is_contiguous() && src[j].sizes() == dst[j].sizes() &&
        src[j].dtype() == t && dst[j].dtype() == t && src[j].device() == dev && dst[j].device() == dev) {
      d.push_back(dst[j]);
      s.push_back(src[j]);
      if (d.size() == kMaxCopyN) flush();
    } else {
      raw::copy_(dst[j], src[j]);
    }
  }
  flush();
}

}  // namespace kernels
}  // namespace tg

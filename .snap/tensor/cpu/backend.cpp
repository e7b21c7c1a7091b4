#include "tensor/cpu/cpu_kernels.h"

namespace tg::kernels {

const Backend& cpu_backend() {
  static const Backend b = [] {
    Backend t{};
    cpu::register_elementwise(t);
    cpu::register_reduce(t);
    cpu::register_linalg(t);
    cpu::register_index(t);
    cpu::register_random(t);
    cpu::register_sparse(t);
    cpu::register_fft(t);
    return t;
  }();
  return b;
}

}  // namespace tg::kernels

// The autograd accessors without the autograd layer (a program that links
// tapegrad::tensor alone): every tensor is one that never required grad.
#include <cstdlib>

#include "tensor/op_table.h"
#include "tensor/op_util.h"

namespace tg::no_autograd {

namespace {
[[noreturn]] void needs_autograd(const char* op) {
  TG_CHECK(false, op,
           ": needs the autograd layer, which this program does not link; "
           "link tapegrad::tapegrad (not only tapegrad::tensor)");
  std::abort();
}
}  // namespace

bool requires_grad(const Tensor& self) {
  detail::check_defined(self, "requires_grad");
  return false;
}
const Tensor& requires_grad_(const Tensor& self, bool requires_grad) {
  if (requires_grad) needs_autograd("requires_grad_");
  return self;
}
const Tensor& grad(const Tensor&) {
  static const Tensor none;
  return none;
}
Tensor& mutable_grad(const Tensor&) { needs_autograd("mutable_grad"); }
std::shared_ptr<autograd::Node> grad_fn(const Tensor&) { return nullptr; }
bool is_leaf(const Tensor&) { return true; }
uint32_t output_nr(const Tensor&) { return 0; }
bool has_tangent(const Tensor&) { return false; }
void retain_grad(const Tensor&) { needs_autograd("retain_grad"); }
bool retains_grad(const Tensor&) { return false; }
void backward(const Tensor&, const Tensor&, std::optional<bool>, bool, const std::vector<Tensor>&) {
  needs_autograd("backward");
}
HookHandle register_hook(const Tensor&, std::function<Tensor(const Tensor&)>) { needs_autograd("register_hook"); }
HookHandle register_post_accumulate_grad_hook(const Tensor&, std::function<void(const Tensor&)>) {
  needs_autograd("register_post_accumulate_grad_hook");
}

}  // namespace tg::no_autograd

// A custom differentiable function: the softplus-of-a-product
// y = log(1 + exp(a * b)) written as a tg::autograd::Function with its own
// forward, backward and forward-mode (jvp) rules, differentiable twice
// because the backward uses differentiable ops. Checks the gradients and the
// jvp against finite differences (gradcheck with forward mode,
// gradgradcheck) and against the closed form; exits non-zero on any
// mismatch.
#include <cmath>
#include <cstdio>

#include <tapegrad/tapegrad.h>

using tg::Tensor;
namespace ag = tg::autograd;

struct SoftplusProduct : ag::Function<SoftplusProduct> {
  static Tensor forward(ag::AutogradContext* ctx, Tensor a, Tensor b) {
    ctx->save_for_backward({a, b});
    return tg::log(tg::exp(a * b) + 1.0);
  }
  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &a = saved[0], &b = saved[1];
    Tensor s = tg::sigmoid(a * b) * grads[0];  // dy/d(ab)
    // Compute only what the running backward needs (edge trimming).
    return {ctx->needs_input_grad(0) ? s * b : Tensor(), ctx->needs_input_grad(1) ? s * a : Tensor()};
  }
  // Forward mode: one tangent per input in, one per output out. The saved
  // tensors are read as in backward.
  static ag::variable_list jvp(ag::AutogradContext* ctx, ag::variable_list tangents) {
    auto saved = ctx->get_saved_variables();
    const Tensor &a = saved[0], &b = saved[1];
    return {tg::sigmoid(a * b) * (tangents[0] * b + a * tangents[1])};
  }
};

int main() {
  auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  tg::manual_seed(3);
  Tensor a = (tg::rand({4, 3}, f64) * 2 - 1).requires_grad_();
  Tensor b = (tg::rand({4, 3}, f64) * 2 - 1).requires_grad_();
  auto fn = [](const ag::variable_list& v) { return SoftplusProduct::apply(v[0], v[1]); };
  ag::GradcheckOptions with_forward;
  with_forward.check_forward_ad = true;
  auto r1 = ag::gradcheck(fn, {a, b}, with_forward);
  auto r2 = ag::gradgradcheck(fn, {a, b});
  std::printf("gradcheck: %s\ngradgradcheck: %s\n", r1.ok ? "ok" : r1.message.c_str(),
              r2.ok ? "ok" : r2.message.c_str());
  Tensor y = SoftplusProduct::apply(a, b).sum();
  y.backward();
  Tensor expect = (tg::sigmoid(a * b) * b).detach();
  const double err = tg::amax(tg::abs(a.grad() - expect)).item<double>();
  std::printf("d/da against the closed form: max error %.3e\n", err);
  std::printf("grad_fn name: %s\n", SoftplusProduct::apply(a, b).grad_fn()->name().c_str());
  // Forward mode: the directional derivative along (ta, tb) in one pass.
  Tensor ta = tg::rand({4, 3}, f64), tb = tg::rand({4, 3}, f64);
  Tensor jv;
  {
    ag::forward_ad::dual_level level;
    Tensor y_dual =
        SoftplusProduct::apply(ag::forward_ad::make_dual(a.detach(), ta), ag::forward_ad::make_dual(b.detach(), tb));
    jv = ag::forward_ad::unpack_dual(y_dual).tangent;
  }
  Tensor jv_expect = tg::sigmoid(a * b).detach() * (ta * b.detach() + a.detach() * tb);
  const double jerr = tg::amax(tg::abs(jv - jv_expect)).item<double>();
  std::printf("jvp against the closed form: max error %.3e\n", jerr);
  return r1.ok && r2.ok && err < 1e-14 && jerr < 1e-14 ? 0 : 1;
}

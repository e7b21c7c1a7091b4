// Forward-mode AD: the dual level, tangents on AutogradMeta, make_dual and
// unpack_dual (docs/AUTOGRAD.md "Forward mode"). The tangent rules live with
// the ops' backward formulas in autograd/ops/.
#include <tapegrad/autograd/forward_ad.h>

#include <atomic>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/tensor/error.h>

namespace tg::autograd {

namespace {
thread_local uint64_t t_level = 0;  // the active dual level (0: none)
std::atomic<uint64_t> g_next_level{1};
}  // namespace

namespace forward_ad {

dual_level::dual_level() {
  TG_CHECK(t_level == 0, "forward_ad::dual_level: a dual level is already active on this thread; "
           "nested levels are not supported (end the outer one first)");
  t_level = g_next_level.fetch_add(1);
}

dual_level::~dual_level() { t_level = 0; }

bool is_active() { return t_level != 0; }

detail::Suspend::Suspend() : saved_(t_level) { t_level = 0; }
detail::Suspend::~Suspend() { t_level = saved_; }

Tensor make_dual(const Tensor& primal, const Tensor& tangent) {
  TG_CHECK(t_level != 0, "make_dual: no dual level is active; create a forward_ad::dual_level first");
  TG_CHECK(primal.defined() && tangent.defined(), "make_dual: primal and tangent must be defined");
  TG_CHECK(primal.is_floating_point(), "make_dual: the primal must be floating point, got ", primal.dtype());
  TG_CHECK(tangent.sizes() == primal.sizes() && tangent.dtype() == primal.dtype() &&
               tangent.device() == primal.device(),
           "make_dual: the tangent (", tangent.dtype(), " ", tangent.sizes(), " on ", tangent.device(),
           ") must have the primal's shape, dtype and device (", primal.dtype(), " ", primal.sizes(), " on ",
           primal.device(), ")");
  Tensor dual = primal.view(primal.sizes());  // a view: keeps primal's reverse-mode history
  impl::set_fw_grad(dual, tangent);
  return dual;
}

UnpackedDual unpack_dual(const Tensor& t) {
  UnpackedDual u;
  u.tangent = impl::fw_grad(t);
  u.primal = t.view(t.sizes());
  if (AutogradMeta* m = impl::meta(u.primal)) {
    m->fw_grad = Tensor();
    m->fw_level = 0;
  }
  return u;
}

}  // namespace forward_ad

namespace impl {

Tensor fw_grad(const Tensor& t) {
  if (t_level == 0) return Tensor();
  AutogradMeta* m = meta(t);
  return m && m->fw_level == t_level ? m->fw_grad : Tensor();
}

void set_fw_grad(const Tensor& t, const Tensor& tangent) {
  if (t_level == 0 || !t.defined()) return;
  TG_CHECK(t.is_floating_point(), "forward AD: a tangent on a ", t.dtype(), " tensor");
  AutogradMeta& m = materialize_meta(t);
  m.fw_grad = tangent;
  m.fw_level = tangent.defined() ? t_level : 0;
}

}  // namespace impl

}  // namespace tg::autograd

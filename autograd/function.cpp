#include <tapegrad/autograd/function.h>

#include <cxxabi.h>

#include <cstdlib>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

#include "autograd/ops/record.h"
#include "autograd/ops/taylor.h"

namespace tg::autograd {

namespace detail {
std::string function_node_name(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && d ? d : mangled;
  std::free(d);
  size_t colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  return name + "Backward";
}

namespace {
std::string fn_name(const std::string& node_name) {  // "CubeBackward" -> "Cube"
  const std::string suffix = "Backward";
  return node_name.size() > suffix.size() ? node_name.substr(0, node_name.size() - suffix.size()) : node_name;
}
}  // namespace

bool any_tangent(const variable_list& inputs) { return ops_detail::fw_any(inputs); }

variable_list input_tangents(const variable_list& inputs) {
  variable_list out;
  for (const Tensor& t : inputs) {
    Tensor tan = impl::fw_grad(t);
    if (!tan.defined() && t.defined() && is_differentiable(t.dtype())) tan = ops_detail::fw_zeros(t);
    out.push_back(tan);
  }
  return out;
}

void set_output_tangents(const std::string& fn, variable_list& outputs, const variable_list& tangents) {
  TG_CHECK(tangents.size() == outputs.size(), fn_name(fn), ": jvp returned ", tangents.size(), " tangents, expected ",
           outputs.size(), " (one per output of forward)");
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& o = outputs[i];
    const Tensor& t = tangents[i];
    if (!t.defined()) continue;
    if (!is_differentiable(o.dtype())) continue;
    const IntList want = ops_detail::fw_shape(o.sizes());
    TG_CHECK(t.sizes() == want && t.dtype() == o.dtype() && t.device() == o.device(), fn_name(fn), ": jvp's tangent ",
             i, " (", t.dtype(), " ", shape_str(t.sizes()), " on ", t.device(), ") must match output ", i, " (",
             o.dtype(), " ", shape_str(o.sizes()), " on ", o.device(), ")");
    impl::set_fw_grad(o, t);  // an input returned (mark_dirty): its tangent is the new one
  }
}

bool taylor_active() {
  const forward_ad::TaylorLayout* l = forward_ad::taylor_layout();
  return l && l->order >= 2;
}

std::vector<variable_list> input_coefficients(const variable_list& inputs) {
  ops_detail::second_order_term();  // a user's rule: assume it forms second-order terms
  const forward_ad::TaylorLayout& l = *forward_ad::taylor_layout();
  variable_list tangents = input_tangents(inputs);
  std::vector<variable_list> out(size_t(l.order));
  forward_ad::detail::Suspend pause;
  for (int j = 1; j <= l.order; ++j)
    for (const Tensor& t : tangents)
      out[size_t(j - 1)].push_back(t.defined() ? l.block(t, j) : t);
  return out;
}

void set_output_coefficients(const std::string& fn, variable_list& outputs,
                             const std::vector<variable_list>& coefficients) {
  const forward_ad::TaylorLayout& l = *forward_ad::detail::current_state().taylor;
  TG_CHECK(int(coefficients.size()) == l.order, fn_name(fn), ": taylor returned ", coefficients.size(),
           " coefficient lists, expected ", l.order, " (the level's order)");
  variable_list tangents;
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::vector<Tensor> parts;
    for (int j = 1; j <= l.order; ++j) {
      const variable_list& cj = coefficients[size_t(j - 1)];
      TG_CHECK(cj.size() == outputs.size(), fn_name(fn), ": taylor's coefficient ", j, " has ", cj.size(),
               " tensors, expected ", outputs.size(), " (one per output of forward)");
      const Tensor& o = outputs[i];
      IntList want = o.sizes();
      want.insert(want.begin(), l.rows(j));
      Tensor c = cj[i];
      if (!c.defined() && is_differentiable(o.dtype())) c = zeros(want, o.options());
      TG_CHECK(!c.defined() || c.sizes() == want, fn_name(fn), ": taylor's coefficient ", j, " of output ", i,
               " has shape ", shape_str(c.sizes()), ", expected ", shape_str(want),
               " (the coefficient's rows, then the output's shape)");
      parts.push_back(c);
    }
    Tensor t;
    if (parts[0].defined()) {
      forward_ad::detail::Suspend pause;
      t = parts.size() == 1 ? parts[0] : cat(parts, 0);
    }
    tangents.push_back(t);
  }
  set_output_tangents(fn, outputs, tangents);
}

void no_taylor(const std::string& fn) {
  TG_ERROR(fn_name(fn),
           ": this custom Function has no Taylor-mode rule and an input carries Taylor "
           "coefficients (forward_ad::taylor_level of order >= 2); give it static std::vector<variable_list> "
           "taylor(AutogradContext* ctx, std::vector<variable_list> coefficients) returning the outputs' "
           "coefficients, or compute it outside the Taylor level");
}

void no_jvp(const std::string& fn) {
  TG_ERROR(fn_name(fn),
           ": this custom Function has no forward-mode rule and an input carries a tangent "
           "(forward_ad::make_dual); give it static variable_list jvp(AutogradContext* ctx, variable_list "
           "tangents) returning one tangent per output, or compute it outside the dual level");
}

}  // namespace detail

variable_list AutogradContext::get_saved_variables() const {
  // In jvp / taylor of a function whose forward recorded no backward (no
  // input requires grad): what forward saved, as it is.
  if (saved_.empty() && !to_save_.empty()) return to_save_;
  auto node = node_.lock();
  variable_list out;
  out.reserve(saved_.size());
  for (const SavedVariable& s : saved_)
    out.push_back(s.unpack(node.get(), "saved_tensors"));
  return out;
}

void AutogradContext::mark_dirty(const variable_list& inputs) {
  for (const Tensor& t : inputs)
    dirty_.insert(t.impl());
}

void AutogradContext::mark_non_differentiable(const variable_list& outputs) {
  for (const Tensor& t : outputs)
    non_differentiable_.insert(t.impl());
}

bool AutogradContext::needs_input_grad(size_t i) const {
  auto node = node_.lock();
  if (node && node->num_outputs() > i) return node->should_compute_output(i);
  return i < forward_needs_.size() && forward_needs_[i];
}

void CppNodeBase::wrap_outputs(const variable_list& inputs, variable_list& outputs) {
  auto self = shared_from_this();
  for (Tensor& o : outputs) {
    TG_CHECK(o.defined(), name(), ": forward returned an undefined tensor");
    bool is_input = false;
    for (const Tensor& in : inputs)
      is_input |= in.is_same(o);
    bool dirty = ctx_.dirty_.count(o.impl()) > 0;
    bool differentiable = is_differentiable(o.dtype()) && !ctx_.non_differentiable_.count(o.impl());
    if (dirty) {
      TG_CHECK(!(o.is_leaf() && o.requires_grad()), name(),
               ": a leaf tensor that "
               "requires grad (shape ",
               shape_str(o.sizes()),
               ") was modified in place "
               "by forward (mark_dirty); clone it first");
    } else if (is_input && differentiable) {
      o = raw::detach(o);  // returning an input unchanged: a new alias gets the history
    }
    uint32_t nr = add_input_metadata(o);
    output_info_.emplace_back(o);
    if (differentiable) {
      AutogradMeta& m = impl::materialize_meta(o);
      m.grad_fn = self;
      m.output_nr = nr;
      m.requires_grad = false;
    }
  }
  for (const Tensor& t : ctx_.to_save_) {
    bool is_output = false;
    for (const Tensor& o : outputs)
      is_output |= o.is_same(t);
    ctx_.saved_.emplace_back(t, is_output);
  }
  ctx_.to_save_.clear();
}

namespace {
// Stands in for the history of gradients computed by a once-differentiable
// function under create_graph: differentiating through them is an error.
class DelayedError final : public Node {
 public:
  DelayedError(std::string fn, const char* hint) : fn_(std::move(fn)), hint_(hint) {}
  variable_list apply(variable_list&&) override {
    TG_ERROR(fn_, " is once-differentiable: its backward ran under create_graph but cannot be differentiated again; ",
             hint_ ? hint_ : "remove once_differentiable and write its backward with differentiable ops");
  }
  std::string name() const override { return "DelayedError"; }

 private:
  std::string fn_;
  const char* hint_;
};
}  // namespace

variable_list CppNodeBase::apply(variable_list&& grads) {
  variable_list incoming;
  if (once_differentiable_ && is_grad_enabled()) incoming = grads;
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined()) grads[i] = output_info_[i].zeros();
  variable_list res;
  if (once_differentiable_) {
    AutoGradMode no_grad(false);
    res = call_backward(std::move(grads));
  } else {
    res = call_backward(std::move(grads));
  }
  size_t n_tensors = tensor_arg_.size();
  TG_CHECK(res.size() == num_args_ || res.size() == n_tensors, name(), ": backward returned ", res.size(),
           " gradients, expected ", num_args_, " (one per forward argument) or ", n_tensors,
           " (one per tensor argument)");
  variable_list out(n_tensors);
  for (size_t k = 0; k < n_tensors; ++k) {
    Tensor& g = res.size() == num_args_ ? res[size_t(tensor_arg_[k])] : res[k];
    if (should_compute_output(k)) out[k] = std::move(g);
  }
  if (res.size() == num_args_ && num_args_ != n_tensors) {
    std::vector<bool> is_tensor(num_args_, false);
    for (int64_t a : tensor_arg_)
      is_tensor[size_t(a)] = true;
    for (size_t a = 0; a < num_args_; ++a)
      TG_CHECK(is_tensor[a] || !res[a].defined(), name(),
               ": backward returned a "
               "defined gradient for non-tensor argument ",
               a, "; return Tensor() there");
  }
  if (once_differentiable_ && is_grad_enabled()) {
    // Under create_graph the gradients depend on the incoming gradients and,
    // through the saved tensors, on the forward inputs: give them a history
    // that leads there and fails when differentiated.
    auto err = std::make_shared<DelayedError>(name(), hint_);
    edge_list edges;
    for (const Tensor& g : incoming)
      edges.push_back(impl::gradient_edge(g));
    for (const Edge& e : next_edges())
      edges.push_back(e);
    err->set_next_edges(std::move(edges));
    for (Tensor& g : out) {
      if (!g.defined()) continue;
      g = raw::detach(g);
      AutogradMeta& m = impl::materialize_meta(g);
      m.output_nr = err->add_input_metadata(g);
      m.grad_fn = err;
    }
  }
  return out;
}

void CppNodeBase::release_variables() {
  for (SavedVariable& s : ctx_.saved_)
    s.release();
}

}  // namespace tg::autograd

#include <tapegrad/nn/module.h>
#include "nn/grads.h"
#include "tensor/kernels.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include <tapegrad/cuda/static_tensor.h>
#include <functional>
#include <map>
#include <ostream>
#include <set>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::nn {

namespace detail {
void throw_empty_holder(const char* impl_name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(impl_name, nullptr, nullptr, &status), std::free);
  throw Error(std::string("an empty module holder of ") + (status == 0 && d ? d.get() : impl_name) +
              " was used: construct it (e.g. nn::Linear fc(2, 64)) or assign a module to it (fc = "
              "register_module(\"fc\", nn::Linear(2, 64))) before calling it");
}
}  // namespace detail

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Tensor Module::forward(const Tensor&) {
  TG_ERROR(type_name_, ": this module has no forward(const Tensor&); call its own methods");
}

void Module::check_new_name(const std::string& name) const {
  TG_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_,
           ": a parameter, buffer or submodule name must be non-empty and contain no '.', got '", name, "'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  TG_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), type_name_, ": the name '", name,
           "' is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name);
  if (t.defined()) {
    if (!t.is_leaf()) t = t.detach();  // a parameter is a leaf
    if (requires_grad || t.requires_grad()) t.requires_grad_(requires_grad);
  }
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  TG_CHECK(m != nullptr, type_name_, ": register_module('", name, "') got a null module");
  check_new_name(name);
  check_not_ancestor(name, *m);
  children_.emplace_back(name, std::move(m));
}

// A module tree must stay a tree (or a DAG of shared submodules): `m` and
// everything below it, walked with an explicit stack (each module once),
// must not contain this module, or every recursive walk (named_parameters,
// train, to, printing) would never end.
void Module::check_not_ancestor(const std::string& name, const Module& m) const {
  std::vector<std::pair<const Module*, std::string>> todo = {{&m, name}};
  std::set<const Module*> seen;
  while (!todo.empty()) {
    auto [cur, path] = std::move(todo.back());
    todo.pop_back();
    TG_CHECK(cur != this, type_name_, ": registering the ", m.type_name_, " '", name, "' would make this ", type_name_,
             " its own descendant (it is '", path,
             "' below itself); a module cannot contain itself: register a new module, or a child of it, instead");
    if (!seen.insert(cur).second) continue;
    for (const auto& [n, c] : cur->children_)
      todo.emplace_back(c.get(), path + "." + n);
  }
}

namespace {
// own entries under `prefix`, then (recurse) each child's under "prefix.child."
template <class Sub>
void collect(const std::string& prefix, bool recurse, const NamedTensors& own,
             const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& kids, Sub sub, NamedTensors& out) {
  for (const auto& [n, t] : own)
    if (t.defined()) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, c] : kids)
    for (auto& [sn, st] : sub(*c))
      out.emplace_back(prefix + n + "." + sn, st);
}
std::vector<Tensor> values(const NamedTensors& nt) {
  std::vector<Tensor> v;
  v.reserve(nt.size());
  for (const auto& e : nt)
    v.push_back(e.second);
  return v;
}
}  // namespace

// A module's own tensors of one kind (`own`), then its children's by the same
// member function `of`, prefixed with their names.
NamedTensors Module::named_tensors(const NamedTensors& own, NamedTensors (Module::*of)(bool) const,
                                   bool recurse) const {
  NamedTensors out;
  collect(
      "", recurse, own, children_, [of](const Module& c) { return (c.*of)(true); }, out);
  return out;
}
NamedTensors Module::named_parameters(bool recurse) const {
  return named_tensors(params_, &Module::named_parameters, recurse);
}
std::vector<Tensor> Module::parameters(bool recurse) const { return values(named_parameters(recurse)); }
NamedTensors Module::named_buffers(bool recurse) const {
  return named_tensors(buffers_, &Module::named_buffers, recurse);
}
std::vector<Tensor> Module::buffers(bool recurse) const { return values(named_buffers(recurse)); }
std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }
std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> v;
  for (const auto& c : children_)
    v.push_back(c.second);
  return v;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  for (const auto& [n, c] : children_) {
    out.emplace_back(n, c);
    for (auto& [sn, sc] : c->named_modules())
      out.emplace_back(n + "." + sn, sc);
  }
  return out;
}

namespace {
void print(std::ostream& os, const Module& m, int indent) {
  os << m.extra_repr();
  auto kids = m.named_children();
  if (kids.empty()) return;
  os << " (\n";
  for (const auto& [n, c] : kids) {
    os << std::string(size_t(indent + 2), ' ') << "(" << n << "): ";
    print(os, *c, indent + 2);
    os << "\n";
  }
  os << std::string(size_t(indent), ' ') << ")";
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Module& m) {
  print(os, m, 0);
  return os;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_)
    c.second->train(on);
}

template <class F> void Module::for_each_tensor(F&& f) {
  for (auto& e : params_)
    f(e.second, true);
  for (auto& e : buffers_)
    f(e.second, false);
  for (auto& c : children_)
    c.second->for_each_tensor(f);
}

namespace {
// t takes the data of `converted` in place; its gradient follows.
void move_in_place(const Tensor& t, const std::function<Tensor(const Tensor&)>& convert) {
  if (!t.defined()) return;
  autograd::NoGradGuard no_grad;
  Tensor c = convert(t.detach());
  if (c.impl() != t.impl()) {
    cuda::detail::check_static_may_move(t, "Module::to", "the data");
    t.impl()->set_data(*c.impl());
  }
  if ((t.is_leaf() || t.retains_grad()) && t.grad().defined()) {  // a non-leaf has no .grad()
    Tensor g = convert(t.grad());
    if (g.impl() != t.grad().impl()) t.grad().impl()->set_data(*g.impl());
  }
}
}  // namespace

void Module::to(Device device) {
  for_each_tensor([&](const Tensor& t, bool) { move_in_place(t, [&](const Tensor& x) { return x.to(device); }); });
}

void Module::to(ScalarType dtype) {
  TG_CHECK(is_floating_point(dtype), type_name_, ".to: modules convert to floating-point dtypes, got ", dtype);
  // Complex tensors become the complex dtype of `dtype` (as PyTorch's
  // module.double() makes Complex128 of Complex64).
  for_each_tensor([&](const Tensor& t, bool) {
    if (t.defined() && t.is_floating_point()) move_in_place(t, [&](const Tensor& x) { return x.to(dtype); });
    else if (t.defined() && is_complex(t.dtype()))
      move_in_place(t, [&](const Tensor& x) { return x.to(complex_type(dtype)); });
  });
}

namespace detail {
void zero_grads(const std::vector<Tensor>& params, bool set_to_none) {
  if (set_to_none) {
    for (const Tensor& p : params)
      if (p.grad().defined()) cuda::detail::check_static_may_move(p, "zero_grad(set_to_none=true)", "the .grad");
    for (const Tensor& p : params)
      p.mutable_grad() = Tensor();
    return;
  }
  autograd::NoGradGuard no_grad;
  // Dense gradients on one CUDA device: one multi-tensor launch (no host
  // sync, capturable); the rest one by one.
  std::vector<Tensor> fused;
  const kernels::Backend* cuda = nullptr;
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (g.is_cuda() && !g.is_sparse() && g.is_contiguous() && (fused.empty() || fused[0].device() == g.device())) {
      if (!cuda) cuda = &kernels::backend(g.device(), "zero_grad");
      if (cuda->multi_tensor_zero) {
        fused.push_back(g);
        continue;
      }
    }
    g.zero_();
  }
  if (!fused.empty()) cuda->multi_tensor_zero(fused);
}
}  // namespace detail

void Module::zero_grad(bool set_to_none) { detail::zero_grads(parameters(), set_to_none); }

NamedTensors Module::state_dict() const {
  NamedTensors out;
  for (auto& [n, t] : named_parameters())
    out.emplace_back(n, t.detach());
  for (auto& [n, t] : named_buffers())
    out.emplace_back(n, t.detach());
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors mine = named_parameters();
  for (auto& e : named_buffers())
    mine.push_back(e);
  std::map<std::string, const Tensor*> given;  // the state by name
  for (const auto& e : state)
    TG_CHECK(given.emplace(e.first, &e.second).second, type_name_, ".load_state_dict: the key '", e.first,
             "' appears twice");
  std::vector<std::string> missing, unexpected;
  std::vector<std::pair<Tensor, const Tensor*>> loads;  // (ours, the state's)
  std::set<std::string> known;
  for (const auto& [n, t] : mine) {
    known.insert(n);
    auto it = given.find(n);
    if (it == given.end()) {
      missing.push_back(n);
      continue;
    }
    const Tensor& src = *it->second;
    TG_CHECK(src.defined(), type_name_, ".load_state_dict: '", n, "' is an undefined tensor");
    TG_CHECK(src.sizes() == t.sizes(), type_name_, ".load_state_dict: size mismatch for '", n, "': the module has ",
             t.sizes(), ", the state ", src.sizes());
    loads.emplace_back(t, &src);
  }
  for (const auto& e : state)
    if (!known.count(e.first)) unexpected.push_back(e.first);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string msg;
    for (const auto& m : missing)
      msg += (msg.empty() ? "" : ", ") + std::string("missing '") + m + "'";
    for (const auto& u : unexpected)
      msg += (msg.empty() ? "" : ", ") + std::string("unexpected '") + u + "'";
    TG_ERROR(type_name_, ".load_state_dict: the keys do not match (", msg,
             "); pass strict = false to load the matching ones");
  }
  autograd::NoGradGuard no_grad;
  for (const auto& [t, src] : loads)
    t.copy_(src->to(t.device()).to(t.dtype()));
}

}  // namespace tg::nn

// The raw forms of the composite ops (tensor/composite.h).
#include "tensor/composite.h"

namespace tg::raw {

using detail::RawOps;

Tensor max(const Tensor& self) { return raw::amax(self); }
Tensor min(const Tensor& self) { return raw::amin(self); }
TensorPair max(const Tensor& self, int64_t dim, bool keepdim) {
  return detail::extreme_dim<RawOps>(self, dim, keepdim, true, "max");
}
TensorPair min(const Tensor& self, int64_t dim, bool keepdim) {
  return detail::extreme_dim<RawOps>(self, dim, keepdim, false, "min");
}
Tensor logsumexp(const Tensor& self, const IntList& dims, bool keepdim) {
  return detail::logsumexp<RawOps>(self, dims, keepdim);
}
Tensor softmax(const Tensor& self, int64_t dim) { return detail::softmax<RawOps>(self, dim); }
Tensor log_softmax(const Tensor& self, int64_t dim) { return detail::log_softmax<RawOps>(self, dim); }
Tensor norm(const Tensor& self, double p, const IntList& dims, bool keepdim) {
  return detail::norm<RawOps>(self, p, dims, keepdim);
}
Tensor sum_to(const Tensor& self, const IntList& shape) { return detail::sum_to<RawOps>(self, shape); }
Tensor dot(const Tensor& self, const Tensor& other) { return detail::dot<RawOps>(self, other); }

}  // namespace tg::raw

// ---- the everyday surface ----------------------------------------------------------
namespace tg::detail {

namespace {
// 'i' for a letter, "..." dim k for a broadcast dim (256 + k from the right).
std::string label_name(int l) {
  if (l < 256) return std::string("label '") + char(l) + "'";
  return "the \"...\" dim " + std::to_string(l - 256) + " from the right";
}
std::string labels_str(const std::vector<int>& labels) {
  std::string s;
  for (int l : labels)
    s += l < 256 ? std::string(1, char(l)) : std::string(".");
  return "\"" + s + "\"";
}
std::string sizes_str(const EinsumPlan& plan, const std::vector<int>& labels) {
  IntList s;
  for (int l : labels)
    s.push_back(plan.size.at(l));
  return shape_str(s);
}
}  // namespace

EinsumPlan einsum_parse(const std::string& equation, const std::vector<Tensor>& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char c : lhs)
    if (c == ',') terms.emplace_back();
    else terms.back() += c;
  TG_CHECK(!operands.empty(), "einsum: no operands for \"", equation, "\"");
  TG_CHECK(terms.size() == operands.size(), "einsum: \"", equation, "\" names ", terms.size(), " operands, got ",
           operands.size());
  EinsumPlan plan;
  int64_t ellipsis_dims = 0;
  // Letters and one "..." per term; the rest is an error.
  auto labels_of = [&](const std::string& term, int64_t ndim, int64_t index, std::vector<int>& out) {
    const size_t dots = term.find("...");
    TG_CHECK(dots == std::string::npos || term.find("...", dots + 1) == std::string::npos, "einsum: \"", term,
             "\" has more than one \"...\"");
    int64_t letters = 0;
    for (size_t k = 0; k < term.size(); ++k) {
      if (dots != std::string::npos && k >= dots && k < dots + 3) continue;
      TG_CHECK(std::isalpha(static_cast<unsigned char>(term[k])), "einsum: invalid character '", term[k], "' in \"",
               equation, "\"; labels are letters, with \"...\" for broadcast dims");
      ++letters;
    }
    const int64_t rest = ndim - letters;
    TG_CHECK(index < 0 || rest == 0 || (dots != std::string::npos && rest > 0), "einsum: operand ", index, " has ",
             ndim, " dims but \"", term, "\" labels ", letters);
    if (index >= 0) ellipsis_dims = std::max(ellipsis_dims, dots == std::string::npos ? 0 : rest);
    for (size_t k = 0; k < term.size(); ++k) {
      if (dots != std::string::npos && k == dots) {
        const int64_t n = index >= 0 ? rest : ellipsis_dims;
        for (int64_t e = n; e > 0; --e)
          out.push_back(256 + int(e - 1));
        k += 2;
      } else {
        out.push_back(term[k]);
      }
    }
  };
  for (size_t i = 0; i < terms.size(); ++i) {
    plan.inputs.emplace_back();
    labels_of(terms[i], operands[i].dim(), int64_t(i), plan.inputs.back().labels);
  }
  std::map<int, int> seen;
  for (const EinsumTerm& t : plan.inputs)
    for (int l : t.labels)
      ++seen[l];
  if (arrow != std::string::npos) {
    const std::string rhs = eq.substr(arrow + 2);
    labels_of(rhs, 0, -1, plan.output);
    for (size_t k = 0; k < plan.output.size(); ++k) {
      const int l = plan.output[k];
      TG_CHECK(seen.count(l), "einsum: output label '", char(l < 256 ? l : '.'), "' of \"", equation,
               "\" is in no operand");
      TG_CHECK(std::count(plan.output.begin(), plan.output.end(), l) == 1, "einsum: output label '", char(l), "' of \"",
               equation, "\" appears twice");
    }
  } else {  // implicit: the "..." dims, then the labels seen once, sorted
    for (int64_t e = ellipsis_dims; e > 0; --e)
      plan.output.push_back(256 + int(e - 1));
    for (auto [l, n] : seen)
      if (l < 256 && n == 1) plan.output.push_back(l);
  }
  // Sizes: a repeated label's within an operand are equal (its diagonal is
  // taken); one label's across operands are equal or 1 (broadcast).
  std::map<int, size_t> first;  // the operand that gave a label its size
  for (size_t i = 0; i < operands.size(); ++i) {
    const std::vector<int>& labels = plan.inputs[i].labels;
    for (size_t k = 0; k < labels.size(); ++k) {
      const int l = labels[k];
      const int64_t have = operands[i].sizes()[k];
      for (size_t j = 0; j < k; ++j)
        TG_CHECK(labels[j] != l || operands[i].sizes()[j] == have, "einsum: ", label_name(l),
                 " is repeated in operand ", i, " of \"", equation, "\" with sizes ", operands[i].sizes()[j], " and ",
                 have, " (shape ", shape_str(operands[i].sizes()),
                 "); a repeated label takes the diagonal, so its sizes must be equal");
      auto [it, fresh] = plan.size.emplace(l, have);
      if (fresh || it->second == have) {
        if (fresh) first[l] = i;
        continue;
      }
      const size_t f = first[l];
      TG_CHECK(it->second == 1 || have == 1, "einsum: ", label_name(l), " of \"", equation, "\" has size ", it->second,
               " in operand ", f, " (shape ", shape_str(operands[f].sizes()), ") but ", have, " in operand ", i,
               " (shape ", shape_str(operands[i].sizes()), "); the sizes of a label must be equal, or 1 to broadcast");
      if (it->second == 1) it->second = have, first[l] = i;
    }
  }
  einsum_numel(plan, plan.output, equation);
  return plan;
}

int64_t einsum_numel(const EinsumPlan& plan, const std::vector<int>& labels, const std::string& equation) {
  int64_t n = 1;
  for (int l : labels) {
    const int64_t s = plan.size.at(l);
    TG_CHECK(!__builtin_mul_overflow(n, s, &n), "einsum: \"", equation, "\" asks for a result (or a product of two ",
             "operands) with labels ", labels_str(labels), " of sizes ", sizes_str(plan, labels),
             ", more elements than fit in 64 bits; contract fewer dims at once");
  }
  return n;
}

}  // namespace tg::detail

namespace tg::raw {

using detail::RawOps;

#define TG_COMPOSITE_F(ret, name, params, args, inputs, formula) \
  ret name params {                                              \
    using O = RawOps;                                            \
    return detail::as_op(#name, [&] { return formula; });        \
  }
#define TG_COMPOSITE(ret, name, params, args, inputs) \
  TG_COMPOSITE_F(ret, name, params, args, inputs, tg::detail::name<O> args)
#include "tensor/composite_ops.def"
#undef TG_COMPOSITE
#undef TG_COMPOSITE_F

// The never-recorded ones (Bool and index results).
Tensor any(const Tensor& self) {
  return detail::as_op("any", [&] { return detail::any_all(self, std::nullopt, false, true, "any"); });
}
Tensor any(const Tensor& self, int64_t dim, bool keepdim) {
  return detail::as_op("any", [&] { return detail::any_all(self, dim, keepdim, true, "any"); });
}
Tensor all(const Tensor& self) {
  return detail::as_op("all", [&] { return detail::any_all(self, std::nullopt, false, false, "all"); });
}
Tensor all(const Tensor& self, int64_t dim, bool keepdim) {
  return detail::as_op("all", [&] { return detail::any_all(self, dim, keepdim, false, "all"); });
}
Tensor argmax(const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return detail::as_op("argmax", [&] { return detail::arg_extreme(self, dim, keepdim, true, "argmax"); });
}
Tensor argmin(const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return detail::as_op("argmin", [&] { return detail::arg_extreme(self, dim, keepdim, false, "argmin"); });
}
Tensor nonzero(const Tensor& self) {
  return detail::as_op("nonzero", [&] { return detail::nonzero_indices(self); });
}

}  // namespace tg::raw

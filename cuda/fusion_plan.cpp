// Which recorded nodes of a captured graph fuse (cuda/fusion.h): plain C++,
// so that the rules are tested without a GPU.
//
// Nodes are grouped in topological order: a recorded node joins the group of
// its dependencies when all of them are in one group of the same dtype and
// element count, the group has room, and its operands are compatible (any
// two operand ranges of the group of which one is written are disjoint or
// the same dense range, so that element i of every step touches only
// element i of memory another step writes). Edges from outside a group only
// enter its first member, so merging each group into one node adds no cycle.
#include "cuda/fusion.h"

namespace tg::cuda::fusion {

namespace {

struct Range {
  const char* begin;
  int64_t bytes;
  bool written;
  bool shared;  // read at the same element by many indices (one element, or periodic)
};

bool compatible(const Range& a, const Range& b) {
  if (!a.written && !b.written) return true;
  if (a.begin + a.bytes <= b.begin || b.begin + b.bytes <= a.begin) return true;
  return a.begin == b.begin && a.bytes == b.bytes && !a.shared && !b.shared;
}

std::vector<Range> ranges_of(const Recorded& r) {
  const int64_t elem = int64_t(element_size(r.dtype));
  std::vector<Range> out;
  for (int o = 0; o < r.step.nops; ++o) {
    const bool scalar = (r.step.scalar >> o) & 1u;
    const int64_t period = o < 4 ? r.step.period[o] : 0;
    const int64_t elems = scalar ? 1 : period > 0 ? period : r.n;
    out.push_back({r.step.ptr[o], elems * elem, o < r.step.nout, scalar || period > 0});
  }
  return out;
}

struct Group {
  std::vector<Range> ranges;
  ScalarType dtype;
  int64_t n;
  size_t size = 0;

  bool can_take(const Recorded& r, const std::vector<Range>& rr) const {
    if (size >= size_t(kMaxSteps) || r.dtype != dtype || r.n != n) return false;
    for (const Range& a : rr)
      for (const Range& b : ranges)
        if (!compatible(a, b)) return false;
    return true;
  }
};

}  // namespace

Plan plan(size_t n, const std::vector<std::pair<size_t, size_t>>& edges,
          const std::vector<const Recorded*>& launch_of) {
  std::vector<std::vector<size_t>> preds(n), succs(n);
  std::vector<size_t> indeg(n, 0);
  for (const auto& [u, v] : edges) {
    preds[v].push_back(u);
    succs[u].push_back(v);
    ++indeg[v];
  }
  std::vector<size_t> order;  // Kahn's
  order.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) order.push_back(i);
  for (size_t h = 0; h < order.size(); ++h)
    for (size_t v : succs[order[h]])
      if (--indeg[v] == 0) order.push_back(v);

  Plan p;
  p.group_of.assign(n, -1);
  std::vector<Group> state;
  for (size_t v : order) {
    if (!launch_of[v]) continue;
    const Recorded& r = *launch_of[v];
    std::vector<Range> rr = ranges_of(r);
    long g = preds[v].empty() ? -1 : p.group_of[preds[v][0]];
    for (size_t u : preds[v])
      if (p.group_of[u] != g) g = -1;
    if (g < 0 || !state[size_t(g)].can_take(r, rr)) {
      g = long(state.size());
      state.push_back(Group{{}, r.dtype, r.n});
      p.groups.emplace_back();
    }
    Group& grp = state[size_t(g)];
    grp.ranges.insert(grp.ranges.end(), rr.begin(), rr.end());
    ++grp.size;
    p.groups[size_t(g)].push_back(v);
    p.group_of[v] = g;
  }
  return p;
}

}  // namespace tg::cuda::fusion

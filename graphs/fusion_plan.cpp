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
// A head (a small product) only starts a group: its output is one dense
// range and its inputs are read by many threads (shared), so no step of its
// group may write them, nor read its output at another element.
#include "graphs/fusion.h"

#include <algorithm>
#include <map>
#include <set>

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
  if (r.head.kind != kNoHead) {  // its output dense, its inputs read by many threads
    out.push_back({r.head.out, r.n * elem, true, false});
    for (int k = 0; k < r.head.nreads && k < kHeadReads; ++k)
      out.push_back({r.head.read_begin[k], r.head.read_bytes[k], false, true});
    if (r.head.written_bytes > 0) out.push_back({r.head.written_begin, r.head.written_bytes, true, true});
    return out;
  }
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

// Longest path, in nodes, over a topological order.
size_t depth(size_t n, const std::vector<size_t>& order, const std::vector<std::vector<size_t>>& succs) {
  std::vector<size_t> d(n, 1);
  size_t best = 0;
  for (size_t v : order) {
    best = std::max(best, d[v]);
    for (size_t w : succs[v])
      d[w] = std::max(d[w], d[v] + 1);
  }
  return best;
}

std::vector<size_t> topological(size_t n, const std::vector<std::pair<size_t, size_t>>& edges,
                                std::vector<std::vector<size_t>>* preds, std::vector<std::vector<size_t>>* succs) {
  preds->assign(n, {});
  succs->assign(n, {});
  std::vector<size_t> indeg(n, 0);
  for (const auto& [u, v] : edges) {
    (*preds)[v].push_back(u);
    (*succs)[u].push_back(v);
    ++indeg[v];
  }
  std::vector<size_t> order;  // Kahn's
  order.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) order.push_back(i);
  for (size_t h = 0; h < order.size(); ++h)
    for (size_t v : (*succs)[order[h]])
      if (--indeg[v] == 0) order.push_back(v);
  return order;
}

// Who last wrote, and who read since, each byte range touched in the
// current epoch: disjoint segments keyed by their first byte.
class Hazards {
 public:
  void clear() { segs_.clear(); }
  // The nodes `v` must follow for access `a`; then records it.
  void touch(size_t v, const Access& a, std::set<size_t>* deps) {
    if (a.bytes <= 0) return;
    const char* b = a.begin;
    const char* e = a.begin + a.bytes;
    split(b);
    split(e);
    const char* cursor = b;
    auto it = segs_.lower_bound(b);
    std::vector<std::map<const char*, Seg>::iterator> hit;
    while (cursor < e) {
      if (it == segs_.end() || it->first > cursor) {  // a gap: a fresh segment
        const char* end = it == segs_.end() ? e : std::min(e, it->first);
        it = segs_.emplace_hint(it, cursor, Seg{end, -1, {}});
      }
      hit.push_back(it);
      cursor = it->second.end;
      ++it;
    }
    for (auto& h : hit) {
      Seg& s = h->second;
      if (s.writer >= 0 && size_t(s.writer) != v) deps->insert(size_t(s.writer));
      if (a.written) {
        for (size_t r : s.readers)
          if (r != v) deps->insert(r);
        s.writer = long(v);
        s.readers.clear();
      } else if (s.readers.empty() || s.readers.back() != v) {
        s.readers.push_back(v);
      }
    }
  }

 private:
  struct Seg {
    const char* end;
    long writer;
    std::vector<size_t> readers;
  };
  void split(const char* p) {
    auto it = segs_.upper_bound(p);
    if (it == segs_.begin()) return;
    --it;
    if (it->first < p && p < it->second.end) {
      Seg tail = it->second;
      it->second.end = p;
      segs_.emplace(p, std::move(tail));
    }
  }
  std::map<const char*, Seg> segs_;
};

}  // namespace

std::vector<Access> accesses_of(const Recorded& r) {
  std::vector<Access> out;
  for (const Range& g : ranges_of(r))
    out.push_back({g.begin, g.bytes, g.written});
  return out;
}

Relaxed relax(size_t n, const std::vector<std::pair<size_t, size_t>>& edges,
              const std::vector<const std::vector<Access>*>& access_of) {
  std::vector<std::vector<size_t>> preds, succs;
  const std::vector<size_t> order = topological(n, edges, &preds, &succs);
  Relaxed out;
  out.depth_before = depth(n, order, succs);
  Hazards hazards;
  long barrier = -1;
  std::set<size_t> frontier;  // nodes of the epoch nothing follows yet
  std::set<std::pair<size_t, size_t>> made;
  auto edge = [&](size_t u, size_t v) {
    if (made.insert({u, v}).second) out.edges.emplace_back(u, v);
    frontier.erase(u);
  };
  for (size_t v : order) {
    if (!access_of[v]) {  // a barrier: after everything so far
      if (frontier.empty() && barrier >= 0) edge(size_t(barrier), v);
      for (size_t u : std::vector<size_t>(frontier.begin(), frontier.end()))
        edge(u, v);
      hazards.clear();
      frontier = {v};
      barrier = long(v);
      continue;
    }
    std::set<size_t> deps;
    for (const Access& a : *access_of[v])
      hazards.touch(v, a, &deps);
    if (deps.empty() && barrier >= 0) deps.insert(size_t(barrier));
    for (size_t u : deps)
      edge(u, v);
    frontier.insert(v);
  }
  std::vector<std::vector<size_t>> p2, s2;
  out.depth_after = depth(n, topological(n, out.edges, &p2, &s2), s2);
  return out;
}

FusionDepths fusion_depths(size_t n, const std::vector<std::pair<size_t, size_t>>& edges,
                           const std::vector<const std::vector<Access>*>& access_of, const Plan& p) {
  FusionDepths d;
  const Relaxed plain = relax(n, edges, access_of);
  d.unfused = std::min(plain.depth_before, plain.depth_after);  // relax_graph keeps the shorter
  // Node v of the merged graph: rep[v]; a group of two or more is one node.
  std::vector<size_t> rep(n);
  std::vector<long> merged_as(p.groups.size(), -1);
  size_t m = 0;
  for (size_t v = 0; v < n; ++v) {
    const long g = p.group_of[v];
    if (g >= 0 && p.groups[size_t(g)].size() > 1) {
      if (merged_as[size_t(g)] < 0) merged_as[size_t(g)] = long(m++);
      rep[v] = size_t(merged_as[size_t(g)]);
    } else {
      rep[v] = m++;
    }
  }
  std::vector<std::vector<Access>> touched(m);
  std::vector<bool> unknown(m, false);
  for (size_t v = 0; v < n; ++v) {
    if (!access_of[v]) unknown[rep[v]] = true;
    else touched[rep[v]].insert(touched[rep[v]].end(), access_of[v]->begin(), access_of[v]->end());
  }
  std::vector<const std::vector<Access>*> merged_access(m);
  for (size_t i = 0; i < m; ++i)
    merged_access[i] = unknown[i] ? nullptr : &touched[i];
  std::set<std::pair<size_t, size_t>> merged_edges;
  for (const auto& [u, v] : edges)
    if (rep[u] != rep[v]) merged_edges.emplace(rep[u], rep[v]);
  const Relaxed fused = relax(m, {merged_edges.begin(), merged_edges.end()}, merged_access);
  d.fused = std::min(fused.depth_before, fused.depth_after);
  return d;
}

Plan plan(size_t n, const std::vector<std::pair<size_t, size_t>>& edges,
          const std::vector<const Recorded*>& launch_of) {
  std::vector<std::vector<size_t>> preds, succs;
  const std::vector<size_t> order = topological(n, edges, &preds, &succs);
  Plan p;
  p.group_of.assign(n, -1);
  std::vector<Group> state;
  for (size_t v : order) {
    if (!launch_of[v]) continue;
    const Recorded& r = *launch_of[v];
    std::vector<Range> rr = ranges_of(r);
    long g = preds[v].empty() || r.head.kind != kNoHead ? -1 : p.group_of[preds[v][0]];  // a head starts one
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

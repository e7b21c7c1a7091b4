// Elementwise fusion of a captured graph (cuda/fusion.h, docs/GRAPHS.md).
//
// Nodes are grouped in topological order: a recorded node joins the group of
// its dependencies when all of them are in one group of the same dtype and
// element count, the group has room, and its operands are compatible (any
// two operand ranges of the group of which one is written are disjoint or
// the same dense range, so that element i of every step touches only
// element i of memory another step writes). Edges from outside a group only
// enter its first member, so merging each group into one node adds no cycle;
// each group of two or more becomes one node of the fused kernel, which
// inherits the members' edges to and from the rest of the graph.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda/check.h"
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
  const int64_t elem = r.dtype == ScalarType::Float64 ? 8 : 4;
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
  std::vector<size_t> members;  // indices into the recorded launches, in order
  std::vector<Range> ranges;
  ScalarType dtype;
  int64_t n;

  bool can_take(const Recorded& r, const std::vector<Range>& rr) const {
    if (members.size() >= size_t(kMaxSteps) || r.dtype != dtype || r.n != n) return false;
    for (const Range& a : rr)
      for (const Range& b : ranges)
        if (!compatible(a, b)) return false;
    return true;
  }
};

bool same_edge(const cudaGraphEdgeData& a, const cudaGraphEdgeData& b) {
  return a.from_port == b.from_port && a.to_port == b.to_port && a.type == b.type;
}

}  // namespace

size_t fuse(void* graph_handle, const std::vector<Recorded>& launches) {
  cudaGraph_t graph = static_cast<cudaGraph_t>(graph_handle);
  const char* op = "capture_end (fusing elementwise kernels)";
  size_t nn = 0, ne = 0;
  TG_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nn), op);
  std::vector<cudaGraphNode_t> nodes(nn);
  if (nn) TG_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &nn), op);
  TG_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &ne), op);
  std::vector<cudaGraphNode_t> from(ne), to(ne);
  std::vector<cudaGraphEdgeData> data(ne);
  if (ne) TG_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &ne), op);

  std::unordered_map<cudaGraphNode_t, size_t> index;
  for (size_t i = 0; i < nn; ++i) index[nodes[i]] = i;
  std::vector<long> launch_of(nn, -1);
  for (size_t k = 0; k < launches.size(); ++k) {
    auto it = index.find(static_cast<cudaGraphNode_t>(launches[k].node));
    if (it != index.end()) launch_of[it->second] = long(k);
  }

  // Kahn's order over the nodes.
  std::vector<std::vector<size_t>> preds(nn), succs(nn);
  std::vector<size_t> indeg(nn, 0);
  for (size_t e = 0; e < ne; ++e) {
    const size_t u = index.at(from[e]), v = index.at(to[e]);
    preds[v].push_back(u);
    succs[u].push_back(v);
    ++indeg[v];
  }
  std::vector<size_t> order;
  order.reserve(nn);
  for (size_t i = 0; i < nn; ++i)
    if (indeg[i] == 0) order.push_back(i);
  for (size_t h = 0; h < order.size(); ++h)
    for (size_t v : succs[order[h]])
      if (--indeg[v] == 0) order.push_back(v);

  std::vector<Group> groups;
  std::vector<long> group_of(nn, -1);
  for (size_t v : order) {
    if (launch_of[v] < 0) continue;
    const Recorded& r = launches[size_t(launch_of[v])];
    std::vector<Range> rr = ranges_of(r);
    long g = preds[v].empty() ? -1 : group_of[preds[v][0]];
    for (size_t u : preds[v])
      if (group_of[u] != g) g = -1;
    if (g < 0 || !groups[size_t(g)].can_take(r, rr)) {
      g = long(groups.size());
      groups.push_back(Group{{}, {}, r.dtype, r.n});
    }
    Group& grp = groups[size_t(g)];
    grp.members.push_back(size_t(launch_of[v]));
    grp.ranges.insert(grp.ranges.end(), rr.begin(), rr.end());
    group_of[v] = g;
  }

  // One fused node per group of two or more; nothing is edited before every
  // node is made.
  std::vector<cudaGraphNode_t> fused(groups.size(), nullptr);
  for (size_t g = 0; g < groups.size(); ++g) {
    const Group& grp = groups[g];
    if (grp.members.size() < 2) continue;
    Program prog;
    prog.n = grp.n;
    prog.nsteps = int(grp.members.size());
    for (size_t s = 0; s < grp.members.size(); ++s) prog.steps[s] = launches[grp.members[s]].step;
    cudaKernelNodeParams kp{};
    unsigned grid = 0, block = 0;
    kp.func = const_cast<void*>(fused_kernel(grp.dtype, grp.n, &grid, &block));
    kp.gridDim = dim3(grid);
    kp.blockDim = dim3(block);
    void* args[1] = {&prog};
    kp.kernelParams = args;
    cudaError_t err = cudaGraphAddKernelNode(&fused[g], graph, nullptr, 0, &kp);
    if (err != cudaSuccess) {
      for (size_t h = 0; h < g; ++h)
        if (fused[h]) (void)cudaGraphDestroyNode(fused[h]);
      TG_CUDA_CHECK(err, op);
    }
  }
  auto rep = [&](size_t i) {
    const long g = group_of[i];
    return g >= 0 && fused[size_t(g)] ? fused[size_t(g)] : nodes[i];
  };

  // The edges that touch a fused node, once each (an edge kept in several
  // kinds becomes a full dependency, which every kind of edge implies).
  std::map<std::pair<cudaGraphNode_t, cudaGraphNode_t>, cudaGraphEdgeData> edges;
  for (size_t e = 0; e < ne; ++e) {
    const size_t u = index.at(from[e]), v = index.at(to[e]);
    cudaGraphNode_t a = rep(u), b = rep(v);
    if (a == b || (a == nodes[u] && b == nodes[v])) continue;
    auto [it, fresh] = edges.emplace(std::make_pair(a, b), data[e]);
    if (!fresh && !same_edge(it->second, data[e])) it->second = cudaGraphEdgeData{};
  }
  size_t removed = 0;
  for (size_t i = 0; i < nn; ++i)
    if (rep(i) != nodes[i]) {
      TG_CUDA_CHECK(cudaGraphDestroyNode(nodes[i]), op);
      ++removed;
    }
  std::vector<cudaGraphNode_t> ef, et;
  std::vector<cudaGraphEdgeData> ed;
  for (const auto& [k, d] : edges) {
    ef.push_back(k.first);
    et.push_back(k.second);
    ed.push_back(d);
  }
  if (!ef.empty()) TG_CUDA_CHECK(cudaGraphAddDependencies(graph, ef.data(), et.data(), ed.data(), ef.size()), op);
  size_t added = 0;
  for (cudaGraphNode_t f : fused) added += f != nullptr;
  return removed - added;
}

}  // namespace tg::cuda::fusion

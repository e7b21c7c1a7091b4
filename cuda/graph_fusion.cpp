// Elementwise fusion of a captured graph (cuda/fusion.h, docs/GRAPHS.md):
// the runtime side. fusion::plan (cuda/fusion_plan.cpp) says which nodes
// fuse; each group of two or more becomes one node of the fused kernel,
// which inherits the members' edges to and from the rest of the graph.
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
  std::vector<std::pair<size_t, size_t>> pairs(ne);
  for (size_t e = 0; e < ne; ++e) pairs[e] = {index.at(from[e]), index.at(to[e])};
  std::vector<const Recorded*> launch_of(nn, nullptr);
  for (const Recorded& r : launches) {
    auto it = index.find(static_cast<cudaGraphNode_t>(r.node));
    if (it != index.end()) launch_of[it->second] = &r;
  }
  const Plan p = plan(nn, pairs, launch_of);
  const std::vector<long>& group_of = p.group_of;

  // One fused node per group of two or more; nothing is edited before every
  // node is made.
  std::vector<cudaGraphNode_t> fused(p.groups.size(), nullptr);
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const std::vector<size_t>& members = p.groups[g];
    if (members.size() < 2) continue;
    const Recorded& first = *launch_of[members[0]];
    Program prog;
    prog.n = first.n;
    prog.nsteps = int(members.size());
    for (size_t s = 0; s < members.size(); ++s) prog.steps[s] = launch_of[members[s]]->step;
    cudaKernelNodeParams kp{};
    unsigned grid = 0, block = 0;
    kp.func = const_cast<void*>(fused_kernel(first.dtype, first.n, &grid, &block));
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
    const auto [u, v] = pairs[e];
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

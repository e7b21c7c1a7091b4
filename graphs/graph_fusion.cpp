// Elementwise fusion of a captured graph (cuda/fusion.h, docs/GRAPHS.md):
// the runtime side. fusion::plan (cuda/fusion_plan.cpp) says which nodes
// fuse; each group of two or more becomes one node of the fused kernel,
// which inherits the members' edges to and from the rest of the graph.
#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda/runtime/check.h"
#include "graphs/fusion.h"

namespace tg::cuda::fusion {

namespace {

bool same_edge(const cudaGraphEdgeData& a, const cudaGraphEdgeData& b) {
  return a.from_port == b.from_port && a.to_port == b.to_port && a.type == b.type;
}

// A graph's nodes and edges, the edges also as node index pairs.
struct Snapshot {
  std::vector<cudaGraphNode_t> nodes, from, to;
  std::vector<cudaGraphEdgeData> data;
  std::unordered_map<cudaGraphNode_t, size_t> index;
  std::vector<std::pair<size_t, size_t>> pairs;
};

Snapshot snapshot(cudaGraph_t graph, const char* op) {
  Snapshot g;
  size_t nn = 0, ne = 0;
  TG_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nn), op);
  g.nodes.resize(nn);
  if (nn) TG_CUDA_CHECK(cudaGraphGetNodes(graph, g.nodes.data(), &nn), op);
  TG_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &ne), op);
  g.from.resize(ne);
  g.to.resize(ne);
  g.data.resize(ne);
  if (ne) TG_CUDA_CHECK(cudaGraphGetEdges(graph, g.from.data(), g.to.data(), g.data.data(), &ne), op);
  for (size_t i = 0; i < nn; ++i)
    g.index[g.nodes[i]] = i;
  g.pairs.resize(ne);
  for (size_t e = 0; e < ne; ++e)
    g.pairs[e] = {g.index.at(g.from[e]), g.index.at(g.to[e])};
  return g;
}

}  // namespace

size_t fuse(void* graph_handle, const std::vector<Recorded>& launches,
            std::vector<std::pair<void*, std::vector<void*>>>* merged) {
  cudaGraph_t graph = static_cast<cudaGraph_t>(graph_handle);
  const char* op = "capture_end (fusing elementwise kernels)";
  Snapshot snap = snapshot(graph, op);
  const std::vector<cudaGraphNode_t>& nodes = snap.nodes;
  std::vector<cudaGraphEdgeData>& data = snap.data;
  const std::unordered_map<cudaGraphNode_t, size_t>& index = snap.index;
  const std::vector<std::pair<size_t, size_t>>& pairs = snap.pairs;
  const size_t nn = nodes.size(), ne = pairs.size();
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
    // A head's group: its kernel with the other members as its steps.
    const bool headed = first.head.kind != kNoHead;
    HeadProgram hp;
    Program& prog = hp.program;
    prog.n = first.n;
    const size_t first_step = headed ? 1 : 0;  // a head is its group's kernel, not a step
    prog.nsteps = int(members.size() - first_step);
    for (size_t s = first_step; s < members.size(); ++s)
      prog.steps[s - first_step] = launch_of[members[s]]->step;
    cudaKernelNodeParams kp{};
    void* args[1] = {&prog};
    if (headed) {
      std::memcpy(hp.args, first.head.args, sizeof(hp.args));
      kp.func = const_cast<void*>(head_kernel(first.dtype, first.head.kind));
      kp.gridDim = dim3(first.head.grid[0], first.head.grid[1], first.head.grid[2]);
      kp.blockDim = dim3(first.head.block[0], first.head.block[1], first.head.block[2]);
      args[0] = &hp;
    } else {
      unsigned grid = 0, block = 0;
      kp.func = const_cast<void*>(fused_kernel(first.dtype, first.n, &grid, &block));
      kp.gridDim = dim3(grid);
      kp.blockDim = dim3(block);
    }
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
  for (size_t g = 0; g < fused.size(); ++g) {
    if (!fused[g]) continue;
    ++added;
    if (merged) {
      std::vector<void*> members;
      for (size_t i : p.groups[g])
        members.push_back(nodes[i]);  // destroyed: handles only
      merged->emplace_back(fused[g], std::move(members));
    }
  }
  return removed - added;
}

namespace {

// The memory a memset or a one-dimensional memcpy node touches, or false.
bool copy_accesses(cudaGraphNode_t node, cudaGraphNodeType type, std::vector<Access>* out) {
  if (type == cudaGraphNodeTypeMemset) {
    cudaMemsetParams p{};
    if (cudaGraphMemsetNodeGetParams(node, &p) != cudaSuccess) return false;
    const int64_t row = int64_t(p.width) * p.elementSize;
    const int64_t bytes = p.height <= 1 ? row : int64_t(p.pitch) * int64_t(p.height - 1) + row;
    out->push_back({static_cast<const char*>(p.dst), bytes, true});
    return true;
  }
  if (type == cudaGraphNodeTypeMemcpy) {
    cudaMemcpy3DParms p{};
    if (cudaGraphMemcpyNodeGetParams(node, &p) != cudaSuccess) return false;
    if (p.srcArray || p.dstArray || p.extent.height > 1 || p.extent.depth > 1 || p.srcPos.y || p.srcPos.z ||
        p.dstPos.y || p.dstPos.z)
      return false;
    const int64_t bytes = int64_t(p.extent.width);
    out->push_back({static_cast<const char*>(p.srcPtr.ptr) + p.srcPos.x, bytes, false});
    out->push_back({static_cast<const char*>(p.dstPtr.ptr) + p.dstPos.x, bytes, true});
    return true;
  }
  return type == cudaGraphNodeTypeEmpty;  // orders, touches nothing
}

// The accesses of each node of `g`: those given, or those of a memset,
// 1-D memcpy or empty node (kept in `own`), or null (unknown).
std::vector<const std::vector<Access>*> accesses_in(const Snapshot& g, const std::vector<cudaGraphNodeType>& type,
                                                    const std::vector<std::pair<void*, std::vector<Access>>>& accesses,
                                                    std::vector<std::vector<Access>>* own) {
  const size_t nn = g.nodes.size();
  own->assign(nn, {});
  std::vector<const std::vector<Access>*> access_of(nn, nullptr);
  for (const auto& [node, acc] : accesses) {
    auto it = g.index.find(static_cast<cudaGraphNode_t>(node));
    if (it != g.index.end()) access_of[it->second] = &acc;
  }
  for (size_t i = 0; i < nn; ++i) {
    if (access_of[i]) continue;
    if (copy_accesses(g.nodes[i], type[i], &(*own)[i])) access_of[i] = &(*own)[i];
    (void)cudaGetLastError();
  }
  return access_of;
}

std::vector<cudaGraphNodeType> types_of(const Snapshot& g, const char* op) {
  std::vector<cudaGraphNodeType> type(g.nodes.size());
  for (size_t i = 0; i < type.size(); ++i)
    TG_CUDA_CHECK(cudaGraphNodeGetType(g.nodes[i], &type[i]), op);
  return type;
}

}  // namespace

bool fusion_shortens(void* graph_handle, const std::vector<Recorded>& launches,
                     const std::vector<std::pair<void*, std::vector<Access>>>& accesses) {
  const char* op = "capture_end (planning fusion)";
  const Snapshot snap = snapshot(static_cast<cudaGraph_t>(graph_handle), op);
  const size_t nn = snap.nodes.size();
  std::vector<const Recorded*> launch_of(nn, nullptr);
  for (const Recorded& r : launches) {
    auto it = snap.index.find(static_cast<cudaGraphNode_t>(r.node));
    if (it != snap.index.end()) launch_of[it->second] = &r;
  }
  std::vector<std::vector<Access>> own;
  const std::vector<const std::vector<Access>*> access_of = accesses_in(snap, types_of(snap, op), accesses, &own);
  const FusionDepths d = fusion_depths(nn, snap.pairs, access_of, plan(nn, snap.pairs, launch_of));
  return d.fused < d.unfused;
}

Relaxed relax_graph(void* graph_handle, const std::vector<std::pair<void*, std::vector<Access>>>& accesses) {
  cudaGraph_t graph = static_cast<cudaGraph_t>(graph_handle);
  const char* op = "capture_end (relaxing dependencies)";
  Snapshot snap = snapshot(graph, op);
  const std::vector<cudaGraphNode_t>& nodes = snap.nodes;
  std::vector<cudaGraphNode_t>& from = snap.from;
  std::vector<cudaGraphNode_t>& to = snap.to;
  std::vector<cudaGraphEdgeData>& data = snap.data;
  const std::vector<std::pair<size_t, size_t>>& pairs = snap.pairs;
  const size_t nn = nodes.size(), ne = pairs.size();
  std::map<std::pair<size_t, size_t>, cudaGraphEdgeData> kept_data;
  for (size_t e = 0; e < ne; ++e) {
    auto [it, fresh] = kept_data.emplace(pairs[e], data[e]);
    if (!fresh && !same_edge(it->second, data[e])) it->second = cudaGraphEdgeData{};  // a full dependency
  }
  // A programmatic edge stays one only between kernel nodes (the runtime
  // refuses to add one that touches a copy); anything else becomes a full
  // dependency, which is stronger.
  const std::vector<cudaGraphNodeType> type = types_of(snap, op);
  for (auto& [k, d] : kept_data)
    if (d.type != cudaGraphDependencyTypeDefault &&
        (type[k.first] != cudaGraphNodeTypeKernel || type[k.second] != cudaGraphNodeTypeKernel))
      d = cudaGraphEdgeData{};
  std::vector<std::vector<Access>> own;
  const std::vector<const std::vector<Access>*> access_of = accesses_in(snap, type, accesses, &own);
  Relaxed r = relax(nn, pairs, access_of);
  if (r.depth_after >= r.depth_before) {  // barriers between branches can serialize: keep the capture's
    r.depth_after = r.depth_before;
    return r;
  }
  std::vector<cudaGraphNode_t> ef, et;
  std::vector<cudaGraphEdgeData> ed;
  for (const auto& [u, v] : r.edges) {
    ef.push_back(nodes[u]);
    et.push_back(nodes[v]);
    auto it = kept_data.find({u, v});
    ed.push_back(it != kept_data.end() ? it->second : cudaGraphEdgeData{});
  }
  if (ne) TG_CUDA_CHECK(cudaGraphRemoveDependencies(graph, from.data(), to.data(), data.data(), ne), op);
  cudaError_t err =
      ef.empty() ? cudaSuccess : cudaGraphAddDependencies(graph, ef.data(), et.data(), ed.data(), ef.size());
  if (err != cudaSuccess) {  // the runtime refuses an edge: keep the capture's edges
    (void)cudaGetLastError();
    size_t now = 0;
    TG_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &now), op);
    std::vector<cudaGraphNode_t> nf(now), nt(now);
    std::vector<cudaGraphEdgeData> nd(now);
    if (now) {
      TG_CUDA_CHECK(cudaGraphGetEdges(graph, nf.data(), nt.data(), nd.data(), &now), op);
      TG_CUDA_CHECK(cudaGraphRemoveDependencies(graph, nf.data(), nt.data(), nd.data(), now), op);
    }
    std::vector<cudaGraphNode_t> of, ot;
    std::vector<cudaGraphEdgeData> od;
    for (const auto& [k, d] : kept_data) {
      of.push_back(nodes[k.first]);
      ot.push_back(nodes[k.second]);
      od.push_back(d);
    }
    if (!of.empty()) TG_CUDA_CHECK(cudaGraphAddDependencies(graph, of.data(), ot.data(), od.data(), of.size()), op);
    r.depth_after = r.depth_before;
  }
  return r;
}

}  // namespace tg::cuda::fusion

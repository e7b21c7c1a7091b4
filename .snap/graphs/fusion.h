// Internal: what a captured CUDA graph does with what its launches reported
// (docs/GRAPHS.md, "Fusion" and "Relaxed dependencies"). While a stream
// captures, each launch encoder (cuda/launch.h) reports the nodes its call
// added and the memory they touch, and an elementwise kernel whose operands
// are all dense (or one-element broadcasts) over the same n elements of one
// float dtype its Step. At capture end, chains of such nodes (each depending
// only on nodes of its chain) are replaced by one node of the fused kernel,
// which runs the steps in order for each element: every step still loads its
// inputs and stores its outputs, so values, intermediate buffers and rounding
// are those of the separate kernels. Then the edges are relaxed to those the
// memory accesses need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/launch.h"

namespace tg::cuda::fusion {

// The nodes one call added to a capture (a cuBLAS GEMM and its split-K
// reduction, a two-pass reduction, a strided elementwise kernel) and every
// byte they touch, temporaries included.
struct Region {
  std::vector<void*> nodes;
  std::vector<Access> accesses;
};

// The memory a recorded step touches.
std::vector<Access> accesses_of(const Recorded& r);

// What a capture recorded (owned by its CUDAGraph).
struct Log {
  std::vector<Recorded> launches;
  std::vector<Region> regions;
};

// Which nodes fuse (no CUDA involved; graphs/fusion_plan.cpp). Nodes are
// 0..n-1, `edges` their dependencies (from, to), `launch_of[v]` the launch
// recorded for node v or null. Groups list their nodes in a topological
// order; a node outside every group has group_of -1.
struct Plan {
  std::vector<long> group_of;
  std::vector<std::vector<size_t>> groups;
};
Plan plan(size_t n, const std::vector<std::pair<size_t, size_t>>& edges, const std::vector<const Recorded*>& launch_of);

// Replaces the chains of recorded nodes in `graph` (cudaGraph_t) by fused
// nodes; returns how many nodes the graph lost, and appends each fused node
// with the nodes it replaced to `merged`. Throws when the runtime refuses an
// edit (the graph is then not usable).
size_t fuse(void* graph, const std::vector<Recorded>& launches,
            std::vector<std::pair<void*, std::vector<void*>>>* merged = nullptr);

// Dependency relaxation (no CUDA involved; graphs/fusion_plan.cpp). Stream
// capture orders every node after the previous one on its stream; most of
// those edges only serialize. Given nodes 0..n-1, their `edges`, and for
// each node the memory it touches (`access_of[v]`, or null when unknown),
// returns edges that keep every ordering the memory needs and no other:
// over a topological order, a node with known accesses depends on the last
// writer of what it reads and on the last writer and the readers since of
// what it writes; a node with unknown accesses is a barrier (after
// everything before it, before everything after it).
struct Relaxed {
  std::vector<std::pair<size_t, size_t>> edges;
  size_t depth_before = 0, depth_after = 0;  // nodes on the longest path
};
Relaxed relax(size_t n, const std::vector<std::pair<size_t, size_t>>& edges,
              const std::vector<const std::vector<Access>*>& access_of);

// The longest chain of the graph relaxed as it is, and with the groups of
// `p` (two or more nodes) merged into single nodes that touch what their
// members did (unknown if any member's accesses are) and then relaxed: fusing
// consecutive kernels of independent branches ties the branches together,
// which can make the relaxed chain longer than fusion makes it shorter.
struct FusionDepths {
  size_t fused = 0, unfused = 0;
};
FusionDepths fusion_depths(size_t n, const std::vector<std::pair<size_t, size_t>>& edges,
                           const std::vector<const std::vector<Access>*>& access_of, const Plan& p);

// Whether fusing `graph` (cudaGraph_t) as fuse() would shorten its longest
// chain once relaxed (fusion_depths, with the accesses relax_graph uses).
bool fusion_shortens(void* graph, const std::vector<Recorded>& launches,
                     const std::vector<std::pair<void*, std::vector<Access>>>& accesses);

// Rewrites the edges of `graph` (cudaGraph_t) as relax() says, given the
// accesses of its recorded nodes (cudaGraphNode_t -> accesses); memset and
// 1-D memcpy nodes are read from their parameters, and nodes without memory
// (empty nodes) are free. Edges kept keep their type (programmatic launch);
// new ones are full dependencies; nothing changes unless the longest path
// shrinks (a barrier may serialize branches the capture ran concurrently).
// Returns the longest paths before and after.
Relaxed relax_graph(void* graph, const std::vector<std::pair<void*, std::vector<Access>>>& accesses);

}  // namespace tg::cuda::fusion

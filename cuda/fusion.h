// Internal: elementwise fusion of captured CUDA graphs (docs/GRAPHS.md,
// "Fusion"). While a stream captures, each elementwise kernel whose operands
// are all dense (or one-element broadcasts) over the same n elements of one
// float dtype is recorded as a Step next to the graph node it became. At
// capture end, chains of such nodes (each depending only on nodes of its
// chain) are replaced by one node of the fused kernel, which runs the steps
// in order for each element: every step still loads its inputs and stores
// its outputs, so values, intermediate buffers and rounding are those of the
// separate kernels. Shared between the host (graph.cpp, graph_fusion.cpp)
// and the device (kernels/elementwise.cu): plain data only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <tapegrad/tensor/scalar_type.h>

namespace tg::cuda::fusion {

enum Kind : int8_t {
  kNone = 0,
  kBinary,                 // BinaryFn
  kBinaryScalar,           // BinaryScalarFn
  kAddScaled,              // AddScaledFn
  kUnary,                  // UnaryFn
  kActivationGrad,         // ActivationGradFn
  kActivationGradProduct,  // ActivationGradProductFn
  kCopy,                   // CopyFn, same dtype
  kAddN,                   // add_n: out, a, then the summands
  kMulBackward,            // mul backward: ga, gb, g, a, b
  kFill,                   // FillFn (the value's bits)
};

constexpr int kMaxOperands = 18;  // add_n: out, a and 16 summands
constexpr int kFunctorBytes = 32;
constexpr int kMaxSteps = 16;
// Larger operands keep their own (vectorized) kernels: fusion is for the
// launch-bound sizes.
constexpr int64_t kMaxElements = int64_t(1) << 18;

// One recorded kernel. Operands [0, nout) are written, the rest read; an
// operand whose bit is set in `scalar` is one element read by every index;
// a read operand o < 4 with period[o] > 0 is read at element i % period[o]
// (a bias against rows).
struct Step {
  int8_t kind = kNone;
  int8_t nops = 0;
  int8_t nout = 1;
  uint32_t scalar = 0;
  bool periodic = false;  // some period[o] > 0
  int32_t period[4] = {};
  char* ptr[kMaxOperands] = {};
  alignas(8) unsigned char fn[kFunctorBytes] = {};  // the functor's bytes (functor kinds)
};

// What the fused kernel runs: the steps in order for each of n elements.
struct Program {
  int64_t n = 0;
  int nsteps = 0;
  Step steps[kMaxSteps];
};
static_assert(sizeof(Program) <= 4096, "the fused kernel's argument must fit the classic 4 KiB limit");

// Whether a capture is underway in this process (cheap: launches check it
// before asking the runtime about their stream).
bool captures_underway();

// Records that the kernel just launched on `stream` (function `func`, first
// argument `arg0` of `arg0_bytes` bytes, to verify the node is that launch)
// is `step` over n elements of `dtype`, when the stream captures into a
// CUDAGraph. Never throws; a launch it cannot attribute stays unfused.
void record(void* stream, const void* func, const void* arg0, size_t arg0_bytes, ScalarType dtype,
            int64_t n, const Step& step);

// The fused kernel for a dtype (Float32, Float64), as a function pointer
// for cudaKernelNodeParams::func (it takes one Program by value), and its
// launch geometry for n elements.
const void* fused_kernel(ScalarType dtype, int64_t n, unsigned* grid, unsigned* block);

// A recorded launch: the graph node (cudaGraphNode_t) it became.
struct Recorded {
  void* node;
  ScalarType dtype;
  int64_t n;
  Step step;
};

// Memory a recorded node reads or writes: [begin, begin + bytes).
struct Access {
  const char* begin;
  int64_t bytes;
  bool written;
};

// The nodes one call added to a capture (a cuBLAS GEMM and its split-K
// reduction, a two-pass reduction, a strided elementwise kernel) and every
// byte they touch, temporaries included.
struct Region {
  std::vector<void*> nodes;
  std::vector<Access> accesses;
};

// What a capture recorded (owned by its CUDAGraph).
struct Log {
  std::vector<Recorded> launches;
  std::vector<Region> regions;
};

// The memory a recorded launch touches.
std::vector<Access> accesses_of(const Recorded& r);

// Which nodes fuse (no CUDA involved; cuda/fusion_plan.cpp). Nodes are
// 0..n-1, `edges` their dependencies (from, to), `launch_of[v]` the launch
// recorded for node v or null. Groups list their nodes in a topological
// order; a node outside every group has group_of -1.
struct Plan {
  std::vector<long> group_of;
  std::vector<std::vector<size_t>> groups;
};
Plan plan(size_t n, const std::vector<std::pair<size_t, size_t>>& edges,
          const std::vector<const Recorded*>& launch_of);

// Replaces the chains of recorded nodes in `graph` (cudaGraph_t) by fused
// nodes; returns how many nodes the graph lost, and appends each fused node
// with the nodes it replaced to `merged`. Throws when the runtime refuses an
// edit (the graph is then not usable).
size_t fuse(void* graph, const std::vector<Recorded>& launches,
            std::vector<std::pair<void*, std::vector<void*>>>* merged = nullptr);

// Dependency relaxation (no CUDA involved; cuda/fusion_plan.cpp). Stream
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

// Built when the CUDA backend is not: CUDAGraph and Graph say so clearly.
#include <tapegrad/cuda/graph.h>

#include <tapegrad/tensor/error.h>
#include "cuda/runtime/stub.h"
#include "graphs/fusion.h"

namespace tg::cuda {

using detail::no_cuda;

struct CUDAGraph::Observer {};
struct CUDAGraph::RngState {};

CUDAGraph::CUDAGraph(bool keep_graph) : keep_graph_(keep_graph) {}
size_t CUDAGraph::reuse_delay() const { return reuse_delay_.value_or(kDefaultReuseDelay); }
CUDAGraph::~CUDAGraph() = default;
void CUDAGraph::capture_begin(MempoolId, CaptureMode) { no_cuda("capture_begin"); }
void CUDAGraph::capture_end() { no_cuda("capture_end"); }
void CUDAGraph::end_capture(bool) {}
void CUDAGraph::instantiate() { no_cuda("instantiate"); }
void CUDAGraph::replay() { no_cuda("replay"); }
void CUDAGraph::reset() {}
void* CUDAGraph::raw_graph() const { no_cuda("raw_graph"); }
void* CUDAGraph::raw_graph_exec() const { no_cuda("raw_graph_exec"); }
void CUDAGraph::debug_dump(const std::string&) const { no_cuda("debug_dump"); }
Graph::Graph(CUDAGraph& graph, MempoolId, std::optional<Stream>, CaptureMode) : graph_(graph), uncaught_(0) {
  no_cuda("Graph");
}
Graph::~Graph() noexcept(false) = default;

}  // namespace tg::cuda

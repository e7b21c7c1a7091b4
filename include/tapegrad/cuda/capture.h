// The capture state every layer may ask about: whether a stream captures,
// the memory pools captures allocate from, and the checks an op makes before
// it does something a capture cannot hold. The CUDA graphs themselves
// (CUDAGraph, the Graph guard, static tensors) are in <tapegrad/cuda/graph.h>;
// the checks that read a tensor (static_in_use) in
// <tapegrad/cuda/static_tensor.h>. This is the CUDA runtime layer, below the
// tensor layer: nothing here names a Tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <tapegrad/cuda/stream.h>

namespace tg::cuda {

/// A memory pool of the caching allocator that captures allocate from: {0, 0}
/// asks for a new private pool; graph_pool_handle() or CUDAGraph::pool() name
/// one to share between graphs (replay them in capture order).
using MempoolId = std::pair<uint64_t, uint64_t>;

/// A fresh pool id for graphs to share.
MempoolId graph_pool_handle();

/// How strictly CUDA forbids unsafe calls while a stream captures (as
/// cudaStreamCaptureMode): Global (any thread's unsafe call fails the
/// capture), ThreadLocal (only this thread's), Relaxed (none are checked).
enum class CaptureMode { Global, ThreadLocal, Relaxed };

/// Whether the current stream of the current device is capturing.
bool is_current_stream_capturing();
/// Whether stream `s` is capturing, or has joined a capture (false for the
/// legacy default stream, which never does).
bool is_stream_capturing(const Stream& s);

namespace detail {
/// Throws a tg::Error naming `op` when the current stream of `device` (-1:
/// the current device) is capturing, after ending that capture (so the
/// stream, the allocator and the engine stay usable): for ops that would
/// synchronize with the host or read device memory from it.
void check_not_capturing(const char* op, int device = -1);
/// The same for stream `s`.
void check_not_capturing(const char* op, const Stream& s);
/// For a random draw of `n` values on `device` while its current stream
/// captures: sets `state` to the graph's device-side {seed, offset} and
/// `offset` to the draw's offset from it, and returns true; else false.
bool capture_random(int device, uint64_t n, const int64_t** state, uint64_t* offset);
/// When stream `s` captures into a CUDAGraph, `owner` (memory its captured
/// nodes use, e.g. a pinned host buffer of a copy) stays alive with that
/// graph until reset(), and true is returned; else false.
bool keep_alive_with_capture(const Stream& s, std::shared_ptr<void> owner);
}  // namespace detail

}  // namespace tg::cuda

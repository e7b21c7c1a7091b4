// Memory tapegrad does not own: from_blob, and DLPack, tensors exchanged
// without copies with the libraries that speak it (PyTorch, JAX, CuPy,
// NumPy), on the CPU and on CUDA (docs/INTEROP.md).
// The structs come from <dlpack/dlpack.h> (Debian's libdlpack-dev); this
// header only names them.
#pragma once

#include <optional>

#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/tensor.h>

struct DLManagedTensor;

namespace tg {

/// A tensor viewing memory tapegrad does not own (as torch::from_blob):
/// `data` on `device`, sizes and strides in elements (strides empty:
/// row-major; none negative). `release(context)` runs once when the last
/// tensor or view of it dies (null: the caller keeps the memory valid for
/// as long as tapegrad uses it). On a throw (a negative stride, a device
/// that is not there) release does not run: the memory stays the caller's.
/// The tensor does not require grad.
Tensor from_blob(void* data, const IntList& sizes, const IntList& strides, ScalarType dtype, Device device,
                 void (*release)(void*) = nullptr, void* context = nullptr);

/// A tensor viewing a DLPack producer's memory (no copy). tapegrad takes
/// ownership of `src`: its deleter runs when the last tensor or view of that
/// memory dies (never before, never twice; on a throw it runs at once). Any
/// strides the producer gives (in elements; none: row-major) and byte
/// offsets are kept; negative strides, other devices than the CPU and CUDA
/// (pinned host memory counts as CPU), lanes other than 1 and dtypes
/// tapegrad does not have are refused with a tg::Error naming them. CUDA:
/// when `producer` is given, the current stream of the tensor's device waits
/// (an event, no host sync) for the work queued on it so far — the stream
/// exchange rule, for producers that hand over memory still being written.
/// The tensor does not require grad.
Tensor from_dlpack(DLManagedTensor* src, std::optional<cuda::Stream> producer = std::nullopt);

/// `t` as a DLPack managed tensor viewing its memory (no copy): the
/// consumer calls its deleter once, which releases tapegrad's reference.
/// Dense (strided) tensors only; a tensor that requires grad is refused
/// (detach() first, as PyTorch's __dlpack__). CUDA: when `consumer` is
/// given, it waits (an event, no host sync) for the work queued on `t`'s
/// device's current stream so far, so the consumer may read at once on it.
DLManagedTensor* to_dlpack(const Tensor& t, std::optional<cuda::Stream> consumer = std::nullopt);

}  // namespace tg

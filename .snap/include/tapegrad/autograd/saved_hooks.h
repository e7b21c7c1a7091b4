// Saved-tensor hooks (docs/AUTOGRAD.md "Saved tensors"): a pair (pack,
// unpack) that changes how tensors saved for backward are stored.
//
// Rules:
// - Default hooks form a per-thread stack; SavedTensorHooksGuard pushes a pair
//   for its scope. Only the top pair is used, and it is bound into each saved
//   tensor at save time (later guards do not affect already-saved tensors).
// - pack(t) is called exactly once per saved tensor, when the forward op saves
//   it, under no-grad, on the thread that runs the forward op. It receives the
//   tensor without autograd history (an alias sharing storage) and must not
//   modify it in place (checked: error). It may return any payload.
// - unpack(payload) is called lazily, every time a backward formula reads the
//   saved tensor (once per read; again for each retained-graph backward), on
//   the thread running backward, in the order the engine runs nodes (a node
//   reads its saved tensors in the order of its formula). It must return a
//   tensor with the saved one's shape; dtype and device are restored to the
//   saved tensor's by the engine's cast rules only if equal, so return the
//   same dtype/device (the built-in hooks do).
// - With hooks, the version check is the hook's job (as in PyTorch); without,
//   a saved tensor modified in place is an error at unpack.
// - Hooks run on whichever thread saves or unpacks; a hook shared between
//   threads must be thread-safe. Hooks do not follow work to other threads:
//   each thread has its own stack.
#pragma once

#include <any>
#include <functional>
#include <memory>

#include <tapegrad/tensor/tensor.h>

namespace tg::autograd {

/// Turns a saved tensor into what to keep.
using PackHook = std::function<std::any(const Tensor&)>;
/// Turns it back into the tensor.
using UnpackHook = std::function<Tensor(const std::any&)>;

/// A pack/unpack pair (docs/AUTOGRAD.md "Saved-tensor hooks").
struct SavedTensorHooks {
  PackHook pack;      ///< runs when a tensor is saved; returns what to keep
  UnpackHook unpack;  ///< runs when backward needs it; returns the tensor
};

/// Makes a pack/unpack pair the default for tensors saved in a scope (as torch.autograd.graph.saved_tensors_hooks).
class SavedTensorHooksGuard {
 public:
  /// Pushes the pair; the destructor pops it.
  SavedTensorHooksGuard(PackHook pack, UnpackHook unpack);
  explicit SavedTensorHooksGuard(SavedTensorHooks hooks);  ///< pushes `hooks`
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;
};

/// Pushes a pair on this thread's stack without a guard (for bindings whose
/// push and pop are separate calls, as the C API's); the stack owns it and
/// frees what is left at thread exit.
void push_saved_tensor_hooks(SavedTensorHooks hooks);
/// Pops the pair on top of this thread's stack (none: nothing).
void pop_saved_tensor_hooks();

/// The pair on top of this thread's stack (nullptr when none).
std::shared_ptr<const SavedTensorHooks> current_saved_tensor_hooks();

namespace hooks {
/// Stores floating-point saved tensors as `dtype` (BFloat16 or Float16) and
/// casts back on unpack; other tensors are kept as they are.
SavedTensorHooks cast(ScalarType dtype);
/// Stores saved tensors that live on a GPU in pinned host memory and copies
/// them back on unpack, both copies asynchronous on the current stream (graph
/// nodes under CUDA graph capture, the graph then owning the pinned buffers);
/// CPU tensors are kept as they are (nothing to gain).
SavedTensorHooks offload_to_cpu();
}  // namespace hooks

}  // namespace tg::autograd

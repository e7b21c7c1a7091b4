// The capture checks that read a tensor: whether a static tensor's address
// is in use by a live CUDA graph, and the refusal to move it. They read a
// flag on the TensorImpl (tensor/static_mark.h), so they belong to the
// tensor layer (tensor/tensor_impl.cpp), above the CUDA runtime's capture
// state (<tapegrad/cuda/capture.h>), which knows no Tensor. The graphs
// themselves and register_static are in <tapegrad/cuda/graph.h>, which
// includes this header.
#pragma once

namespace tg {
class Tensor;
}

namespace tg::cuda {

/// Whether `t` is a static tensor (register_static in <tapegrad/cuda/graph.h>)
/// and a live graph recorded its address: a flag on the tensor, read without
/// a lock or a registry lookup.
bool static_in_use(const Tensor& t);

namespace detail {
/// Throws a tg::Error naming `op` and the tensor when `t` is static and a
/// live graph depends on its address (`what` moves: "its data", "the .grad").
void check_static_may_move(const Tensor& t, const char* op, const char* what);
/// The exceptions in flight as libtapegrad_tensor's C++ runtime counts them:
/// std::uncaught_exceptions() there. The libraries must share one C++
/// runtime (a static copy of libstdc++ linked into each would count apart,
/// and the Graph guard would miss an exception thrown by an op); a test
/// compares the two counts.
int tensor_layer_uncaught_exceptions();
}  // namespace detail

}  // namespace tg::cuda

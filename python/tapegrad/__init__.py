"""tapegrad: higher-order automatic differentiation on CPU and CUDA GPUs.

The C++ engine behind a small Python API: tensors that exchange memory with
NumPy, PyTorch and JAX without copies (DLPack), reverse mode to any order
(grad, backward, create_graph), and the functional API (jacobian, hessian,
vjp, jvp, hvp, per_sample_hessian, laplacian). Errors are tapegrad.Error (a
RuntimeError) carrying the C++ message. docs/INTEROP.md has the contract.
"""
from ._C import *  # noqa: F401,F403
from ._C import Error, Tensor, _GradMode, cuda  # noqa: F401

from . import _C as _ext

float32, float64, bfloat16, float16, int64 = "float32", "float64", "bfloat16", "float16", "int64"


def _rebuild_tensor(data, shape, dtype, device, requires_grad):
    """Unpickles a Tensor (Tensor.__reduce__): a Python function, so that
    pickle finds it by name."""
    return _ext._rebuild_tensor(data, shape, dtype, device, requires_grad)
bool_ = "bool"


def no_grad():
    """Context manager: no recording inside (torch.no_grad)."""
    return _GradMode(False)


def enable_grad():
    """Context manager: recording on inside (torch.enable_grad)."""
    return _GradMode(True)


def _register_submodules():
    """Makes `import tapegrad.autograd.forward_ad` (and tapegrad.linalg) work:
    the extension's submodules, importable by name."""
    import collections
    import sys

    UnpackedDualTensor = collections.namedtuple("UnpackedDualTensor", ["primal", "tangent"])

    def unpack_dual(tensor):
        """(primal, tangent) of tensor at the current level (tangent None where
        it has none), as torch.autograd.forward_ad.unpack_dual."""
        return UnpackedDualTensor(*_ext.autograd.forward_ad._unpack_dual(tensor))

    _ext.autograd.forward_ad.unpack_dual = unpack_dual
    _ext.autograd.forward_ad.UnpackedDualTensor = UnpackedDualTensor
    for name, mod in (("autograd", _ext.autograd), ("autograd.forward_ad", _ext.autograd.forward_ad),
                      ("linalg", _ext.linalg), ("cuda", _ext.cuda), ("optim", _ext.optim),
                      ("optim.lr_scheduler", _ext.optim.lr_scheduler)):
        sys.modules[__name__ + "." + name] = mod


_register_submodules()
autograd = _ext.autograd
linalg = _ext.linalg
optim = _ext.optim
from . import nn  # noqa: E402  (after the extension's names)

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

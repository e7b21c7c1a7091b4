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



class dtype(str):
    """A tensor's element type, as torch.dtype (`tapegrad.float32`, `t.dtype`).
    It is its name, a str: it equals "float32", and every argument that
    takes a dtype also takes the name or a NumPy dtype."""
    __slots__ = ()
    _itemsizes = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2, "int64": 8, "bool": 1,
                  "complex64": 8, "complex128": 16}

    @property
    def is_floating_point(self):
        return str(self) in ("float32", "float64", "bfloat16", "float16")

    @property
    def is_complex(self):
        return str(self).startswith("complex")

    @property
    def is_signed(self):
        return str(self) != "bool"

    @property
    def itemsize(self):
        """Bytes per element."""
        return dtype._itemsizes[str(self)]

    def __repr__(self):
        return "tapegrad." + str(self)

    def __reduce__(self):
        return (dtype, (str(self),))


_DTYPES = {n: dtype(n) for n in dtype._itemsizes}
float32, float64, bfloat16, float16, int64 = (_DTYPES[n] for n in ("float32", "float64", "bfloat16", "float16",
                                                                   "int64"))
complex64, complex128 = _DTYPES["complex64"], _DTYPES["complex128"]
float, double, half, long = float32, float64, float16, int64  # torch's aliases
_tensor_dtype = Tensor.dtype
Tensor.dtype = property(lambda self: _DTYPES[_tensor_dtype.fget(self)],
                        doc="The element type (a tapegrad.dtype; equal to its name, \"float32\" ...)")


def _rebuild_tensor(data, shape, dtype, device, requires_grad):
    """Unpickles a Tensor (Tensor.__reduce__): a Python function, so that
    pickle finds it by name."""
    return _ext._rebuild_tensor(data, shape, dtype, device, requires_grad)
bool_ = _DTYPES["bool"]


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

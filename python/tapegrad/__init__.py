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

    def __reduce__(self):  # the module's one object per name (tapegrad.float32 ...)
        return (_dtype_named, (str(self),))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


_DTYPES = {n: dtype(n) for n in dtype._itemsizes}


def _dtype_named(name):
    """tapegrad's dtype object of that name (unpickling keeps `is`)."""
    return _DTYPES[name]
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


def is_tensor(obj):
    """Whether obj is a tapegrad.Tensor (torch.is_tensor)."""
    return isinstance(obj, Tensor)


def from_numpy(array):
    """A tensor viewing a NumPy array's memory, no copy (torch.from_numpy)."""
    return _ext.from_dlpack(array)


def as_tensor(data, dtype=None, device="cpu"):
    """data itself if it is a tensor of that dtype and device, else a tensor
    holding a copy of it (torch.as_tensor's result; NumPy arrays are copied:
    from_numpy shares)."""
    if isinstance(data, Tensor) and (dtype is None or data.dtype == dtype) and data.device == device:
        return data
    if isinstance(data, Tensor):
        out = data.to(device) if data.device != device else data
        return out.to(dtype) if dtype is not None and out.dtype != dtype else out
    return _ext.tensor(data, dtype=dtype, device=device)


def save(obj, f):
    """Pickles obj (tensors, modules, state dicts, dicts of them) into a
    path or a binary file object, as torch.save. Load only what you trust:
    it is pickle."""
    import pickle
    if hasattr(f, "write"):
        pickle.dump(obj, f)
    else:
        with open(f, "wb") as fh:
            pickle.dump(obj, fh)


def load(f):
    """What save wrote (pickle: load only files you trust; the C++
    library's nn::load_safetensors reads untrusted files)."""
    import pickle
    if hasattr(f, "read"):
        return pickle.load(f)
    with open(f, "rb") as fh:
        return pickle.load(fh)


class set_grad_enabled:
    """Recording on or off: as a function call (torch.set_grad_enabled(False))
    and as a context manager restoring the previous mode."""

    def __init__(self, mode):
        self._previous = _ext.is_grad_enabled()
        self._mode = _GradMode(bool(mode))
        self._mode.__enter__()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        return False


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

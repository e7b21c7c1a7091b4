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
import builtins as _builtins  # noqa: E402 (float, bool ... are dtype aliases in this module)



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


def _in_grad_mode(mode, fn):
    """fn run with recording set to mode (the decorator forms below); a
    generator function's body runs in that mode at each resumption, as torch's
    (the caller's mode in between)."""
    import functools
    import inspect

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(*args, **kwargs):
            gen = fn(*args, **kwargs)
            method, arg = gen.send, None
            while True:
                try:
                    with _GradMode(mode):
                        item = method(arg)
                except StopIteration as stop:
                    return stop.value
                try:
                    arg = yield item
                    method = gen.send
                except GeneratorExit:
                    with _GradMode(mode):
                        gen.close()
                    raise
                except BaseException as e:  # noqa: BLE001 (thrown in: into the generator, in the mode)
                    method, arg = gen.throw, e
        return generator

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _GradMode(mode):
            return fn(*args, **kwargs)
    return wrapper


class set_grad_enabled:
    """Recording on or off: as a function call (torch.set_grad_enabled(False)),
    as a context manager restoring the previous mode, and as a decorator
    (@set_grad_enabled(False): the mode inside the function's calls only)."""

    def __init__(self, mode):
        self._previous = _ext.is_grad_enabled()
        self._on = bool(mode)
        self._mode = _GradMode(self._on)
        self._mode.__enter__()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        return False

    def __call__(self, fn):
        self._mode.__exit__(None, None, None)  # as a decorator it changes only the calls' mode
        return _in_grad_mode(self._on, fn)


class _GradModeScope:
    """A recording mode as a context manager (re-entrant) and a decorator,
    with or without parentheses (@no_grad, @no_grad()), as torch's."""
    _on = False

    def __init__(self, fn=None):
        self._scopes = []
        self._fn = _in_grad_mode(self._on, fn) if fn is not None else None

    def __enter__(self):
        scope = _GradMode(self._on)
        scope.__enter__()
        self._scopes.append(scope)

    def __exit__(self, *exc):
        self._scopes.pop().__exit__(*exc)
        return False

    def __call__(self, *args, **kwargs):
        if self._fn is not None:  # @no_grad without parentheses: this is the function
            return self._fn(*args, **kwargs)
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return _in_grad_mode(self._on, args[0])
        raise TypeError("%s(): decorate a function, or use it in a with statement" % type(self).__name__)


class no_grad(_GradModeScope):
    """No recording inside: `with no_grad():`, `@no_grad()` or `@no_grad` (torch.no_grad)."""
    _on = False


class enable_grad(_GradModeScope):
    """Recording on inside: `with enable_grad():` or as a decorator (torch.enable_grad)."""
    _on = True


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


def _make_graphed_callables(callables, sample_args, num_warmup_iters=3, allow_unused_input=False, pool=None, *,
                            max_order=1, max_calls_per_level=16):
    """torch.cuda.make_graphed_callables: each callable (a function of
    tensors, or a tapegrad.nn.Module) has its forward and backward captured
    once as CUDA graphs, replayed on every call, and differentiable as the
    function it replaces. With max_order=k, derivatives up to order k are
    graphed too (a loss built from grad(..., create_graph=True) of the
    outputs can be differentiated: a PINN's residual), which torch's cannot.

    callables: one callable or a tuple of them; sample_args: a tuple of
    tensors per callable (one tuple for one callable). A function returns
    the graphed function; a Module is returned with its forward replaced, as
    torch's: in the training mode it was graphed in (and with grad enabled)
    the call replays, otherwise the original forward runs. Parameters are the
    module's (those that require grad); a function's tensors that need
    gradients must be arguments. Arguments and outputs are CUDA tensors of
    the sample's shapes and dtypes; a call's outputs are fresh tensors, and
    a call must be differentiated before the next call (a stale backward
    raises). allow_unused_input is accepted for torch's signature (unused
    inputs get None gradients here either way)."""
    from . import nn as _nn
    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise Error("make_graphed_callables: %d callables but %d sample argument tuples"
                    % (len(callables), len(sample_args)))
    fns, params, names, samples, singles = [], [], [], [], []
    for c, a in zip(callables, sample_args):
        a = (a,) if isinstance(a, Tensor) else tuple(a)
        is_module = isinstance(c, _nn.Module)
        fwd = c.forward if is_module else c
        if not callable(fwd):
            raise Error("make_graphed_callables: %r is not callable" % (c,))
        one = [True]

        def flat(*args, _fwd=fwd, _one=one):
            r = _fwd(*args)
            _one[0] = isinstance(r, Tensor)
            return r

        fns.append(flat)
        params.append([p for p in c.parameters() if p.requires_grad] if is_module else [])
        names.append(type(c).__name__ if is_module else getattr(c, "__name__", "callable"))
        samples.append(list(a))
        singles.append(one)
    made = _ext.cuda._make_graphed_callables(fns, params, names, samples, max_order, num_warmup_iters, pool,
                                             max_calls_per_level)
    out = []
    for c, g, one in zip(callables, made, singles):
        g._single = one[0]  # the function returned one tensor (known once captured)
        if isinstance(c, _nn.Module):
            orig, mode = c.forward, c.training

            def forward(*args, _g=g, _orig=orig, _m=c, _mode=mode):
                if _m.training == _mode and _ext.is_grad_enabled():
                    return _g(*args)
                return _orig(*args)

            forward.graphed = g  # the GraphedCallable (replays(level))
            object.__setattr__(c, "forward", forward)
            out.append(c)
        else:
            out.append(g)
    return out[0] if single else tuple(out)


def _graphed(fn=None, *, pool=None, max_re_records=8, name=None):
    """A function of CUDA tensors recorded as one CUDA graph per input
    signature and replayed (C++ cuda::graphed; docs/GRAPHS.md "The
    graphed-function cache"): the first call of a signature runs eagerly,
    the second records, later calls replay. Outputs carry no autograd
    history (make_graphed_callables graphs differentiable pieces); they are
    the graph's, copied out if still held when it replays again. Use as
    graphed(fn) or as a decorator, @graphed or @graphed(pool=...); .counters()
    says what it did."""
    def make(f):
        return _ext.cuda.GraphedFunction(f, max_re_records, pool, name or getattr(f, "__name__", "function"))
    return make if fn is None else make(fn)


def _tensor_repr(t):
    """tensor([...], dtype=..., device=..., requires_grad=True), as torch's
    (float32 and int64 and bool without their dtype)."""
    import numpy as _np
    if t.numel() > 1 << 20:  # no host copy of a large tensor for its repr
        return _ext.Tensor.__repr_summary__(t)
    try:
        v = t.detach()
        if v.dtype in (float16, bfloat16):
            v = v.to(float32)
        a = v.to("cpu").numpy()
    except Exception:  # noqa: BLE001 (a dtype NumPy lacks: the summary)
        return _ext.Tensor.__repr_summary__(t)
    body = _np.array2string(a, separator=", ", threshold=1000, edgeitems=3, prefix="tensor(",
                            max_line_width=100)
    extras = []
    if t.dtype not in (float32, int64, bool_):
        extras.append("dtype=%s" % t.dtype)
    if str(t.device) != "cpu":
        extras.append("device='%s'" % t.device)
    if t.requires_grad:
        extras.append("requires_grad=True")
    if 0 in t.shape:
        extras.insert(0, "size=%s" % (tuple(t.shape),))
    return "tensor(%s)" % ", ".join([body] + extras)


_ext.Tensor.__repr_summary__ = _ext.Tensor.__repr__
_ext.Tensor.__repr__ = _tensor_repr
_ext.Tensor.__str__ = _tensor_repr
# torch's dtype shorthands and .data (the same storage, no history).
for _name, _dt in (("float", "float32"), ("double", "float64"), ("half", "float16"), ("bfloat16", "bfloat16"),
                   ("long", "int64"), ("bool", "bool")):
    setattr(_ext.Tensor, _name, (lambda dt: lambda self: self.to(dt))(_dt))
_ext.Tensor.data = property(lambda self: self.detach(), doc="The same storage without autograd history (detach())")


def _named_results():
    """torch.return_types: the tuples of max(dim), sort, topk, ... and of
    tapegrad.linalg's factorizations as named tuples (still tuples: unpacking
    and indexing work as before)."""
    import collections
    import functools

    def wrap(fn, kind):
        @functools.wraps(fn)
        def named(*args, **kwargs):
            r = fn(*args, **kwargs)
            return kind(*r) if isinstance(r, tuple) and len(r) == len(kind._fields) else r
        return named

    values = ("values", "indices")
    for name in ("max", "min", "sort", "topk", "kthvalue", "median"):
        kind = collections.namedtuple(name, values)
        for owner in (_ext, _ext.Tensor):
            if hasattr(owner, name):
                setattr(owner, name, wrap(getattr(owner, name), kind))
        if name in globals():
            globals()[name] = getattr(_ext, name)
    for name, fields in (("eigh", ("eigenvalues", "eigenvectors")), ("qr", ("Q", "R")), ("svd", ("U", "S", "Vh")),
                         ("slogdet", ("sign", "logabsdet")), ("cholesky_ex", ("L", "info")),
                         ("inv_ex", ("inverse", "info")), ("lu_factor", ("LU", "pivots")),
                         ("lu_factor_ex", ("LU", "pivots", "info")), ("solve_ex", ("result", "info")),
                         ("lstsq", ("solution", "residuals", "rank", "singular_values"))):
        if hasattr(_ext.linalg, name):
            setattr(_ext.linalg, name, wrap(getattr(_ext.linalg, name), collections.namedtuple(name, fields)))


_named_results()
# torch.autograd.grad / torch.autograd.backward
_ext.autograd.grad = _ext.grad
_ext.autograd.backward = _ext.backward


class _ParamGroup(dict):
    """One entry of optimizer.param_groups: a dict whose 'lr' writes through to
    the optimizer (for g in opt.param_groups: g['lr'] = x, as with torch)."""

    def __init__(self, opt, index, entries):
        super().__init__(entries)
        self._opt, self._index = opt, index

    def __setitem__(self, key, value):
        if key == "lr":
            lr = _builtins.float(value)
            self._opt.set_lr(lr, self._index)
            super().__setitem__(key, lr)
            return
        raise TypeError("param_groups[%d][%r]: only 'lr' can be set here (tapegrad keeps the other options fixed "
                        "after construction; make the optimizer with them, or add_param_group)" % (self._index, key))

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v


_ext.optim.Optimizer._param_groups_native = _ext.optim.Optimizer.param_groups
_ext.optim.Optimizer.param_groups = property(
    lambda self: [_ParamGroup(self, i, g) for i, g in enumerate(self._param_groups_native)],
    doc="The groups' parameters and options; assigning a group's 'lr' sets the optimizer's rate")
_ext.cuda.make_graphed_callables = _make_graphed_callables
_ext.cuda.graphed = _graphed
_register_submodules()
autograd = _ext.autograd
linalg = _ext.linalg
optim = _ext.optim
from . import nn  # noqa: E402  (after the extension's names)

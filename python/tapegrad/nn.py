"""tapegrad.nn: modules as torch.nn's.

`Module` is PyTorch's: attributes that are modules become submodules,
tensors that require grad (leaves) become parameters, `register_buffer`
adds buffers; `parameters()`, `named_parameters()`, `state_dict()`,
`load_state_dict()`, `train()` / `eval()`, `zero_grad()`, `to()`, and calling
a module runs its `forward`. The layers with parameters or buffers (Linear,
Conv1d/2d/3d, ConvTranspose1d/2d/3d, GroupNorm, LayerNorm, BatchNorm1d/2d/3d,
InstanceNorm1d/2d/3d, Embedding) and Dropout are the C++ layers (LibTorch's
initialization, the C++ forward), their tensors the module's parameters and
buffers; the rest are written over the ops. `tapegrad.nn.functional` has the functional
forms (torch.nn.functional's names).
"""
import collections
import re
import sys
import types

from . import _C

_nn = _C._nn
Tensor = _C.Tensor


def Parameter(data, requires_grad=True):
    """A leaf that requires grad (a module attribute holding one is a
    parameter), as torch.nn.Parameter. A frozen one (requires_grad=False)
    is registered by name: module.register_parameter(name, tensor)."""
    if not requires_grad:
        raise ValueError("tapegrad.nn.Parameter(requires_grad=False): an attribute registers only tensors that "
                         "require grad; use module.register_parameter(name, tensor) for a frozen parameter")
    return data.detach().requires_grad_(True)


_IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _require_module(m, where):
    """m itself, or a TypeError naming `where` when m is not a Module."""
    if not isinstance(m, Module):
        raise TypeError("%s: %r is not a tapegrad.nn.Module" % (where, m))
    return m


def _dtype_name(x):
    """x's dtype name if x names a dtype (a tapegrad dtype, its name, a NumPy dtype or type), else None."""
    try:
        return str(_C.zeros([0], dtype=x).dtype)
    except (TypeError, ValueError, _C.Error):
        return None


class Module:
    """The base of every module (torch.nn.Module)."""

    def __init__(self):
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_modules" not in self.__dict__:
            raise AttributeError("call Module.__init__() before assigning attributes")
        # As torch's: a buffer stays a buffer (m.running = m.running * 0.9 + x),
        # a parameter takes only a parameter (a leaf that requires grad) or None.
        if name in self._buffers and (isinstance(value, Tensor) or value is None):
            if value is None:
                del self._buffers[name]
                object.__setattr__(self, name, None)
            else:
                self._buffers[name] = value
            return
        if name in self._buffers:
            raise TypeError("cannot assign %s as buffer '%s' (a tensor or None expected)" % (type(value).__name__, name))
        if (name in self._parameters and isinstance(value, Tensor)
                and not (value.requires_grad and value.is_leaf)):
            raise TypeError("cannot assign a tensor that is not a parameter (a leaf that requires grad) as parameter "
                            "'%s'; wrap it in tapegrad.nn.Parameter(...) or assign under no_grad with "
                            "m.%s.copy_(value)" % (name, name))
        for d in (self._parameters, self._buffers, self._modules):
            d.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            self._parameters[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for d in ("_parameters", "_buffers", "_modules"):
            table = self.__dict__.get(d, {})
            if name in table:
                return table[name]
        raise AttributeError("'%s' has no attribute '%s'" % (type(self).__name__, name))

    def __delattr__(self, name):
        for d in (self._parameters, self._buffers, self._modules):
            if name in d:
                del d[name]
                return
        object.__delattr__(self, name)

    def register_buffer(self, name, tensor):
        """A tensor saved in the state dict that is not a parameter."""
        self._buffers[name] = tensor

    def register_parameter(self, name, tensor):
        self._parameters[name] = tensor

    def add_module(self, name, module):
        self._modules[name] = module

    def forward(self, *args, **kwargs):
        raise NotImplementedError("%s: define forward()" % type(self).__name__)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def __deepcopy__(self, memo):
        """copy.deepcopy's, submodules first: a C++ layer registers its new
        tensors in memo, so a tensor of it tied elsewhere stays tied."""
        import copy
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        object.__setattr__(new, "_modules", collections.OrderedDict(
            (name, copy.deepcopy(m, memo)) for name, m in self._modules.items()))
        for k, v in self.__dict__.items():
            if k != "_modules":
                object.__setattr__(new, k, copy.deepcopy(v, memo))
        return new

    def named_modules(self, prefix="", memo=None):
        """Every module once (a shared submodule under its first name), as PyTorch's."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(prefix + ("." if prefix else "") + name, memo)

    def modules(self):
        return [m for _, m in self.named_modules()]

    def named_children(self):
        return list(self._modules.items())

    def children(self):
        return list(self._modules.values())

    def _named(self, table, recurse):
        out, seen = [], set()
        for prefix, m in (self.named_modules() if recurse else [("", self)]):
            for name, t in getattr(m, table).items():
                if t is not None and id(t) not in seen:  # a tied tensor once
                    seen.add(id(t))
                    out.append((prefix + ("." if prefix else "") + name, t))
        return out

    def named_parameters(self, recurse=True):
        return self._named("_parameters", recurse)

    def parameters(self, recurse=True):
        return [t for _, t in self.named_parameters(recurse)]

    def named_buffers(self, recurse=True):
        return self._named("_buffers", recurse)

    def buffers(self, recurse=True):
        return [t for _, t in self.named_buffers(recurse)]

    def train(self, mode=True):
        object.__setattr__(self, "training", bool(mode))
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.zero_()

    def state_dict(self):
        """Parameters and buffers by dotted name (detached, sharing memory)."""
        return collections.OrderedDict(
            (n, t.detach()) for n, t in self.named_parameters() + self.named_buffers())

    def load_state_dict(self, state_dict, strict=True):
        """Copies the saved values in (shapes checked; strict: the same names)."""
        own = dict(self.named_parameters() + self.named_buffers())
        missing = [n for n in own if n not in state_dict]
        unexpected = [n for n in state_dict if n not in own]
        if strict and (missing or unexpected):
            raise _C.Error("load_state_dict: missing %s, unexpected %s" % (missing, unexpected))
        # Every entry checked before any is written: a refused dict leaves the module as it was.
        for n, t in own.items():
            if n in state_dict:
                v = state_dict[n]
                if not isinstance(v, Tensor):
                    raise TypeError("load_state_dict: %s is %s; a state dict maps names to tensors"
                                    % (n, type(v).__name__))
                if v.shape != t.shape:
                    raise _C.Error("load_state_dict: %s has shape %s, the saved one %s" % (n, t.shape, v.shape))
        with _C._GradMode(False):
            for n, t in own.items():
                if n in state_dict:
                    t.copy_(state_dict[n])
        return _IncompatibleKeys(missing, unexpected)

    def to(self, *args, **kwargs):
        """Moves or converts every parameter and buffer, as torch's: to("cuda"),
        to("float64") or a NumPy dtype, to(device, dtype), to(tensor),
        to(device=..., dtype=...)."""
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        kwargs.pop("non_blocking", None)  # the copies are made at once either way
        if kwargs:
            raise TypeError("Module.to: unexpected arguments %s" % sorted(kwargs))
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif _dtype_name(a) is not None:
                dtype = a
            else:
                device = a
        name = None if dtype is None else _dtype_name(dtype)
        if dtype is not None and name is None:
            raise TypeError("Module.to: %r is not a dtype" % (dtype,))
        for what in [str(w) for w in (device, name) if w is not None]:
            for m in self.modules():
                m._to_own(what)
        return self

    def float(self):
        """to("float32"), as torch's."""
        return self.to("float32")

    def double(self):
        """to("float64"), as torch's."""
        return self.to("float64")

    def half(self):
        """to("float16"), as torch's."""
        return self.to("float16")

    def cuda(self):
        """to("cuda"), as torch's."""
        return self.to("cuda")

    def cpu(self):
        """to("cpu"), as torch's."""
        return self.to("cpu")

    def apply(self, fn):
        """fn(m) for every submodule, children first, then this module (torch's order)."""
        for m in list(self.children()):
            m.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad=True):
        """Sets requires_grad on every parameter (freezing or unfreezing), as torch's."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def _to_own(self, what):
        for table in (self._parameters, self._buffers):
            for name, t in list(table.items()):
                if t is None:
                    continue
                u = t.detach().to(what)
                table[name] = u.requires_grad_(t.requires_grad) if table is self._parameters else u

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = ["%s(%s" % (type(self).__name__, self.extra_repr())]
        for name, m in self._modules.items():
            lines.append("  (%s): %s" % (name, repr(m).replace("\n", "\n  ")))
        return lines[0] + (")" if len(lines) == 1 else "\n" + "\n".join(lines[1:]) + "\n)")


def _rebuild_native(cls, args, kwargs, state, training, device, dtype, frozen=(), extra=None, added=None):
    """Unpickles a C++ layer: made again with its arguments, moved to its
    device and dtype, given the saved values and requires_grad flags, then
    its Python attributes and the tensors and submodules added to it."""
    m = cls(*args, **kwargs)
    if device is not None:
        m.to(device)
    if dtype is not None:
        m.to(dtype)
    m.load_state_dict(state)
    for name in frozen:
        m._parameters[name].requires_grad_(False)
    if added is not None:
        m._parameters.update(added[0])
        m._buffers.update(added[1])
        m._modules.update(added[2])
    for k, v in (extra or {}).items():
        object.__setattr__(m, k, v)
    return m.train(training)


class _Native(Module):
    """A C++ layer: its parameters and buffers are the module's, its forward
    the C++ one. Pickling and copy.deepcopy make the layer again with the
    arguments it was made with (drawing its initial values anew from the
    generator) and then copy the saved values in."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return

        def recording_init(self, *args, **kw):
            if "_ctor" not in self.__dict__:  # the outermost constructor's arguments
                object.__setattr__(self, "_ctor", (args, kw))
            init(self, *args, **kw)

        recording_init.__doc__, recording_init.__name__ = init.__doc__, "__init__"
        cls.__init__ = recording_init

    def __init__(self, native):
        super().__init__()
        object.__setattr__(self, "_native", native)
        self._sync()

    _OWN = ("_native", "_parameters", "_buffers", "_modules", "_ctor", "training")

    def _native_names(self):
        return {n for n, _ in self._native.named_parameters()} | {n for n, _ in self._native.named_buffers()}

    def __deepcopy__(self, memo):
        """The layer made again with its arguments, moved and given the values
        (requires_grad too), its tensors registered in memo first (so that a
        module tying one of them elsewhere keeps the tie), then the Python
        attributes, extra submodules and tensors copied as copy.deepcopy does."""
        import copy
        args, kw = self.__dict__.get("_ctor", ((), {}))
        new = type(self)(*copy.deepcopy(args, memo), **copy.deepcopy(kw, memo))
        memo[id(self)] = new
        floats = [t for _, t in self.named_parameters(recurse=False) + self.named_buffers(recurse=False)
                  if t.dtype.is_floating_point]
        if floats:
            new.to(floats[0].device)
            new.to(floats[0].dtype)
        own = self._native_names()
        with _C._GradMode(False):
            for table in ("_parameters", "_buffers"):
                mine, theirs = getattr(self, table), getattr(new, table)
                for name, t in mine.items():
                    if name in own and name in theirs:
                        theirs[name].copy_(t)
                        if table == "_parameters":
                            theirs[name].requires_grad_(t.requires_grad)
                        memo[id(t)] = theirs[name]
        for table in ("_parameters", "_buffers"):
            for name, t in getattr(self, table).items():
                if name not in own:
                    getattr(new, table)[name] = copy.deepcopy(t, memo)
        for name, m in self._modules.items():
            new._modules[name] = copy.deepcopy(m, memo)
        new.train(self.training)
        for k, v in self.__dict__.items():
            if k not in _Native._OWN:
                object.__setattr__(new, k, copy.deepcopy(v, memo))
        return new

    def __reduce__(self):
        args, kw = self.__dict__.get("_ctor", ((), {}))
        floats = [t for _, t in self.named_parameters() + self.named_buffers()
                  if t.dtype in ("float32", "float64", "bfloat16", "float16")]
        device = floats[0].device if floats else None
        dtype = floats[0].dtype if floats else None
        frozen = [n for n, p in self._parameters.items() if p is not None and not p.requires_grad]
        extra = {k: v for k, v in self.__dict__.items() if k not in _Native._OWN}
        own = self._native_names()
        added = ({n: t for n, t in self._parameters.items() if n not in own},
                 {n: t for n, t in self._buffers.items() if n not in own}, dict(self._modules))
        state = collections.OrderedDict((n, t) for n, t in self.state_dict().items() if n in own)
        return (_rebuild_native, (type(self), args, kw, state, self.training, device, dtype, frozen, extra, added))

    def __setattr__(self, name, value):
        if name in self._parameters or name in self._buffers:  # the C++ layer computes with its own tensors
            raise AttributeError(
                "%s.%s belongs to the C++ layer and cannot be replaced (nor tied, nor set to None); write into it: "
                "with tapegrad.no_grad(): m.%s.copy_(value)" % (type(self).__name__, name, name))
        super().__setattr__(name, value)

    def _sync(self):
        for name, t in self._native.named_parameters():
            self._parameters[name] = t
        for name, t in self._native.named_buffers():
            self._buffers[name] = t

    def forward(self, x):
        return self._native.forward(x)

    def train(self, mode=True):
        self._native.train(mode)
        return super().train(mode)

    def _to_own(self, what):
        self._native.to(what)
        self._sync()

    def extra_repr(self):
        """The C++ layer's description inside the parentheses, Python's spelling of booleans."""
        r = self._native.extra_repr()
        head = type(self).__name__ + "("
        if r.startswith(head) and r.endswith(")"):
            r = r[len(head):-1]
        return re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", r))


class Linear(_Native):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__(_nn.linear(in_features, out_features, bias))


class _ConvNd(_Native):
    def __init__(self, n, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros"):
        super().__init__(_nn.conv(n, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                                  padding_mode))


class Conv1d(_ConvNd):
    def __init__(self, *args, **kwargs):
        super().__init__(1, *args, **kwargs)


class Conv2d(_ConvNd):
    def __init__(self, *args, **kwargs):
        super().__init__(2, *args, **kwargs)


class Conv3d(_ConvNd):
    def __init__(self, *args, **kwargs):
        super().__init__(3, *args, **kwargs)


class GroupNorm(_Native):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True):
        super().__init__(_nn.group_norm(num_groups, num_channels, eps, affine))


class LayerNorm(_Native):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True):
        super().__init__(_nn.layer_norm(normalized_shape, eps, elementwise_affine))


class Dropout(_Native):
    def __init__(self, p=0.5):
        super().__init__(_nn.dropout(p))


class _ConvTransposeNd(_Native):
    def __init__(self, n, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros"):
        super().__init__(_nn.conv_transpose(n, in_channels, out_channels, kernel_size, stride, padding,
                                            output_padding, groups, bias, dilation, padding_mode))


class ConvTranspose1d(_ConvTransposeNd):
    def __init__(self, *args, **kwargs):
        super().__init__(1, *args, **kwargs)


class ConvTranspose2d(_ConvTransposeNd):
    def __init__(self, *args, **kwargs):
        super().__init__(2, *args, **kwargs)


class ConvTranspose3d(_ConvTransposeNd):
    def __init__(self, *args, **kwargs):
        super().__init__(3, *args, **kwargs)


class _BatchNorm(_Native):
    """Batch statistics in training mode (updating running_mean/var), the
    running ones after eval()."""
    _n = 0

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(_nn.batch_norm(self._n, num_features, eps, momentum, affine, track_running_stats))


class BatchNorm1d(_BatchNorm):
    _n = 1


class BatchNorm2d(_BatchNorm):
    _n = 2


class BatchNorm3d(_BatchNorm):
    _n = 3


class _InstanceNorm(_Native):
    _n = 0

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False):
        super().__init__(_nn.instance_norm(self._n, num_features, eps, momentum, affine, track_running_stats))


class InstanceNorm1d(_InstanceNorm):
    _n = 1


class InstanceNorm2d(_InstanceNorm):
    _n = 2


class InstanceNorm3d(_InstanceNorm):
    _n = 3


class Embedding(_Native):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False):
        if scale_grad_by_freq:
            raise ValueError("Embedding: scale_grad_by_freq is not supported (docs/INTEROP.md)")
        super().__init__(_nn.embedding(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, sparse))


class SpectralConv1d(_Native):
    """The FNO's spectral convolution over the last dim (complex weights)."""

    def __init__(self, in_channels, out_channels, modes):
        super().__init__(_nn.spectral_conv(1, in_channels, out_channels, [modes]))


class SpectralConv2d(_Native):
    """The FNO's spectral convolution over the last two dims (complex weights)."""

    def __init__(self, in_channels, out_channels, modes1, modes2):
        super().__init__(_nn.spectral_conv(2, in_channels, out_channels, [modes1, modes2]))


class FNO(_Native):
    """A Fourier Neural Operator, channels last: [B, (n | h, w), in] -> [B, (n | h, w), out]
    (modes: one count per spatial dim)."""

    def __init__(self, in_channels=1, out_channels=1, width=32, modes=(12, 12), layers=4, projection=128):
        super().__init__(_nn.fno(in_channels, out_channels, width, list(modes), layers, projection))


class UNet2d(_Native):
    """The U-Net of bench/unet_step: [N, in, H, W] -> [N, out, H, W]."""

    def __init__(self, in_channels, out_channels, channels=(32, 64, 128, 256), groups=8):
        super().__init__(_nn.unet2d(in_channels, out_channels, list(channels), groups))


class FourierFeatures(_Native):
    """Random Fourier features: [..., in] -> [sin(2 pi x B), cos(2 pi x B)] [..., 2 m]."""

    def __init__(self, in_features, num_features, sigma=1.0, trainable=False):
        super().__init__(_nn.fourier_features(in_features, num_features, sigma, trainable))


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class Sequential(Module):
    """Modules applied in order (torch.nn.Sequential): positional modules, or
    one OrderedDict of them by name."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], collections.OrderedDict):
            items = list(modules[0].items())
        else:
            items = [(str(i), m) for i, m in enumerate(modules)]
        for name, m in items:
            self._modules[name] = _require_module(m, "Sequential")

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        if isinstance(i, slice):  # a Sequential of the slice, as torch's
            return Sequential(collections.OrderedDict(list(self._modules.items())[i]))
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, m):
        self._modules[str(len(self._modules))] = _require_module(m, "Sequential.append")
        return self


class ModuleDict(Module):
    """Modules by name, in insertion order (torch.nn.ModuleDict)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.update({key: module})

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules):
        for k, m in (modules.items() if hasattr(modules, "items") else modules):
            self.add_module(k, _require_module(m, "ModuleDict"))


class ModuleList(Module):
    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, m):
        self._modules[str(len(self._modules))] = _require_module(m, "ModuleList.append")
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __iadd__(self, modules):
        return self.extend(modules)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ModuleList(list(self._modules.values())[i])
        return list(self._modules.values())[i]

    def __iter__(self):
        return iter(self._modules.values())

    def __len__(self):
        return len(self._modules)


def _elementwise(name, fn, doc):
    def forward(self, x):
        return fn(x)
    return type(name, (Module,), {"forward": forward, "__doc__": doc})


Tanh = _elementwise("Tanh", _C.tanh, "tanh(x)")
Tanhshrink = _elementwise("Tanhshrink", lambda x: x - _C.tanh(x), "x - tanh(x)")
ReLU = _elementwise("ReLU", _C.relu, "max(x, 0)")
SiLU = _elementwise("SiLU", _C.silu, "x sigmoid(x)")
Sigmoid = _elementwise("Sigmoid", _C.sigmoid, "1 / (1 + exp(-x))")


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return _nn.gelu(x, self.approximate)


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        return _C.softplus(x, self.beta, self.threshold)


class ELU(Module):
    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return _nn.elu(x, self.alpha)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return _nn.leaky_relu(x, self.negative_slope)


class Softmax(Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _C.softmax(x, self.dim)


class LogSoftmax(Softmax):
    def forward(self, x):
        return _C.log_softmax(x, self.dim)


class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None):
        super().__init__()
        self.size, self.scale_factor, self.mode, self.align_corners = size, scale_factor, mode, align_corners

    def forward(self, x):
        return functional.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)


def _avg_pool(n):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        Module.__init__(self)
        if n == 1 and divisor_override is not None:
            raise TypeError("AvgPool1d has no divisor_override (as torch.nn.AvgPool1d)")
        self.args = (kernel_size, [] if stride is None else stride, padding, ceil_mode, count_include_pad) + (
            () if n == 1 else (divisor_override,))

    def forward(self, x):
        return getattr(_C, "avg_pool%dd" % n)(x, *self.args)

    return type("AvgPool%dd" % n, (Module,), {"__init__": __init__, "forward": forward,
                                              "__doc__": "torch.nn.AvgPool%dd" % n})


def _max_pool(n):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        Module.__init__(self)
        self.args = (kernel_size, [] if stride is None else stride, padding, dilation, ceil_mode)

    def forward(self, x):
        return getattr(_C, "max_pool%dd" % n)(x, *self.args)

    return type("MaxPool%dd" % n, (Module,), {"__init__": __init__, "forward": forward,
                                              "__doc__": "torch.nn.MaxPool%dd (the values; indices: "
                                                         "tapegrad.nn.functional.max_pool%dd_with_indices)" % (n, n)})


def _adaptive_avg_pool(n):
    def __init__(self, output_size):
        Module.__init__(self)
        self.output_size = output_size

    def forward(self, x):
        return getattr(_C, "adaptive_avg_pool%dd" % n)(x, self.output_size)

    return type("AdaptiveAvgPool%dd" % n, (Module,), {"__init__": __init__, "forward": forward,
                                                      "__doc__": "torch.nn.AdaptiveAvgPool%dd" % n})


AvgPool1d, AvgPool2d, AvgPool3d = (_avg_pool(n) for n in (1, 2, 3))
MaxPool1d, MaxPool2d, MaxPool3d = (_max_pool(n) for n in (1, 2, 3))
AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d = (_adaptive_avg_pool(n) for n in (1, 2, 3))


class PixelShuffle(Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return _C.pixel_shuffle(x, self.upscale_factor)


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x):
        return _C.pixel_unshuffle(x, self.downscale_factor)


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction


class MSELoss(_Loss):
    def forward(self, input, target):
        return _nn.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return _nn.l1_loss(input, target, self.reduction)


class _WeightedLoss(_Loss):
    """A loss with per-class (or per-element) weights: a buffer, as torch's."""

    def __init__(self, weight=None, reduction="mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(weight, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return _nn.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing)


class NLLLoss(_WeightedLoss):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return _nn.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class BCELoss(_WeightedLoss):
    def forward(self, input, target):
        return _nn.binary_cross_entropy(input, target, self.weight, self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(weight, reduction)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return _nn.binary_cross_entropy_with_logits(input, target, self.weight, self.reduction, self.pos_weight)


class SmoothL1Loss(_Loss):
    def __init__(self, reduction="mean", beta=1.0):
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):
        return _nn.smooth_l1_loss(input, target, self.reduction, self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        return _nn.huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(_Loss):
    def __init__(self, reduction="mean", log_target=False):
        super().__init__(reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return _nn.kl_div(input, target, self.reduction, self.log_target)


def _init_module():
    """tapegrad.nn.init: torch.nn.init's in-place initializers (on the tensor, not recorded)."""
    m = types.ModuleType(__name__ + ".init", "torch.nn.init's names")
    for name in ("calculate_gain", "uniform_", "normal_", "constant_", "xavier_uniform_", "xavier_normal_",
                 "kaiming_uniform_", "kaiming_normal_"):
        setattr(m, name, getattr(_nn, name))
    m.zeros_ = lambda tensor: _nn.constant_(tensor, 0.0)
    m.ones_ = lambda tensor: _nn.constant_(tensor, 1.0)
    sys.modules[m.__name__] = m
    return m


def _utils_module():
    """tapegrad.nn.utils: gradient clipping and parameters as one vector."""
    m = types.ModuleType(__name__ + ".utils", "torch.nn.utils's names")
    m.clip_grad_norm_ = _nn.clip_grad_norm_
    m.clip_grad_value_ = _nn.clip_grad_value_

    def parameters_to_vector(parameters):
        """The parameters flattened and concatenated (a new tensor)."""
        return _C.cat([p.reshape(-1) for p in parameters], 0)

    def vector_to_parameters(vec, parameters):
        """Copies consecutive pieces of vec into the parameters (in place, not recorded)."""
        ps = list(parameters)
        total = sum(p.numel() for p in ps)
        if vec.dim() != 1 or vec.shape[0] != total:
            raise _C.Error("vector_to_parameters: vec must be 1-D with %d elements (the parameters'), got %s"
                           % (total, tuple(vec.shape)))
        offset = 0
        with _C._GradMode(False):
            for p in ps:
                n = p.numel()
                p.copy_(vec[offset:offset + n].reshape(*p.shape))
                offset += n

    m.parameters_to_vector = parameters_to_vector
    m.vector_to_parameters = vector_to_parameters
    sys.modules[m.__name__] = m
    return m


init = _init_module()
utils = _utils_module()


def _functional():
    f = types.ModuleType(__name__ + ".functional", "torch.nn.functional's names over tapegrad's ops")
    for name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "linear",
                 "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
                 "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "pad", "unfold", "fold",
                 "pixel_shuffle", "pixel_unshuffle", "group_norm", "batch_norm", "instance_norm", "relu", "silu",
                 "sigmoid", "tanh", "softplus", "softmax", "log_softmax"):
        if hasattr(_C, name):
            setattr(f, name, getattr(_C, name))
    for name in ("mse_loss", "l1_loss", "cross_entropy", "nll_loss", "smooth_l1_loss", "huber_loss",
                 "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "leaky_relu", "elu", "gelu"):
        setattr(f, name, getattr(_nn, name))

    def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
        """torch.nn.functional.interpolate (size or scale_factor: a number or one per spatial dim)."""
        as_list = (lambda v: [] if v is None else (list(v) if isinstance(v, (list, tuple)) else [v]))
        return _C.interpolate(input, as_list(size), [float(s) for s in as_list(scale_factor)], mode, align_corners)

    f.interpolate = interpolate
    sys.modules[f.__name__] = f
    return f


functional = _functional()

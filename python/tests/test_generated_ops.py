"""The bindings generated from the op lists (python/gen_ops.py): every op of
include/tapegrad/tensor/*.def is bound (or left out for a stated reason),
with the C++ names and defaults, and computes what NumPy does."""
import json
import math
import os
import re

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import _C

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "..", "..", "include", "tapegrad", "tensor")
MANIFEST = json.load(open(os.path.join(os.path.dirname(_C.__file__), "ops_manifest.json")))


def listed_names(def_file, pattern):
    return set(re.findall(pattern, open(os.path.join(INCLUDE, def_file)).read(), re.M))


def test_every_listed_op_is_bound_or_left_out_with_a_reason():
    left_out = {i for i, _ in MANIFEST["left_out"]}
    bound = set(MANIFEST["functions"]) | set(MANIFEST["linalg"]) | set(MANIFEST["methods"])
    # The entries written out in the lists (the nested unary and binary
    # lists' names too), read here independently of the generator.
    names = listed_names("ops.def", r"^TG_(?:OP0|OP|FN)\(\s*[^,]+,\s*(\w+),")
    names |= listed_names("unary.def", r"^TG_UNARY\((\w+),")
    names |= listed_names("binary.def", r"^TG_BINARY\((\w+),")
    grid = listed_names("grid.def", r"^TG_GRID\(\s*[^,]+,\s*(\w+),")
    linalg = listed_names("linalg.def", r"^TG_LINALG\(\s*[^,]+,\s*(\w+),")
    assert len(names) > 150 and len(grid) > 30 and len(linalg) > 20
    for n in names | grid:
        assert n in bound or n in left_out, n
    for n in linalg:
        assert n in MANIFEST["linalg"] or n in left_out, n
    # What is bound is there, on the module, tapegrad.linalg and Tensor.
    for n in MANIFEST["functions"]:
        assert hasattr(_C, n), n
    for n in MANIFEST["linalg"]:
        assert hasattr(_C.linalg, n), n
    for n in MANIFEST["methods"]:
        assert callable(getattr(tg.Tensor, n)), n
    # Left out: the autograd accessors (bound by hand) and parameter types
    # Python has no value for; nothing else.
    for i, why in MANIFEST["left_out"]:
        assert why.startswith("an autograd accessor") or why == "type Activation", (i, why)


def test_generated_functions_have_docstrings_and_the_cpp_parameter_names():
    assert "convolution" in _C.conv2d.__doc__
    assert "Cholesky" in _C.linalg.cholesky_ex.__doc__
    x = tg.tensor(np.arange(16.0).reshape(1, 1, 4, 4))
    w = tg.tensor(np.ones((1, 1, 3, 3)))
    y = tg.conv2d(x, w, padding=1, stride=(2, 2))  # keyword arguments, ints for lists
    ref = np.zeros((2, 2))
    xp = np.pad(np.arange(16.0).reshape(4, 4), 1)
    for i in range(2):
        for j in range(2):
            ref[i, j] = xp[2 * i:2 * i + 3, 2 * j:2 * j + 3].sum()
    np.testing.assert_allclose(y.numpy()[0, 0], ref)
    b = tg.tensor(np.array([10.0]))
    np.testing.assert_allclose(tg.conv2d(x, w, b, padding=[1]).numpy()[0, 0, 0, 0], xp[0:3, 0:3].sum() + 10)


def test_generated_ops_match_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    ta, tb = tg.tensor(a), tg.tensor(b)
    np.testing.assert_allclose(tg.add(ta, tb, alpha=2.5).numpy(), a + 2.5 * b)
    np.testing.assert_allclose(ta.sub(tb, 0.5).numpy(), a - 0.5 * b)
    np.testing.assert_allclose(tg.sum(ta, [1], True).numpy(), a.sum(1, keepdims=True))
    np.testing.assert_allclose(ta.amax([0]).numpy(), a.max(0))
    np.testing.assert_allclose(tg.atan2(ta, tb).numpy(), np.arctan2(a, b))
    np.testing.assert_allclose(tg.clamp(ta, -0.5, 0.5).numpy(), np.clip(a, -0.5, 0.5))
    np.testing.assert_allclose(ta.permute([1, 0]).numpy(), a.T)
    np.testing.assert_allclose(tg.cumsum(ta, 1).numpy(), np.cumsum(a, 1))
    np.testing.assert_allclose(tg.logsumexp(ta, [1]).numpy(), np.log(np.exp(a).sum(1)))
    np.testing.assert_allclose(tg.linalg.det(tg.tensor(a[:3, :3])).item(), np.linalg.det(a[:3, :3]))
    u = tg.interpolate(tg.tensor(np.arange(4.0).reshape(1, 1, 2, 2)), scale_factor=[2.0], mode="bilinear",
                       align_corners=False)
    np.testing.assert_allclose(u.numpy()[0, 0, 0], [0.0, 0.25, 0.75, 1.0])
    # dtype and device arguments: a name, a NumPy dtype or type.
    assert ta.to("float32").dtype == "float32"
    assert ta.to(np.float32).dtype == "float32"
    assert ta.to(np.dtype("int64")).dtype == "int64"
    # Tuples of results.
    vals, idx = tg.sort(tb, 1)
    np.testing.assert_allclose(vals.numpy(), np.sort(b, 1))
    np.testing.assert_array_equal(idx.numpy(), np.argsort(b, 1, kind="stable"))


def test_generated_in_place_methods_return_the_same_object_and_storage():
    t = tg.tensor(np.arange(4.0))
    p = t.data_ptr()
    r = t.add_(tg.tensor(np.ones(4)), alpha=2)
    assert r is t and t.data_ptr() == p
    np.testing.assert_allclose(t.numpy(), np.arange(4.0) + 2)
    assert t.mul_(3) is t and t.zero_() is t
    np.testing.assert_allclose(t.numpy(), np.zeros(4))


def test_generated_bindings_refuse_what_the_cpp_refuses():
    t = tg.tensor(np.ones((2, 3)))
    with pytest.raises(tg.Error, match="sum"):
        tg.sum(t, [5])
    with pytest.raises(TypeError):  # a str is no list of ints
        tg.amax(t, "01")
    with pytest.raises(TypeError):  # beyond int64: no overload takes it
        tg.amax(t, [2**70])
    with pytest.raises(TypeError):  # a tensor is no Scalar
        tg.clamp(t, t)
    with pytest.raises(tg.Error, match="unknown dtype"):
        t.to("float7")
    assert tg.sum(t, [1]).shape == (2,)  # still usable


def test_in_place_operators_keep_the_object_and_the_storage():
    t = tg.tensor(np.arange(4.0))
    ident, p = id(t), t.data_ptr()
    t += 1
    t *= tg.tensor(np.full(4, 2.0))
    t -= np.ones(4)
    t /= 2
    assert id(t) == ident and t.data_ptr() == p
    np.testing.assert_allclose(t.numpy(), ((np.arange(4.0) + 1) * 2 - 1) / 2)
    i = tg.tensor(np.arange(3))
    i += 2
    assert i.tolist() == [2, 3, 4]
    with pytest.raises(tg.Error, match="can.t be cast"):
        i += 1.5
    leaf = tg.tensor(np.ones(2), requires_grad=True)
    with pytest.raises(tg.Error):  # in place on a leaf that requires grad, as PyTorch
        leaf += 1


def test_logical_operators_of_bool_tensors():
    a, b = tg.tensor(np.array([True, True, False])), tg.tensor(np.array([True, False, False]))
    assert (a & b).tolist() == [True, False, False]
    assert (a | b).tolist() == [True, True, False]
    assert (a ^ b).tolist() == [False, True, False]
    assert (~a).tolist() == [False, False, True]
    assert (a & True).tolist() == [True, True, False] and (False | b).tolist() == [True, False, False]
    x = tg.tensor(np.array([-1.0, 0.5, 2.0]))
    assert ((x > 0) & (x < 1)).tolist() == [False, True, False]
    with pytest.raises(tg.Error, match="take Bool tensors"):
        tg.tensor(np.arange(3)) & tg.tensor(np.arange(3))


def test_python_number_protocols_size_and_matmul_with_ndarrays():
    t = tg.tensor(np.arange(6.0).reshape(2, 3))
    assert t.size() == (2, 3) and t.size(1) == 3 and t.size(-1) == 3
    assert float(t[1, 2]) == 5.0 and int(tg.tensor(np.array([7.9]))) == 7
    with pytest.raises(tg.Error, match="one-element"):
        float(t)
    np.testing.assert_allclose(abs(-t).numpy(), np.arange(6.0).reshape(2, 3))
    m = np.ones((3, 2))
    np.testing.assert_allclose((t @ m).numpy(), np.arange(6.0).reshape(2, 3) @ m)
    r = m.T @ t.T  # NumPy defers to the tensor (__array_priority__), giving a tensor
    assert isinstance(r, tg.Tensor)
    np.testing.assert_allclose(r.numpy(), m.T @ np.arange(6.0).reshape(2, 3).T)


def test_grad_is_settable_and_resettable():
    w = tg.tensor(np.ones(3), requires_grad=True)
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.ones(3))
    w.grad.zero_()
    np.testing.assert_allclose(w.grad.numpy(), np.zeros(3))
    w.grad = None
    assert w.grad is None
    (w * 3).sum().backward()  # accumulates into a fresh gradient
    np.testing.assert_allclose(w.grad.numpy(), 3 * np.ones(3))
    w.grad = tg.tensor(np.full(3, 5.0))
    np.testing.assert_allclose(w.grad.numpy(), np.full(3, 5.0))
    with pytest.raises(tg.Error, match="must match the tensor"):
        w.grad = tg.tensor(np.ones(2))
    assert w.requires_grad_(False) is not None and not w.requires_grad


def test_advanced_and_negative_step_indexing_as_numpy():
    a = np.arange(24.0).reshape(4, 3, 2)
    t = tg.tensor(a)
    for key in ([2, 0, -1], np.array([[1, 3], [0, 0]]), tg.tensor(np.array([3, -4]))):
        k = key.numpy() if isinstance(key, tg.Tensor) else key
        np.testing.assert_array_equal(t[key].numpy(), a[k])
    mask = a[:, 0, 0] > 5
    np.testing.assert_array_equal(t[tg.tensor(mask)].numpy(), a[mask])
    full = a > 10.5
    np.testing.assert_array_equal(t[tg.tensor(full)].numpy(), a[full])
    np.testing.assert_array_equal(t[t > 10.5].numpy(), a[full])
    for key in (slice(None, None, -1), slice(3, 0, -2), slice(-1, -5, -1), slice(0, 3, -1)):
        np.testing.assert_array_equal(t[key].numpy(), a[key])
    np.testing.assert_array_equal(t[1:, ::-1, 0].numpy(), a[1:, ::-1, 0])
    with pytest.raises(IndexError, match="out of bounds"):
        t[[4]]
    with pytest.raises(IndexError, match="must match the dims of the tensor"):
        t[tg.tensor(np.array([True, False]))]
    with pytest.raises(IndexError, match="Int64 or Bool"):
        t[tg.tensor(np.array([1.0]))]


def test_one_index_tensor_among_basic_keys_as_pytorch():
    a = np.arange(60.0).reshape(3, 4, 5)
    t = tg.tensor(a)
    idx = np.array([[3, 0], [-1, 1]])
    # Where NumPy and PyTorch agree: the index's dims replace the dim it stands for.
    for key in ((slice(None), [2, 0]), (slice(1, None), idx), (Ellipsis, np.array([4, -5])),
                (slice(None), slice(None, None, 2), [1]), (None, slice(None), [0, 3])):
        np.testing.assert_array_equal(t[key].numpy(), a[key], err_msg=str(key))
    np.testing.assert_array_equal(t[:, tg.tensor(np.array([1, 1]))].numpy(), a[:, [1, 1]])
    # Integers select first (PyTorch): t[0, :, idx] is [4, 2], NumPy's a[0, :, idx] is [2, 4].
    np.testing.assert_array_equal(t[0, :, [1, 3]].numpy(), a[0][:, [1, 3]])
    np.testing.assert_array_equal(t[1, [0, 2]].numpy(), a[1, [0, 2]])
    # A Bool mask over the dims from where it stands.
    m = a[0] > 12  # [4, 5]
    np.testing.assert_array_equal(t[:, tg.tensor(m)].numpy(), a[:, m])
    np.testing.assert_array_equal(t[:, m].numpy(), a[:, m])
    row = np.array([True, False, True, True])
    np.testing.assert_array_equal(t[1:, row, ::2].numpy(), a[1:, row, ::2])
    with pytest.raises(IndexError, match="out of bounds for dimension 1"):
        t[:, [4]]
    with pytest.raises(IndexError, match="must match the dims of the tensor"):
        t[:, np.array([True, False])]
    with pytest.raises(TypeError, match="no bools beside"):
        t[True, [0]]


def test_several_index_tensors_as_pytorch():
    a = np.arange(60.0).reshape(3, 4, 5)
    t = tg.tensor(a)
    # Where NumPy and PyTorch agree: the indices broadcast; adjacent ones
    # replace their dims in place, apart ones go first.
    keys = (([0, 2], [1, 3]), ([[0], [2]], [1, 3]), (slice(None), [0, 3], [4, -1]),
            ([2, 0], slice(None), [1, 1]), (np.array([1, 2]), np.array([[0, 3]])),
            (range(2), [0, 1], [2, 3]), (tg.tensor(np.array([-1])), tg.tensor(np.array([-4]))),
            ([], []), (Ellipsis, [0, 1], [1, 2]))
    for key in keys:
        np_key = tuple(k.numpy() if isinstance(k, tg.Tensor) else k for k in key)
        got = t[key].numpy()
        want = a[np_key]
        assert got.shape == want.shape, key
        np.testing.assert_array_equal(got, want, err_msg=str(key))
    m = a[0] > 12  # a Bool mask beside an index: its True positions as indices
    np.testing.assert_array_equal(t[[1] * int(m.sum()), m].numpy(), a[[1] * int(m.sum()), m])
    np.testing.assert_array_equal(t[range(2)].numpy(), a[range(2)])
    # Each index against its own dim: [0, 5] is a flat position in range but 5 is not a column.
    with pytest.raises(tg.Error, match="index 5 is out of bounds for dim 1 of size 4"):
        t[[0], [5]]
    with pytest.raises(tg.Error):
        t[[0, 1], [0, 1, 2]]  # shapes that do not broadcast
    # A 0-d Bool tensor or array is a bool: a new dim of 1 or 0.
    assert t[tg.tensor(True)].shape == (1, 3, 4, 5)
    assert t[np.array(False)].shape == (0, 3, 4, 5)
    # Differentiable, twice.
    w = tg.tensor(np.random.default_rng(0).random((3, 4)), requires_grad=True)
    assert tg.autograd.gradcheck(lambda x: x[[2, 0, 2], [1, 1, 3]] ** 2, (w,))
    assert tg.autograd.gradgradcheck(lambda x: x[[2, 0, 2], [1, 1, 3]] ** 2, (w,))


def test_setitem_writes_through_views():
    a = np.zeros((3, 4))
    t = tg.tensor(a)
    t[1] = 5.0
    t[:, 2] = tg.tensor(np.array([1.0, 2.0, 3.0]))
    t[0, 1:3] = np.array([7.0, 8.0])
    t[2, ...] = tg.tensor(np.array(9.0))  # broadcast
    a[1] = 5.0
    a[:, 2] = [1.0, 2.0, 3.0]
    a[0, 1:3] = [7.0, 8.0]
    a[2, ...] = 9.0
    np.testing.assert_array_equal(t.numpy(), a)
    with pytest.raises(TypeError, match="no negative step"):
        t[::-1] = 1.0
    np.testing.assert_array_equal(t.numpy(), a)


def test_setitem_through_index_tensors_and_masks_as_pytorch():
    a = np.arange(12.0).reshape(3, 4)
    t = tg.tensor(a)
    writes = ((a > 5, 0.0), ([0, 2], 1.5), ((slice(None), [3, 0]), np.array([10.0, 20.0])),
              (([0, 1], [1, 2]), tg.tensor(np.array([7.0, 8.0]))), ((0, [1]), 9.0),
              (np.array([True, False, True]), np.ones(4)), ((slice(None), tg.tensor(np.array([1]))), -1.0),
              ((range(2), 3), 4.0))
    for key, value in writes:
        t[key] = value
        a[key] = value.numpy() if isinstance(value, tg.Tensor) else value
        np.testing.assert_array_equal(t.numpy(), a, err_msg=str(key))
    before = t.numpy().copy()
    with pytest.raises(tg.Error, match="more than once"):  # which write wins would be arbitrary
        t[[0, 0], [1, 1]] = 3.0
    with pytest.raises(tg.Error, match="does not broadcast"):
        t[[0, 1]] = np.ones(3)
    with pytest.raises(tg.Error, match="index 5 is out of range for dim 0 with size 3"):
        t[[5]] = 1.0
    np.testing.assert_array_equal(t.numpy(), before)  # nothing written by the refused ones
    # Differentiable: x[mask] = 0 passes no gradient to the overwritten entries.
    w = tg.tensor(np.random.default_rng(1).random((3, 4)), requires_grad=True)
    z = w * 1.0
    z[z > 0.5] = 0.0
    z.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), (w.detach().numpy() <= 0.5).astype(float))


def test_pickle_and_deepcopy():
    import copy
    import pickle
    t = tg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    for u in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t)):
        assert u.shape == (2, 3) and u.dtype == "float64" and u.requires_grad and u.data_ptr() != t.data_ptr()
        np.testing.assert_array_equal(u.detach().numpy(), t.detach().numpy())
    b = tg.tensor(np.arange(4.0)).to("bfloat16")  # no NumPy dtype: the bytes travel
    assert pickle.loads(pickle.dumps(b)).to("float32").tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(tg.Error, match="graph leaves"):
        copy.deepcopy(t * 2)
    with pytest.raises(tg.Error, match="unpickle: 3 bytes"):
        tg._C._rebuild_tensor(b"abc", [2], "float32", "cpu", False)


def test_forward_ad_and_taylor_levels():
    import tapegrad.autograd.forward_ad as fwad
    x = tg.tensor(np.array([0.3, -1.2, 2.0]))
    v = tg.tensor(np.array([1.0, 2.0, -1.0]))
    assert not fwad.is_active()
    with fwad.dual_level():
        assert fwad.is_active()
        d = fwad.make_dual(x, v)
        y = tg.sin(d) * d
        p, t = fwad.unpack_dual(y)
        np.testing.assert_allclose(p.numpy(), np.sin(x.numpy()) * x.numpy())
        xs = x.numpy()
        np.testing.assert_allclose(t.numpy(), (np.cos(xs) * xs + np.sin(xs)) * v.numpy())
        assert fwad.unpack_dual(x).tangent is None and fwad.unpack_dual(y).primal is not None
    assert not fwad.is_active()
    # Batched: two directions in one pass.
    with fwad.dual_level(2):
        V = tg.tensor(np.array([[1.0, 0, 0], [0, 1.0, 0]]))
        t2 = fwad.unpack_dual(tg.exp(fwad.make_dual(x, V))).tangent
        np.testing.assert_allclose(t2.numpy(), np.exp(xs) * V.numpy())
    # Taylor mode: exp along v to order 3, c_j = exp(x) v^j / j!.
    with fwad.taylor_level(3, 1):
        c1 = tg.tensor(v.numpy()[None])
        out = fwad.jet_coefficients(tg.exp(fwad.make_jet(x, [c1, None, None])))
        for j, c in enumerate(out, 1):
            np.testing.assert_allclose(c.numpy()[0], np.exp(xs) * v.numpy() ** j / math.factorial(j), rtol=1e-12)
    with pytest.raises(tg.Error):
        fwad.make_dual(x, v)  # outside a level
    with fwad.dual_level():
        with pytest.raises(tg.Error):  # one level at a time
            with fwad.dual_level():
                pass


def test_optimizers_step_as_torch_optim():
    import tapegrad.optim as optim
    p0 = np.array([1.0, -2.0, 3.0])
    w = tg.tensor(p0.copy(), requires_grad=True)
    opt = optim.Adam([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()  # the first bias-corrected step: lr * g / (|g| + eps)
    g = 2 * p0
    np.testing.assert_allclose(w.detach().numpy(), p0 - 0.1 * g / (np.abs(g) + 1e-8))
    opt.zero_grad()
    assert w.grad is None and opt.steps == 1
    # SGD with momentum against the recurrence.
    v = tg.tensor(p0.copy(), requires_grad=True)
    sgd = optim.SGD([{"params": [v], "lr": 0.05}], momentum=0.9)
    x, buf = p0.copy(), np.zeros(3)
    for _ in range(3):
        sgd.zero_grad()
        (v * v * v).sum().backward()
        sgd.step()
        gx = 3 * x * x
        buf = gx if not buf.any() else 0.9 * buf + gx
        x = x - 0.05 * buf
    np.testing.assert_allclose(v.detach().numpy(), x, rtol=1e-12)
    assert sgd.param_groups[0]["lr"] == 0.05
    sgd.set_lr(0.01)
    assert sgd.param_groups[0]["lr"] == 0.01
    # Resuming: a restored AdamW takes the step the original would.
    a = tg.tensor(p0.copy(), requires_grad=True)
    b = tg.tensor(p0.copy(), requires_grad=True)
    oa, ob = optim.AdamW([a], lr=0.01), optim.AdamW([b], lr=0.01)
    assert oa.param_groups[0]["weight_decay"] == 1e-2
    for _ in range(2):
        oa.zero_grad()
        (a * a).sum().backward()
        oa.step()
    with tg.no_grad():
        b.copy_(a.detach())
    ob.load_state_dict(oa.state_dict())
    for o, t in ((oa, a), (ob, b)):
        o.zero_grad()
        (t * t).sum().backward()
        o.step()
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    with pytest.raises(tg.Error, match="parameter group"):
        optim.SGD([{"params": [a], "momentumm": 0.9}])


def test_nn_modules_and_a_training_loop_as_pytorch_users_write_it():
    import tapegrad.nn as nn
    import tapegrad.nn.functional as F
    import tapegrad.optim as optim

    class MLP(nn.Module):  # a custom module, as torch.nn's
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh())
            self.head = nn.Linear(16, 1)
            self.scale = nn.Parameter(tg.tensor(np.array([1.0], np.float32)))
            self.register_buffer("offset", tg.tensor(np.array([0.0], np.float32)))

        def forward(self, x):
            return self.head(self.body(x)) * self.scale + self.offset

    tg.manual_seed(0)
    model = MLP()
    names = [n for n, _ in model.named_parameters()]
    assert names == ["scale", "body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias", "head.weight",
                     "head.bias"]
    assert [n for n, _ in model.named_buffers()] == ["offset"]
    w = model.body[0].weight
    bound = 1.0  # LibTorch's init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = 1
    assert w.shape == (16, 1) and float(tg.amax(tg.abs(w.detach()))) <= bound
    x = tg.tensor(np.linspace(-1, 1, 64, dtype=np.float32).reshape(64, 1))  # float32, as the layers
    y = tg.sin(x * 3.0)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.MSELoss()
    first = None
    for _ in range(200):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        first = first or loss.item()
    assert loss.item() < 0.1 * first
    # The state dict restores the model exactly.
    other = MLP()
    other.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(other(x).detach().numpy(), model(x).detach().numpy())
    with pytest.raises(tg.Error, match="missing"):
        other.load_state_dict({"scale": tg.tensor(np.array([2.0], np.float32))})
    # train / eval matter for Dropout.
    d = nn.Dropout(0.5)
    ones = tg.tensor(np.ones(1000))
    assert (d(ones) == 0).any().item()
    d.eval()
    np.testing.assert_array_equal(d(ones).numpy(), np.ones(1000))
    # A C++ layer's forward against the functional form with its weights.
    conv = nn.Conv2d(2, 3, 3, padding=1)
    img = tg.tensor(np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32))
    np.testing.assert_allclose(conv(img).detach().numpy(),
                               F.conv2d(img, conv.weight, conv.bias, padding=[1]).detach().numpy(), rtol=1e-6)
    gn = nn.GroupNorm(1, 3)
    assert [n for n, _ in gn.named_parameters()] == ["weight", "bias"]
    up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
    assert up(img).shape == (1, 2, 10, 10)
    assert nn.AvgPool2d(2)(img).shape == (1, 2, 2, 2)
    assert F.cross_entropy(tg.tensor(np.zeros((2, 4))), tg.tensor(np.array([0, 3]))).item() == pytest.approx(
        np.log(4.0))
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    assert "Linear" in repr(model)


def test_the_python_adversarys_findings():
    import tapegrad.nn as nn
    # A C++ layer's tensors cannot be replaced (the layer would compute with the old ones).
    m = nn.Linear(2, 1, bias=False)
    with pytest.raises(AttributeError, match=r"belongs to the C\+\+ layer"):
        m.weight = nn.Parameter(tg.ones([1, 2]))
    with tg.no_grad():
        m.weight.copy_(tg.ones([1, 2]))
    assert m(tg.ones([1, 2])).item() == 2.0
    with pytest.raises(ValueError, match="register_parameter"):
        nn.Parameter(tg.ones([2]), requires_grad=False)
    # A shared submodule and its parameters once.
    s = nn.Module()
    s.a = nn.Linear(2, 2)
    s.b = s.a
    assert len(s.parameters()) == 2 and [n for n, _ in s.named_parameters()] == ["a.weight", "a.bias"]
    # int() exact for Int64, raising for NaN and inf; no float() of a complex tensor.
    assert int(tg.tensor(2**62 + 1)) == 2**62 + 1 and int(tg.tensor(-7.9)) == -7
    with pytest.raises(ValueError):
        int(tg.tensor(float("nan")))
    with pytest.raises(OverflowError):
        int(tg.tensor(float("inf")))
    # A corrupt pickle's Bool bytes, in-place casts into Bool, .grad of a non-leaf.
    with pytest.raises(tg.Error, match="0 or 1"):
        tg._C._rebuild_tensor(b"\x02\x01", [2], "bool", "cpu", False)
    b = tg.tensor(np.array([True, False]))
    with pytest.raises(tg.Error, match="Bool tensor"):
        b += 1
    nl = tg.ones([2]).requires_grad_() * 2
    with pytest.raises(tg.Error, match="only a leaf"):
        nl.grad = tg.ones([2])
    # NumPy integer arrays as int lists; an empty list index.
    x = tg.tensor(np.arange(16.0).reshape(1, 1, 4, 4))
    assert tg.conv2d(x, tg.ones([1, 1, 1, 1], dtype="float64"), stride=np.array([2, 2])).shape == (1, 1, 2, 2)
    assert tg.tensor(np.ones((3, 4)))[[]].shape == (0, 4)


def test_dtype_objects_as_torch_dtype():
    import pickle
    x = tg.tensor(np.array([1.0, 2.0], dtype=np.float32))
    assert x.dtype is tg.float32 and x.dtype == "float32" and repr(x.dtype) == "tapegrad.float32"
    assert isinstance(x.dtype, tg.dtype) and x.dtype.is_floating_point and not x.dtype.is_complex
    assert [tg.float64.itemsize, tg.bfloat16.itemsize, tg.int64.itemsize, tg.bool_.itemsize] == [8, 2, 8, 1]
    assert x.to(tg.float64).dtype is tg.float64 and x.to("float64").dtype == tg.double
    assert (x > 1).dtype is tg.bool_ and not tg.bool_.is_signed and not tg.int64.is_floating_point
    assert pickle.loads(pickle.dumps(tg.float16)) == tg.float16 and {tg.float32: 1}["float32"] == 1
    assert tg.tensor(np.zeros(2), dtype=tg.float32).dtype is tg.float32


def test_reflected_power_floor_division_and_remainder_as_python():
    a = np.array([1.0, -2.5, 3.0])
    x = tg.tensor(a)
    np.testing.assert_allclose((2 ** x).numpy(), 2 ** a)
    np.testing.assert_allclose((np.float64(2) ** x).numpy(), 2 ** a)
    np.testing.assert_array_equal((x // 2).numpy(), a // 2)
    np.testing.assert_array_equal((7 // x).numpy(), 7 // a)
    np.testing.assert_allclose((x % 2).numpy(), a % 2)
    np.testing.assert_allclose((7.0 % x).numpy(), 7.0 % a)  # the divisor's sign, as Python's
    ints = np.array([7, -7, 8])
    i = tg.tensor(ints)
    for d in (2, -2, 3, -3):
        assert (i // d).dtype == tg.int64
        np.testing.assert_array_equal((i // d).numpy(), ints // d)
        np.testing.assert_array_equal((i % d).numpy(), ints % d)
    q, r = divmod(i, 3)
    np.testing.assert_array_equal(q.numpy(), ints // 3)
    np.testing.assert_array_equal(r.numpy(), ints % 3)
    assert (+x) is not None and np.array_equal((+x).numpy(), a)
    with pytest.raises(tg.Error, match="division by zero"):
        i // 0
    with pytest.raises(TypeError):
        x // "2"
    # The gradient of 2 ** x is log(2) 2 ** x.
    w = tg.tensor(a, requires_grad=True)
    (2 ** w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.log(2) * 2 ** a)


def test_factories_generator_state_and_torch_helpers(tmp_path):
    x = tg.tensor(np.arange(6.0).reshape(2, 3))
    for name, expect in (("zeros_like", 0.0), ("ones_like", 1.0)):
        y = getattr(tg, name)(x)
        assert y.shape == (2, 3) and y.dtype is tg.float64 and np.all(y.numpy() == expect)
    assert tg.zeros_like(x, dtype="float32").dtype is tg.float32
    assert tg.full_like(x, 7).numpy().tolist() == [[7.0] * 3] * 2
    assert tg.empty_like(x).shape == (2, 3) and tg.empty(2, 4).shape == (2, 4)
    assert tg.rand_like(x).shape == (2, 3) and tg.randn_like(x, requires_grad=True).requires_grad
    assert tg.arange(5).dtype is tg.int64 and tg.arange(5).numpy().tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(tg.arange(1, 2, 0.25).numpy(), [1, 1.25, 1.5, 1.75])
    assert tg.arange(0, 3, dtype=tg.float64).dtype is tg.float64
    np.testing.assert_allclose(tg.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5), rtol=1e-6)
    # The generator: a restored state draws the same numbers.
    tg.manual_seed(3)
    state = tg.get_rng_state()
    a = tg.randn(4).numpy()
    r = tg.randint(10, (50,)).numpy()
    tg.set_rng_state(state)
    np.testing.assert_array_equal(tg.randn(4).numpy(), a)
    np.testing.assert_array_equal(tg.randint(10, size=(50,)).numpy(), r)
    assert r.min() >= 0 and r.max() < 10
    lohi = tg.randint(5, 8, (100,)).numpy()
    assert lohi.min() >= 5 and lohi.max() < 8
    p = tg.randperm(10).numpy()
    assert sorted(p.tolist()) == list(range(10))
    with pytest.raises(TypeError, match="randint"):
        tg.randint(5)
    # torch's small helpers.
    arr = np.arange(4.0)
    v = tg.from_numpy(arr)
    arr[0] = 42.0
    assert v.numpy()[0] == 42.0  # shares memory
    assert tg.as_tensor(v) is v and tg.as_tensor([1.0, 2.0]).shape == (2,)
    assert tg.is_tensor(v) and not tg.is_tensor(arr)
    with tg.set_grad_enabled(False):
        assert not tg.is_grad_enabled()
    assert tg.is_grad_enabled()
    tg.set_grad_enabled(False)
    assert not tg.is_grad_enabled()
    tg.set_grad_enabled(True)
    # save / load (pickle), tensors and modules.
    model = tg.nn.Linear(3, 2)
    tg.save({"w": x, "model": model}, str(tmp_path / "ckpt.pt"))
    back = tg.load(str(tmp_path / "ckpt.pt"))
    np.testing.assert_array_equal(back["w"].numpy(), x.numpy())
    xin = tg.tensor(np.ones((1, 3), dtype=np.float32))
    np.testing.assert_array_equal(back["model"](xin).detach().numpy(), model(xin).detach().numpy())


def test_setitem_with_a_value_read_from_the_same_tensor():
    t = tg.tensor(np.arange(6.0).reshape(3, 2))
    t[[0, 1]] = t[[1, 0]]  # the row swap idiom
    np.testing.assert_array_equal(t.numpy(), [[2.0, 3.0], [0.0, 1.0], [4.0, 5.0]])
    u = tg.tensor(np.arange(4.0))
    u[[3, 2, 1, 0]] = u  # the value is the tensor itself: read in full before the write
    np.testing.assert_array_equal(u.numpy(), [3.0, 2.0, 1.0, 0.0])
    v = tg.tensor(np.arange(4.0))
    v[v > 1] = v[v > 1] * 10
    np.testing.assert_array_equal(v.numpy(), [0.0, 1.0, 20.0, 30.0])

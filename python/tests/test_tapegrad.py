"""The Python bindings: zero-copy exchange with NumPy (and, where installed,
PyTorch and JAX, on the GPU too), autograd and the functional API against
closed forms, and errors as exceptions with the C++ message."""
import math

import numpy as np
import pytest

import tapegrad as tg


def has(module):
    try:
        __import__(module)
        return True
    except Exception:
        return False


# ---- NumPy, zero copy both ways -------------------------------------------------------

def test_numpy_to_tapegrad_shares_memory():
    a = np.arange(12.0).reshape(3, 4)
    t = tg.from_dlpack(a)
    assert t.shape == (3, 4) and t.dtype == "float64" and t.device == "cpu"
    assert t.data_ptr() == a.__array_interface__["data"][0]
    a[1, 2] = 100.0  # NumPy's write is seen by tapegrad
    assert t.sum().item() == sum(range(12)) - 6 + 100
    # a strided view keeps its strides
    v = tg.from_dlpack(a[:, 1::2])
    assert v.shape == (3, 2) and v.stride() == (4, 2) and v.stride(0) == 4 and v.stride(-1) == 2
    assert v.data_ptr() == a[:, 1::2].__array_interface__["data"][0]


def test_tapegrad_to_numpy_shares_memory():
    t = tg.zeros(2, 3, dtype="float32")
    b = np.from_dlpack(t)
    c = t.numpy()
    assert b.__array_interface__["data"][0] == t.data_ptr() == c.__array_interface__["data"][0]
    c[0, 1] = 5.0  # NumPy writes into tapegrad's memory (np.from_dlpack's arrays are read-only)
    assert t.sum().item() == 5.0 and b[0, 1] == 5.0
    del t  # the arrays keep the memory alive
    assert c[0, 1] == 5.0 and b.sum() == 5.0


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "bool"])
def test_dtypes_round_trip(dtype):
    a = (np.arange(6) % 3).astype(dtype).reshape(2, 3)
    if dtype == "bool" and np.lib.NumpyVersion(np.__version__) < "1.25.0":
        t = tg.tensor(a)  # NumPy < 1.25 has no bool in DLPack: a copy in, .numpy() shares
    else:
        t = tg.from_dlpack(a)
        assert t.data_ptr() == a.__array_interface__["data"][0]
        back = np.from_dlpack(t)
        assert back.dtype == a.dtype and np.array_equal(back, a)
        assert back.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    assert t.dtype == dtype
    n = t.numpy()
    assert n.dtype == a.dtype and np.array_equal(n, a) and n.__array_interface__["data"][0] == t.data_ptr()


def test_capsules_are_consumed_once():
    cap = tg.to_dlpack(tg.ones(3))
    t = tg.from_dlpack(cap)
    assert t.sum().item() == 3.0
    with pytest.raises(tg.Error, match="unconsumed"):
        tg.from_dlpack(cap)
    tg.to_dlpack(tg.ones(2))  # an unconsumed capsule releases its tensor (no leak)


def test_tensor_copies_and_dtype_rules():
    a = np.array([1.0, 2.0])
    t = tg.tensor(a)
    a[0] = 9.0
    assert t.dtype == "float64" and t.tolist() == [1.0, 2.0]  # a copy
    assert tg.tensor([1.5, 2.5]).dtype == "float32"  # Python floats: float32, as torch.tensor
    assert tg.tensor([1, 2]).dtype == "int64"


# ---- autograd and the functional API against closed forms --------------------------

def test_grad_to_the_second_order():
    x = tg.tensor([0.5, -1.0, 2.0], dtype="float64", requires_grad=True)
    y = (tg.sin(x) * x).sum()
    (g,) = tg.grad(y, x, create_graph=True)
    xs = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(g.detach().numpy(), np.cos(xs) * xs + np.sin(xs), rtol=1e-14)
    (h,) = tg.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), -np.sin(xs) * xs + 2 * np.cos(xs), rtol=1e-14)


def test_backward_into_grad_and_no_grad():
    w = tg.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    ((w * w).sum() * 3.0).backward()
    np.testing.assert_allclose(w.grad.numpy(), [6.0, 12.0])
    with tg.no_grad():
        z = w * 2.0
        assert not tg.is_grad_enabled()
    assert tg.is_grad_enabled() and not z.requires_grad


def test_hessian_hvp_and_jacobian():
    xs = np.array([0.3, -1.2, 2.0, 0.7])
    x = tg.tensor(xs)

    def lse(z):
        return tg.log(tg.exp(z).sum())

    p = np.exp(xs) / np.exp(xs).sum()
    want = np.diag(p) - np.outer(p, p)
    for mode in ("reverse", "forward"):
        np.testing.assert_allclose(tg.hessian(lse, x, mode=mode).numpy(), want, atol=1e-14)
    v = np.array([1.0, -2.0, 0.5, 3.0])
    value, hv = tg.hvp(lse, x, tg.tensor(v))
    np.testing.assert_allclose(hv.numpy(), want @ v, atol=1e-14)
    assert abs(value.item() - math.log(np.exp(xs).sum())) < 1e-14
    J = tg.jacobian(lambda z: tg.sin(z) * 2.0, x)
    np.testing.assert_allclose(J.numpy(), np.diag(2 * np.cos(xs)), atol=1e-15)


@pytest.mark.parametrize("strategy", ["batched_cotangents", "rows", "forward_over_reverse", "taylor"])
def test_per_sample_hessian_and_laplacian(strategy):
    pts = np.array([[0.5, 1.0], [-2.0, 0.3], [1.5, -0.7]])

    def u(x):  # x^2 y + sin(y), per row
        a, b = x.narrow(1, 0, 1), x.narrow(1, 1, 1)
        return a * a * b + tg.sin(b)

    H = tg.per_sample_hessian(u, tg.tensor(pts), strategy=strategy).numpy()
    a, b = pts[:, 0], pts[:, 1]
    want = np.stack([np.stack([2 * b, 2 * a], -1), np.stack([2 * a, -np.sin(b)], -1)], 1)[:, None]
    np.testing.assert_allclose(H, want, atol=1e-13)
    lap = tg.laplacian(u, tg.tensor(pts)).numpy()[:, 0]
    np.testing.assert_allclose(lap, 2 * b - np.sin(b), atol=1e-13)


@pytest.mark.parametrize("strategy", ["batched_cotangents", "rows", "forward_over_reverse", "taylor"])
@pytest.mark.parametrize("B", [3, 6])
def test_per_sample_derivatives_of_a_function_closing_over_per_row_tensors(strategy, B):
    # A Python fn that runs on its whole batch only (per-row weights W): an op
    # of fn refusing fewer rows raises tapegrad.Error inside the callable,
    # which the engine's probes must see as in C++ (it was a bare broadcast
    # error from mul for B > 4, and a reshape error for the default strategy).
    rng = np.random.default_rng(5)
    W, X = rng.standard_normal((B, 3)), rng.standard_normal((B, 3))
    w = tg.tensor(W)

    def f(z):  # sum_j z_j^3 W_j, per row
        return (z * z * z * w).sum(1, True)

    H = tg.per_sample_hessian(f, tg.tensor(X), strategy=strategy).numpy()
    want = np.stack([np.diag(6 * X[b] * W[b]) for b in range(B)])[:, None]
    np.testing.assert_allclose(H, want, atol=1e-12)
    np.testing.assert_allclose(tg.laplacian(f, tg.tensor(X)).numpy()[:, 0], (6 * X * W).sum(1), atol=1e-12)


def test_laplacian_loss_trains():
    tg.manual_seed(0)
    w = (tg.randn(8, 2, dtype="float64") * 0.5).requires_grad_()
    v = tg.randn(1, 8, dtype="float64").requires_grad_()
    x = tg.rand(16, 2, dtype="float64")
    net = lambda z: tg.linear(tg.tanh(tg.linear(z, w)), v)  # noqa: E731
    loss = (tg.laplacian(net, x, create_graph=True) ** 2.0).mean()
    gw, gv = tg.grad(loss, [w, v])
    # against a central difference in one weight
    eps = 1e-6
    wn = w.detach().numpy().copy()

    def loss_at(wv):
        wt = tg.tensor(wv)
        return (tg.laplacian(lambda z: tg.linear(tg.tanh(tg.linear(z, wt)), v.detach()), x) ** 2.0).mean().item()

    wp, wm = wn.copy(), wn.copy()
    wp[3, 1] += eps
    wm[3, 1] -= eps
    fd = (loss_at(wp) - loss_at(wm)) / (2 * eps)
    assert abs(gw.numpy()[3, 1] - fd) < 1e-6 * (1 + abs(fd))


# ---- errors ------------------------------------------------------------------------

def test_errors_are_exceptions_with_the_message():
    with pytest.raises(tg.Error, match=r"add: shapes \[3\] and \[4\]"):
        tg.ones(3) + tg.ones(4)
    with pytest.raises(tg.Error, match="requires grad"):
        tg.to_dlpack(tg.ones(2, requires_grad=True))
    x = tg.ones(3, requires_grad=True)
    with pytest.raises(tg.Error):
        (x * 2.0).backward()  # not a scalar, no gradient given

    def bad(z):
        raise ValueError("from the user's function")

    with pytest.raises(ValueError, match="user's function"):
        tg.hessian(bad, tg.ones(2))
    with pytest.raises(tg.Error, match="unknown strategy"):
        tg.per_sample_hessian(lambda z: z, tg.ones(2, 2), strategy="nope")
    assert isinstance(tg.Error("x"), RuntimeError)
    assert (tg.ones(2) * 3.0).sum().item() == 6.0  # still usable


# ---- peers: PyTorch and JAX (on the GPU machine; skipped where not installed) --------

@pytest.mark.skipif(not has("torch"), reason="PyTorch is not installed here (the GPU machine has it)")
def test_torch_zero_copy_and_gradients():
    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and tg.cuda.is_available() else [])
    for dev in devices:
        a = torch.randn(5, 3, dtype=torch.float64, device=dev)
        t = tg.from_dlpack(a)
        assert t.data_ptr() == a.data_ptr() and t.device.startswith(dev)
        b = torch.from_dlpack(t)
        assert b.data_ptr() == t.data_ptr()
        # gradients against PyTorch's on the same inputs
        x = torch.randn(4, 2, dtype=torch.float64, device=dev)
        w1 = torch.randn(6, 2, dtype=torch.float64, device=dev)
        w2 = torch.randn(1, 6, dtype=torch.float64, device=dev)

        def f_torch(z):
            return torch.nn.functional.linear(torch.tanh(torch.nn.functional.linear(z, w1)), w2).sum()

        want = torch.autograd.functional.hessian(f_torch, x[0])
        tw1, tw2 = tg.from_dlpack(w1), tg.from_dlpack(w2)
        got = tg.hessian(lambda z: tg.linear(tg.tanh(tg.linear(z, tw1)), tw2).sum(), tg.from_dlpack(x[0]))
        assert torch.allclose(torch.from_dlpack(got), want, atol=1e-12)


@pytest.mark.skipif(not has("jax"), reason="JAX is not installed here (the GPU machine has it)")
def test_jax_zero_copy():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    for dev in jax.devices():
        if dev.platform not in ("cpu", "gpu", "cuda"):
            continue
        a = jax.device_put(jnp.arange(6.0).reshape(2, 3), dev)
        t = tg.from_dlpack(a)
        assert t.data_ptr() == a.unsafe_buffer_pointer()
        assert t.device == ("cpu" if dev.platform == "cpu" else f"cuda:{dev.id}")
        b = jax.dlpack.from_dlpack(t * 2.0)
        np.testing.assert_allclose(np.asarray(b), np.arange(6.0).reshape(2, 3) * 2)


@pytest.mark.skipif(not tg.cuda.is_available(), reason="no CUDA GPU here (the GPU machine runs this)")
def test_cuda_tensors_and_graphs():
    x = tg.randn(64, 2, device="cuda", dtype="float64")
    w = tg.randn(16, 2, device="cuda", dtype="float64").requires_grad_()
    with pytest.raises(tg.Error, match="cpu"):
        x.numpy()
    step = lambda: tg.grad((tg.tanh(tg.linear(x, w)) ** 2.0).mean(), w)[0]  # noqa: E731
    step()  # warm up
    g = tg.cuda.CUDAGraph()
    with tg.cuda.graph(g):
        out = step()
    g.replay()
    tg.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), step().cpu().numpy(), rtol=1e-12)


# ---- NumPy's array protocol and indexing ------------------------------------------------

def test_numpy_array_protocol_is_zero_copy_on_the_cpu():
    t = tg.tensor(np.arange(12.0).reshape(3, 4), dtype="float64")
    a = np.asarray(t)
    assert a.shape == (3, 4) and a.dtype == np.float64
    assert a.ctypes.data == t.data_ptr()  # __array_interface__: no copy
    a[0, 1] = 50.0
    assert t[0, 1].item() == 50.0
    np.testing.assert_allclose(np.sin(t), np.sin(a))  # ufuncs take tensors
    assert np.asarray(t, dtype=np.float32).dtype == np.float32
    # Mixed arithmetic gives tensors, as PyTorch's does, on either side.
    for r in (t + np.ones(4), np.ones(4) + t, t * np.full(4, 2.0)):
        assert isinstance(r, tg.Tensor)
    np.testing.assert_allclose((t + np.ones(4)).numpy(), a + 1)
    # A tensor that requires grad is not converted silently.
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(tg.Error, match="requires grad"):
        np.asarray(x)


def test_indexing_gives_views_and_stops_iteration():
    a = np.arange(24.0).reshape(2, 3, 4)
    t = tg.tensor(a, dtype="float64")
    for key in [1, -1, (1, 2), (slice(1, None),), (slice(None), 0), (Ellipsis, None), (None, 1, Ellipsis, 2),
                (slice(None, None, 2), slice(1, 3), slice(None, None, 3)), (Ellipsis, slice(1, 4, 2)),
                (slice(5, 9),)]:
        got = t[key]
        np.testing.assert_array_equal(got.numpy(), a[key], err_msg=str(key))
        if got.numel():
            assert np.shares_memory(got.numpy(), t.numpy()), key  # a view
    np.testing.assert_array_equal(t[np.int64(1), -1].numpy(), a[1, -1])  # NumPy integers index too
    assert len([row for row in t]) == 2  # __getitem__ raises IndexError past the end
    for bad in (2, -3, (0, 3), (0, 0, 4)):
        with pytest.raises(IndexError):
            t[bad]
    with pytest.raises(IndexError):
        t[0, 0, 0, 0]
    # Views are differentiable.
    x = tg.tensor([1.0, 2.0, 3.0], dtype="float64", requires_grad=True)
    (x[1:] * x[:-1]).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 2.0]


# ---- PyTorch's semantics for numbers, comparisons and indexing (issue 45) ---------------

def test_a_number_gives_a_0d_tensor():
    for data, dtype in ((3.0, "float32"), (7, "int64"), (True, "bool"), (np.float64(2.5), "float64")):
        t = tg.tensor(data)
        assert t.shape == () and t.ndim == 0 and t.dtype == dtype, data
        assert t.item() == data and t.tolist() == data
    assert tg.tensor(3.0, dtype="float64", requires_grad=True).shape == ()
    assert tg.tensor([[1, 2]]).shape == (1, 2) and tg.tensor([]).shape == (0,)
    r = np.arange(3.0)
    r.setflags(write=False)
    assert tg.tensor(r).tolist() == [0.0, 1.0, 2.0]  # a read-only array is copied too
    for s in (np.float32(2.0), np.True_):  # NumPy's scalars are numbers, the result a tensor
        assert isinstance(tg.ones(2) + s, tg.Tensor) and (tg.ones(2) + s).tolist() == [1.0 + s] * 2


BIG = 2**62 + 1  # no double holds it (the nearest is 2**62)


def test_integers_stay_int64():
    t = tg.tensor([BIG, -BIG])
    assert t.dtype == "int64" and t.tolist() == [BIG, -BIG]
    assert tg.tensor(BIG).item() == BIG and isinstance(tg.tensor(BIG).item(), int)
    for got, want in ((t + 2, [BIG + 2, -BIG + 2]), (2 + t, [BIG + 2, -BIG + 2]), (t - 1, [BIG - 1, -BIG - 1]),
                      (1 - t, [1 - BIG, 1 + BIG]), (t * 1, [BIG, -BIG]), (t + True, [BIG + 1, -BIG + 1]),
                      (t + np.int64(3), [BIG + 3, -BIG + 3])):
        assert got.dtype == "int64" and got.tolist() == want
    assert (tg.tensor([3, -2]) ** 2).tolist() == [9, 4] and (tg.tensor([3]) ** 2).dtype == "int64"
    assert (tg.tensor([3]) / 2).dtype == "float32"  # true division, as PyTorch's
    f = tg.full((2,), BIG)
    assert f.dtype == "int64" and f.tolist() == [BIG, BIG]
    assert tg.full(2, 1.5).dtype == "float32" and tg.full([1], True).dtype == "bool"
    assert tg.full(1, np.float32(0.5)).dtype == "float32" and tg.full(1, np.True_).tolist() == [True]
    u = tg.zeros(2, dtype="int64")
    assert u.fill_(-BIG).tolist() == [-BIG, -BIG]
    # comparisons with an int compare exactly (BIG > 2**62; as doubles they are equal)
    assert (t > 2**62).tolist() == [True, False] and (t == BIG).tolist() == [True, False]
    assert (t != BIG).tolist() == [False, True] and (t <= -BIG).tolist() == [False, True]
    # Beyond int64: OverflowError where the tensor is an integer one, never a wrap
    for bad in (lambda: t + 2**64, lambda: t == 2**63, lambda: tg.tensor([2**63]), lambda: tg.tensor([1, 2**64]),
                lambda: tg.tensor(-2**63 - 1), lambda: tg.full((1,), 2**63), lambda: u.fill_(2**64)):
        with pytest.raises(OverflowError, match="int64"):
            bad()
    assert t.tolist() == [BIG, -BIG] and u.tolist() == [-BIG, -BIG]  # unchanged, usable
    # ... and a double where it is floating, as NumPy's
    assert (tg.ones(1, dtype="float64") + 2**64).item() == 2.0**64 + 1
    assert tg.full((1,), 2**64, dtype="float64").item() == 2.0**64


def test_bool_indices_add_a_dim():
    a = np.arange(6).reshape(2, 3)
    t = tg.tensor(a)
    for key in (True, False, np.True_, np.False_, (True,), (slice(None), True), (Ellipsis, False), (True, 1),
                (None, False, 0), (True, True), (True, False), (True, 0, True), (True, slice(None), True),
                (slice(None), True, slice(None), False), (None, True, None, True)):
        got, want = t[key], a[key]
        assert got.shape == want.shape, key
        np.testing.assert_array_equal(got.numpy(), want, err_msg=str(key))
    assert np.shares_memory(t[True].numpy(), t.numpy())  # a view
    assert t[1, ..., True].shape == (3, 1)  # PyTorch's: in place (NumPy moves it first, apart from the 1)
    s = tg.tensor(5)
    assert s[True].tolist() == [5] and s[False].shape == (0,)


def test_unsigned_arrays_convert_exactly_or_are_refused():
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        a = np.array([0, 1, np.iinfo(dtype).max if dtype != np.uint64 else 2**63 - 1], dtype=dtype)
        t = tg.tensor(a)
        assert t.dtype == "int64" and t.tolist() == [int(v) for v in a], dtype
    assert tg.tensor(np.zeros((0, 2), dtype=np.uint64)).shape == (0, 2)
    for big in (2**63, 2**64 - 1):
        with pytest.raises(OverflowError, match=f"uint64 value {big} does not fit in int64.*float64"):
            tg.tensor(np.array([1, big], dtype=np.uint64))
    with pytest.raises(OverflowError, match="uint64"):
        tg.ones(2, dtype="int64") + np.array([2**63], dtype=np.uint64)


def test_equality_compares_elements():
    x = tg.tensor([1.0, 2.0, float("nan")])
    eq = x.clone() == x
    assert isinstance(eq, tg.Tensor) and eq.dtype == "bool" and eq.tolist() == [True, True, False]
    assert (x != x.clone()).tolist() == [False, False, True]
    assert (x == 2.0).tolist() == [False, True, False] and (2.0 == x).tolist() == [False, True, False]
    assert (x < 2).tolist() == [True, False, False] and (2 < x).tolist() == [False, False, False]
    assert (x >= 2.0).tolist() == [False, True, False]
    assert (x <= np.array([1.0, 1.0, 1.0])).tolist() == [True, False, False]
    assert (tg.tensor([1, 2]) == tg.tensor([1.0, 2.5])).tolist() == [True, False]
    assert (x == None) is False and (x != None) is True  # noqa: E711
    # a one-element result has a truth value; a longer one is ambiguous, as PyTorch's
    assert bool(tg.tensor([1.0]) == 1.0) and not (tg.tensor(2) == 1)
    with pytest.raises(tg.Error, match="ambiguous.*any.*all"):
        bool(x == x)
    y = tg.tensor([1.0, 2.0])
    assert (y.clone() == y).all().item() is True and (y != y).any().item() is False
    # tensors hash by identity: dict keys and set members still work
    d = {x: 1, y: 2}
    assert d[x] == 1 and d[y] == 2 and hash(x) == hash(x)
    assert len({x, x.clone()}) == 2


def test_indices_and_sizes_beyond_int64_raise():
    t = tg.zeros(3, 2)
    for key in (2**64, -2**64, (0, 2**63), np.uint64(2**63)):
        with pytest.raises(IndexError):
            t[key]
    for bad in (lambda: t.select(0, 2**64), lambda: t.size(2**64), lambda: t.transpose(0, 2**64),
                lambda: t.sum(2**64)):
        with pytest.raises(IndexError, match="int64"):
            bad()
    for bad in (lambda: tg.zeros(2**64), lambda: tg.ones(2, 2**63), lambda: tg.zeros((2**64, 1)),
                lambda: t.reshape(2**64), lambda: t.view(-1, 2**64), lambda: tg.eye(2**64),
                lambda: tg.full((2**64,), 1.0), lambda: t.narrow(0, 0, 2**64)):
        with pytest.raises(OverflowError, match="int64"):
            bad()
    assert t[0:2**70].shape == (3, 2) and t[-2**70:1].shape == (1, 2)  # slices clamp, as Python's
    assert t.sum().item() == 0.0  # still usable


def test_empty_tensors_convert_to_numpy():
    for t, shape in ((tg.zeros(0, 3), (0, 3)), (tg.ones(2, 0, dtype="int64"), (2, 0)), (tg.zeros(3)[3:], (0,))):
        a = np.asarray(t)
        assert a.shape == shape and a.dtype == t.numpy().dtype and t.numpy().shape == shape
    assert np.asarray(tg.zeros(0, 3, dtype="float64")).dtype == np.float64
    assert tg.ones(2, 0, dtype="int64").tolist() == [[], []]
    assert tg.tensor(np.zeros((0, 3))).shape == (0, 3)

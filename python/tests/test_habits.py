"""PyTorch habits that must work as in torch (issue 50): NumPy dtypes in the
factories, torch's argument forms, grad-mode decorators, promotion of an
integer tensor with a float, sizes given as tensors."""
import numpy as np
import pytest

import tapegrad as tg


@pytest.mark.parametrize("make", [
    lambda d: tg.zeros(2, 3, dtype=d), lambda d: tg.ones(2, dtype=d), lambda d: tg.rand(2, dtype=d),
    lambda d: tg.randn(2, dtype=d), lambda d: tg.empty(2, dtype=d), lambda d: tg.eye(2, dtype=d),
    lambda d: tg.full((2,), 1.5, dtype=d), lambda d: tg.arange(3, dtype=d), lambda d: tg.linspace(0, 1, 3, dtype=d),
    lambda d: tg.zeros_like(tg.ones(2), dtype=d), lambda d: tg.full_like(tg.ones(2), 2.0, dtype=d),
    lambda d: tg.tensor([0.1, 0.2], dtype=d)])
@pytest.mark.parametrize("dtype", [np.float64, np.dtype("float64"), "float64", tg.float64])
def test_factories_take_numpy_dtypes_names_and_dtype_objects(make, dtype):
    assert make(dtype).dtype is tg.float64


def test_tensor_keeps_float64_values_given_a_numpy_dtype():
    assert tg.tensor([0.1], dtype=np.float64).tolist() == [0.1]


def test_torch_argument_forms():
    t = tg.ones(1, 3)
    assert t.expand(2, 3).shape == (2, 3) and t.expand((2, 3)).shape == (2, 3)
    assert tg.ones(2, 3).permute(1, 0).shape == (3, 2) and tg.ones(2, 3).permute((1, 0)).shape == (3, 2)
    assert tg.ones(2, 3).repeat(2, 1).shape == (4, 3) and tg.ones(2, 3).tile(1, 2).shape == (2, 6)
    assert t.to("cpu:0").device == "cpu"
    assert t.to(tg.zeros(1, dtype=tg.float64)).dtype is tg.float64
    assert tg.full_like(t, 3.0, requires_grad=True).requires_grad
    assert tg.linspace(0, 1, 5, requires_grad=True).requires_grad


def test_randint_needs_a_size_as_torch():
    with pytest.raises(TypeError, match="size is missing"):
        tg.randint(2, 5)
    r = tg.randint(2, 5, (1000,))
    assert r.shape == (1000,) and r.min().item() == 2 and r.max().item() == 4
    assert tg.randint(5, (3,)).shape == (3,)


def test_manual_seed_takes_torchs_range():
    tg.manual_seed(-1)
    a = tg.rand(3).tolist()
    tg.manual_seed(2**64 - 1)  # -1 modulo 2**64, as torch's
    assert tg.rand(3).tolist() == a
    tg.manual_seed(0)
    assert tg.rand(3).tolist() != a
    with pytest.raises(ValueError, match="seed must be in"):
        tg.manual_seed(2**64)


def test_sizes_given_as_integer_tensors():
    assert tg.zeros(tg.tensor(3)).shape == (3,)
    assert tg.ones(tg.tensor([2, 3])).shape == (2, 3)
    with pytest.raises(TypeError, match="int64 tensor"):
        tg.zeros(tg.tensor(3.0))


def test_an_integer_tensor_with_a_float_promotes_to_float32():
    i = tg.tensor([7, -7])
    for got, want in [(i // 2.0, [3.0, -4.0]), (i % 2.5, [2.0, 0.5]), (i + 0.5, [7.5, -6.5]), (i * 0.5, [3.5, -3.5])]:
        assert got.dtype is tg.float32 and got.tolist() == want
    assert (i < 0.5).tolist() == [False, True]
    assert (i // 2).dtype is tg.int64 and (i // 2).tolist() == [3, -4]


def test_grad_mode_decorators():
    @tg.no_grad()
    def f():
        return tg.is_grad_enabled()

    @tg.no_grad
    def g():
        return tg.is_grad_enabled()

    @tg.set_grad_enabled(False)
    def h():
        return tg.is_grad_enabled()

    assert not f() and not g() and not h() and tg.is_grad_enabled()
    with tg.no_grad():
        assert not tg.is_grad_enabled()
        with tg.enable_grad():
            assert tg.is_grad_enabled()
        assert not tg.is_grad_enabled()
    assert tg.is_grad_enabled()
    x = tg.ones(2, requires_grad=True)
    assert not tg.no_grad()(lambda: x * 2.0)().requires_grad
    with pytest.raises(TypeError, match="decorate a function"):
        tg.no_grad()(1, 2)


def test_adversary_findings_on_the_python_habits():
    # mask & 2 would be an integer bitwise op in PyTorch (Int64 zeros): refused, not cast to True.
    b = tg.tensor([True, False, True])
    for f in (lambda: b & 2, lambda: b | 0, lambda: 1 ^ b):
        with pytest.raises(tg.Error, match="take Bool operands"):
            f()
    assert (b & True).tolist() == [True, False, True]
    # **=, &=, |=, ^= write into the same storage (aliases see it), as torch's.
    p = tg.full((2,), 3.0, requires_grad=True)
    q = p
    with tg.no_grad():
        p **= 2
    assert p is q and q.tolist() == [9.0, 9.0]
    m, alias = tg.tensor([True, False]), None
    alias = m
    m &= tg.tensor([False, True])
    m |= tg.tensor([True, False])
    m ^= tg.tensor([True, True])
    assert m is alias and alias.tolist() == [False, True]
    i = tg.tensor([2])
    with pytest.raises(tg.Error, match="in place cannot change the dtype"):
        i **= 0.5
    # A buffer stays a buffer when reassigned; a parameter takes only a parameter.
    class M(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("running", tg.zeros(2))
            self.w = tg.nn.Parameter(tg.ones(2))

    mod = M()
    mod.running = mod.running * 0.9 + 1.0
    assert sorted(mod.state_dict()) == ["running", "w"]
    assert mod.state_dict()["running"].tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="as parameter 'w'"):
        mod.w = mod.w * 2
    with pytest.raises(TypeError, match="as buffer 'running'"):
        mod.running = 3
    # param_groups[i]["lr"] = x sets the rate (the warm-up habit); other keys raise.
    lin = tg.nn.Linear(2, 2)
    opt = tg.optim.SGD(lin.parameters(), lr=0.1)
    for g in opt.param_groups:
        g["lr"] = 0.01
    assert opt.param_groups[0]["lr"] == 0.01
    with pytest.raises(TypeError, match="only 'lr' can be set"):
        opt.param_groups[0]["momentum"] = 0.9
    # repr shows the values, as torch's; dtype shorthands; .data shares storage.
    assert repr(tg.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(tg.arange(3)) == "tensor([0, 1, 2])"
    assert repr(tg.zeros(2, dtype="float64", requires_grad=True)) == "tensor([0., 0.], dtype=float64, requires_grad=True)"
    assert repr(tg.zeros(0, 2)) == "tensor([], size=(0, 2))"
    assert tg.tensor([1, 2]).float().dtype == tg.float32 and tg.tensor([1.0]).double().dtype == tg.float64
    assert tg.tensor([1.7]).long().tolist() == [1] and tg.tensor([0.0, 2.0]).bool().tolist() == [False, True]
    w = tg.ones(3, requires_grad=True)
    w.data.mul_(2)
    assert w.tolist() == [2.0, 2.0, 2.0] and w.requires_grad and w.is_leaf


def test_clear_errors_for_what_is_not_a_tensor():
    for bad in ("abc", None, (x for x in range(3))):
        with pytest.raises(TypeError, match="tensor: cannot make a tensor from"):
            tg.tensor(bad)
    w = tg.ones(3, requires_grad=True)
    for bad in (np.ones(3), 1.0):
        with pytest.raises(TypeError, match="grad: assigned grad expected to be a tapegrad.Tensor or None"):
            w.grad = bad
    with pytest.raises(tg.Error, match="cannot be its own gradient"):
        w.grad = w
    w.grad = tg.zeros(3)
    assert w.grad.tolist() == [0.0, 0.0, 0.0]
    w.grad = None
    assert w.grad is None
    opt = tg.optim.SGD([w], lr=0.1)
    with pytest.raises(TypeError, match="load_state_dict: entry 'foo' is <class 'int'>"):
        opt.load_state_dict({"foo": 1})


def test_grad_mode_decorators_on_generator_functions_as_torch():
    @tg.no_grad()
    def gen():
        seen = yield tg.is_grad_enabled()
        assert seen == "sent"
        try:
            yield tg.is_grad_enabled()
        except ValueError:
            yield ("thrown", tg.is_grad_enabled())
        return "done"

    g = gen()
    assert next(g) is False
    assert tg.is_grad_enabled()  # the caller's mode between resumptions
    assert g.send("sent") is False
    assert g.throw(ValueError()) == ("thrown", False)
    with pytest.raises(StopIteration) as stop:
        next(g)
    assert stop.value.value == "done"

    @tg.enable_grad()
    def on():
        yield tg.is_grad_enabled()

    with tg.no_grad():
        assert list(on()) == [True]
    assert list(tg.set_grad_enabled(False)(lambda: (yield tg.is_grad_enabled()))()) == [False]


def test_python_complex_numbers_default_to_complex64_as_torch():
    assert tg.tensor(1 + 2j).dtype == tg.complex64
    assert tg.tensor([1.0, 2j]).dtype == tg.complex64
    assert tg.tensor([0.1 + 0.2j], dtype="complex128").tolist() == [0.1 + 0.2j]  # read at full precision
    assert tg.tensor(np.array([1j])).dtype == tg.complex128  # an array keeps its dtype


def test_named_result_tuples_as_torch_return_types():
    t = tg.tensor(np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]]))
    r = t.max(1)
    assert r.values.tolist() == [3.0, 5.0] and r.indices.tolist() == [0, 1]
    values, indices = tg.min(t, 1)  # still a tuple
    assert values.tolist() == [1.0, 0.0] and indices.tolist() == [1, 0] and tg.min(t, 1)[1].tolist() == [1, 0]
    assert tg.sort(t, 1).values.tolist() == [[1.0, 2.0, 3.0], [0.0, 4.0, 5.0]]
    assert t.topk(2, 1).indices.tolist() == [[0, 2], [1, 2]]
    assert t.median(1).values.tolist() == [2.0, 4.0] and t.kthvalue(1, 1).values.tolist() == [1.0, 0.0]
    assert t.max().item() == 5.0  # no dim: a tensor
    a = tg.tensor(np.array([[2.0, 1.0], [1.0, 3.0]]))
    np.testing.assert_allclose(tg.linalg.eigh(a).eigenvalues.numpy(), np.linalg.eigvalsh(a.numpy()))
    np.testing.assert_allclose(tg.linalg.slogdet(a).logabsdet.item(), np.log(5.0))
    q, r = tg.linalg.qr(a)
    np.testing.assert_allclose((q @ r).numpy(), a.numpy(), atol=1e-14)
    np.testing.assert_allclose(tg.linalg.svd(a).S.numpy(), np.linalg.svd(a.numpy())[1])


def test_load_state_dict_checks_everything_before_writing_and_names_its_keys():
    model = tg.nn.Sequential(tg.nn.Linear(2, 3), tg.nn.Linear(3, 1))
    before = {n: t.numpy().copy() for n, t in model.state_dict().items()}
    bad = {n: tg.zeros(*t.shape) for n, t in model.state_dict().items()}
    last = list(bad)[-1]
    bad[last] = tg.zeros(7)  # the last entry's shape is wrong: nothing may be written
    with pytest.raises(tg.Error, match="has shape"):
        model.load_state_dict(bad)
    for n, t in model.state_dict().items():
        np.testing.assert_array_equal(t.numpy(), before[n])
    bad[last] = np.zeros(1)
    with pytest.raises(TypeError, match="maps names to tensors"):
        model.load_state_dict(bad)
    partial = {n: t for n, t in model.state_dict().items() if n != last}
    partial["extra"] = tg.zeros(1)
    r = model.load_state_dict(partial, strict=False)
    assert r.missing_keys == [last] and r.unexpected_keys == ["extra"]
    missing, unexpected = r
    assert missing == [last]


def test_sequential_and_module_list_containers_as_torch():
    import collections
    nn = tg.nn
    seq = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    x = tg.tensor(np.random.default_rng(2).random((4, 2)).astype(np.float32))
    head = seq[0:2]
    assert isinstance(head, nn.Sequential) and len(head) == 2 and head[0] is seq[0]
    np.testing.assert_array_equal(seq[2](head(x)).detach().numpy(), seq(x).detach().numpy())
    assert [type(m).__name__ for m in seq] == ["Linear", "Tanh", "Linear"]
    named = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert list(named.state_dict()) == ["fc.weight", "fc.bias"] and named(x).shape == (4, 2)
    seq.append(nn.Sigmoid())
    assert len(seq) == 4 and float(seq(x).min()) > 0
    with pytest.raises(TypeError, match="is not a tapegrad.nn.Module"):
        nn.Sequential(3)
    ml = nn.ModuleList([nn.Linear(2, 2)])
    ml.extend([nn.Tanh()])
    ml += [nn.ReLU()]
    assert len(ml) == 3 and isinstance(ml[1:], nn.ModuleList) and len(list(ml.parameters())) == 2
    with pytest.raises(TypeError, match="ModuleList.append"):
        ml.append("relu")


def test_module_apply_requires_grad_and_dtype_shorthands_as_torch():
    nn = tg.nn
    seq = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    order = []
    seq.apply(lambda m: order.append(type(m).__name__))
    assert order == ["Linear", "Tanh", "Linear", "Sequential"]  # children first, as torch's

    def init(m):
        if isinstance(m, nn.Linear):
            with tg.no_grad():
                m.weight.fill_(0.5)

    seq.apply(init)
    assert float(seq[2].weight.sum()) == 1.5
    assert seq.double() is seq and seq[0].weight.dtype == tg.float64
    assert seq(tg.ones(2, 2, dtype="float64")).dtype == tg.float64
    seq.requires_grad_(False)
    assert not any(p.requires_grad for p in seq.parameters())
    assert not seq(tg.ones(2, 2, dtype="float64")).requires_grad
    seq.requires_grad_()
    assert all(p.requires_grad for p in seq.parameters())
    assert seq.float()[0].weight.dtype == tg.float32


def test_backward_inputs_and_the_autograd_namespace_as_torch():
    a = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    b = tg.tensor(np.array([3.0, 4.0]), requires_grad=True)
    (a * b * 3).sum().backward(inputs=[a])  # only a's .grad accumulates
    assert a.grad.tolist() == [9.0, 12.0] and b.grad is None
    tg.autograd.backward([(a * b).sum()], inputs=[b])
    assert b.grad.tolist() == [1.0, 2.0] and a.grad.tolist() == [9.0, 12.0]
    (g,) = tg.autograd.grad((a * a).sum(), a)
    assert g.tolist() == [2.0, 4.0]


def test_module_to_takes_torch_forms():
    nn = tg.nn
    m = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    assert m.to(np.float64)[0].weight.dtype == tg.float64
    assert m.to("float32")[0].weight.dtype == tg.float32
    assert m.to("cpu", tg.float64)[0].weight.dtype == tg.float64
    assert m.to(dtype="float32")[0].weight.dtype == tg.float32
    assert m.to(tg.zeros(1, dtype="float64"))[0].weight.dtype == tg.float64
    with pytest.raises(TypeError, match="is not a dtype"):
        m.to(dtype="int7")
    with pytest.raises(TypeError, match="unexpected arguments"):
        m.to(copy=True)
    assert m.to("cpu", non_blocking=True) is m

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

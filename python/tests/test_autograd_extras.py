"""Tensor hooks, retain_grad and grad_fn, gradcheck / gradgradcheck and
derivative_operator from Python, as torch.autograd users write them."""
import threading

import numpy as np
import pytest

import tapegrad as tg


def test_register_hook_sees_and_replaces_the_gradient():
    x = tg.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    y = x * x
    seen = []
    h = y.register_hook(lambda g: seen.append(g.numpy().copy()))
    y.register_hook(lambda g: g * 10)  # replaces the gradient flowing on
    y.sum().backward()
    np.testing.assert_array_equal(seen[0], [1, 1, 1])
    np.testing.assert_allclose(x.grad.numpy(), 10 * 2 * np.array([1.0, 2.0, 3.0]))
    h.remove()
    h.remove()  # once
    x.grad = None
    (x * x).sum().backward()
    assert len(seen) == 1
    # A leaf's hook, and a hook that raises: the error names it, and the library stays usable.
    leaf = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    leaf.register_hook(lambda g: g * 0)
    (leaf * 3).sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), [0, 0])
    z = tg.tensor(np.array([1.0]), requires_grad=True)
    w = z * 2

    def bad(g):
        raise ValueError("no")

    w.register_hook(bad)
    with pytest.raises(tg.Error, match="register_hook: the hook raised ValueError: no"):
        w.sum().backward()
    w2 = z * 2
    w2.register_hook(lambda g: "not a tensor")
    with pytest.raises(tg.Error, match="return None or a tapegrad.Tensor"):
        w2.sum().backward()
    (z * 5).sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), [5])


def test_retain_grad_and_grad_fn():
    x = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x * 3
    assert x.grad_fn is None and y.grad_fn is not None and not y.retains_grad
    y.retain_grad()
    assert y.retains_grad
    (y * y).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), 2 * 3 * np.array([1.0, 2.0]))
    name = y.grad_fn.name()
    assert "Mul" in name and repr(y.grad_fn) == "<%s>" % name
    nxt = y.grad_fn.next_functions
    assert len(nxt) >= 1 and nxt[0][0] is not None  # x's accumulator


def test_hooks_from_other_python_threads_do_not_deadlock():
    out = []

    def work():
        x = tg.tensor(np.arange(4.0), requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: g + 1)
        y.sum().backward()
        out.append(x.grad.numpy().copy())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(out) == 4 and all(np.array_equal(o, [4, 4, 4, 4]) for o in out)


def test_gradcheck_and_gradgradcheck():
    ag = tg.autograd
    x = tg.tensor(np.array([0.3, -0.7, 1.1]), requires_grad=True)
    w = tg.tensor(np.array([[0.5, -1.0, 2.0], [0.1, 0.2, 0.3]]), requires_grad=True)
    assert ag.gradcheck(lambda a, b: tg.tanh(b @ a), (x, w))
    assert ag.gradgradcheck(lambda a, b: tg.tanh(b @ a), (x, w))
    assert ag.gradcheck(lambda a: (a * a, tg.sin(a)), x, check_forward_ad=True)

    class Wrong:
        pass

    # A wrong backward: a custom detach in the middle makes the gradient zero where it is not.
    bad = lambda a: a.detach() * a  # noqa: E731
    assert ag.gradcheck(bad, x, raise_exception=False) is False
    with pytest.raises(tg.Error, match="gradcheck"):
        ag.gradcheck(bad, x)
    with pytest.raises(tg.Error, match="not a tapegrad.Tensor"):
        ag.gradcheck(lambda a: Wrong(), x)
    with pytest.raises(ZeroDivisionError):  # the function's own exception, unchanged
        ag.gradcheck(lambda a: 1 / 0, x)


def test_derivative_operator_matches_closed_forms():
    # u(x, y) = x^3 y^2 per row: u_xx + u_yy = 6 x y^2 + 2 x^3; u_xy = 6 x^2 y.
    pts = np.array([[0.5, -1.0], [1.5, 2.0], [-0.3, 0.7]])
    x = tg.tensor(pts)

    def u(p):
        return (p[:, 0:1] ** 3) * (p[:, 1:2] ** 2)

    lap = tg.derivative_operator(u, x, [([0, 0], 1.0), ([1, 1], 1.0)]).numpy()[:, 0]
    a, b = pts[:, 0], pts[:, 1]
    np.testing.assert_allclose(lap, 6 * a * b * b + 2 * a ** 3, rtol=1e-12)
    mixed = tg.derivative_operator(u, x, [[0, 1]]).numpy()[:, 0]
    np.testing.assert_allclose(mixed, 6 * a * a * b, rtol=1e-12)
    np.testing.assert_allclose(tg.laplacian(u, x).numpy()[:, 0], lap, rtol=1e-12)
    with pytest.raises(tg.Error):
        tg.derivative_operator(u, x, [([5, 5], 1.0)])  # no such input dim


def test_stochastic_laplacian_and_derivative_operator():
    rng = np.random.default_rng(4)
    n, b = 8, 4000
    m = rng.standard_normal((n, n))
    a = (m + m.T) / 2
    at = tg.tensor(a)

    def quad(x):
        return ((x @ at) * x).sum(1, keepdim=True) * 0.5

    x = tg.tensor(rng.standard_normal((b, n)))
    tg.manual_seed(1)
    value, var = tg.laplacian(quad, x, samples=2, return_variance=True)
    sigma2 = 2 * (np.sum(a * a) - np.sum(np.diag(a) ** 2)) / 2  # Rademacher, k = 2
    est = value.numpy()[:, 0]
    assert abs(est.mean() - np.trace(a)) < 4 * np.sqrt(sigma2 / b)
    assert abs(est.var(ddof=1) - sigma2) < 0.1 * sigma2
    assert abs(var.numpy().mean() - sigma2) < 0.1 * sigma2
    g = tg.laplacian(quad, x[:10], samples=3, directions="gaussian")
    assert g.shape == (10, 1)
    with pytest.raises(tg.Error, match="rademacher"):
        tg.laplacian(quad, x, samples=2, directions="uniform")
    with pytest.raises(tg.Error, match="needs samples"):
        tg.laplacian(quad, x, return_variance=True)
    # The sparse estimator over the terms: exact with all of them.
    terms = [([i, i], 1.0) for i in range(n)]
    exact = tg.derivative_operator(quad, x[:3], terms).numpy()
    np.testing.assert_allclose(exact, np.full((3, 1), np.trace(a)), rtol=1e-12)
    np.testing.assert_allclose(tg.derivative_operator(quad, x[:3], terms, samples=n).numpy(), exact, rtol=1e-12)
    draws = [float(tg.derivative_operator(quad, x[:1], terms, samples=2).numpy()[0, 0]) for _ in range(400)]
    d = np.diag(a)
    s2 = d.var(ddof=1)
    v = n * n * s2 / 2 * (n - 2) / n
    assert abs(np.mean(draws) - np.trace(a)) < 4 * np.sqrt(v / 400)


def test_the_third_python_adversarys_findings():
    import copy
    import pickle
    # Python floats at the dtype asked for (not through float32).
    assert tg.tensor([0.1], dtype="float64").tolist() == [0.1]
    assert tg.tensor([1e300], dtype=tg.float64).tolist() == [1e300]
    assert tg.tensor(0.1, dtype=tg.float64).item() == 0.1
    # Complex values keep their imaginary parts in tolist and item.
    c = tg.tensor(np.array([1 + 2j, 3 - 4j]))
    assert c.tolist() == [1 + 2j, 3 - 4j] and c[0].item() == 1 + 2j
    # Floor division as Python's on the edges; Int64 exact (or refused beyond 2^53).
    x = tg.tensor(np.array([1.0]))
    assert (x // 0.1).tolist() == [1.0 // 0.1] == [9.0]
    assert (tg.tensor(np.array([-7.5])) // float("inf")).tolist() == [-1.0]
    assert (tg.tensor(np.array([5e-324])) // -7.5).tolist() == [-1.0]
    assert np.isnan((tg.tensor(np.array([float("inf")])) // 3.0).tolist()[0])
    ints = [2 ** 52, -(2 ** 52), 7, -7]
    assert (tg.tensor(ints) // 3).tolist() == [v // 3 for v in ints]
    assert (tg.tensor(ints) // -5).tolist() == [v // -5 for v in ints]
    with pytest.raises(tg.Error, match="beyond 2\\^53"):
        tg.tensor([2 ** 62]) // 3
    # A number beside a Bool tensor promotes as torch's.
    p = 2 ** tg.tensor(np.array([True, False]))
    assert p.dtype is tg.int64 and p.tolist() == [2, 1]
    # One direction has no variance to estimate.
    value, var = tg.laplacian(lambda t: (t * t).sum(1, keepdim=True), tg.tensor(np.ones((3, 2))), samples=1,
                              return_variance=True)
    assert np.all(np.isnan(var.numpy()))
    # dtype objects stay the module's objects.
    assert pickle.loads(pickle.dumps(tg.float32)) is tg.float32 and copy.deepcopy(tg.float64) is tg.float64

"""tapegrad.cuda's streams, CUDA graphs, graphed callables (torch.cuda's
make_graphed_callables, plus derivatives of higher order) and graphed
functions, against the same computation run eagerly. The GPU tests run on the
GPU machine; here they skip, and the errors without a GPU are checked."""
import copy

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn

gpu = pytest.mark.skipif(not tg.cuda.is_available(), reason="no CUDA GPU here (the GPU machine runs this)")


def mlp():
    tg.manual_seed(3)
    return nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1)).to(tg.float64)


# ---- without a GPU: clear errors --------------------------------------------------------

@pytest.mark.skipif(tg.cuda.is_available(), reason="checks the errors of a machine without a GPU")
def test_without_a_gpu_streams_and_graphed_callables_raise_clear_errors():
    with pytest.raises(tg.Error):
        tg.cuda.Stream()
    x = tg.ones(4, 2, dtype=tg.float64, requires_grad=True)
    with pytest.raises(tg.Error, match="CUDA"):
        tg.cuda.make_graphed_callables(mlp(), (x,))


def test_graphed_callables_check_their_arguments():
    with pytest.raises(tg.Error, match="2 callables but 1"):
        tg.cuda.make_graphed_callables((mlp(), mlp()), ((tg.ones(1, 2),),))
    with pytest.raises(tg.Error, match="not callable"):
        tg.cuda.make_graphed_callables(3, (tg.ones(1),))


def test_graphed_decorator_forms_make_graphed_functions():
    f = tg.cuda.graphed(lambda x: x * 2.0)
    assert isinstance(f, tg.cuda.GraphedFunction)

    @tg.cuda.graphed(name="double")
    def g(x):
        return x * 2.0

    assert isinstance(g, tg.cuda.GraphedFunction) and g.counters()["replays"] == 0


# ---- on the GPU --------------------------------------------------------------------------

@gpu
def test_streams_as_torch_cuda_streams():
    s = tg.cuda.Stream()
    cur = tg.cuda.current_stream()
    assert s != cur and int(s) == s.cuda_stream and s.device == "cuda:0"
    x = tg.ones(1 << 20, device="cuda")
    s.wait_stream(cur)
    with tg.cuda.stream(s):
        assert tg.cuda.current_stream() == s
        y = x * 3.0
    assert tg.cuda.current_stream() == cur
    cur.wait_stream(s)
    assert y.sum().item() == 3.0 * (1 << 20)
    s.synchronize()
    assert s.query()
    tg.cuda.set_stream(s)
    assert tg.cuda.current_stream() == s
    tg.cuda.set_stream(cur)


@gpu
def test_a_graphed_module_matches_eager_outputs_and_gradients():
    eager = mlp().to("cuda")
    model = copy.deepcopy(eager)
    sample = tg.rand(64, 2, dtype=tg.float64, device="cuda", requires_grad=True)
    graphed = tg.cuda.make_graphed_callables(model, (sample,))
    assert graphed is model  # a module comes back with its forward replaced, as torch's
    for i in range(3):
        x = tg.rand(64, 2, dtype=tg.float64, device="cuda", requires_grad=True)
        xe = x.detach().requires_grad_(True)
        y, ye = model(x), eager(xe)
        np.testing.assert_allclose(y.detach().cpu().numpy(), ye.detach().cpu().numpy(), rtol=1e-13)
        (y ** 2.0).sum().backward()
        (ye ** 2.0).sum().backward()
        np.testing.assert_allclose(x.grad.cpu().numpy(), xe.grad.cpu().numpy(), rtol=1e-12)
        for p, q in zip(model.parameters(), eager.parameters()):
            np.testing.assert_allclose(p.grad.cpu().numpy(), q.grad.cpu().numpy(), rtol=1e-12)
    # eval mode (not the mode it was graphed in) runs the original forward
    model.eval()
    with tg.no_grad():
        np.testing.assert_allclose(model(sample).cpu().numpy(), eager(sample).cpu().numpy(), rtol=1e-13)


@gpu
def test_graphed_second_derivatives_a_pinn_residual():
    eager = mlp().to("cuda")
    model = copy.deepcopy(eager)
    sample = tg.rand(32, 2, dtype=tg.float64, device="cuda", requires_grad=True)
    g = tg.cuda.make_graphed_callables(model, (sample,), max_order=3)

    def residual_loss(net, x):
        (du,) = tg.grad(net(x).sum(), x, create_graph=True)
        (dxx,) = tg.grad(du[:, 0].sum(), x, retain_graph=True, create_graph=True)
        (dyy,) = tg.grad(du[:, 1].sum(), x, retain_graph=True, create_graph=True)
        return ((dxx[:, 0] + dyy[:, 1]) ** 2.0).mean()

    for _ in range(2):
        x = tg.rand(32, 2, dtype=tg.float64, device="cuda", requires_grad=True)
        residual_loss(g, x).backward()
        residual_loss(eager, x.detach().requires_grad_(True)).backward()
        got = 0
        for p, q in zip(model.parameters(), eager.parameters()):
            assert (p.grad is None) == (q.grad is None)  # the head's bias is not in a second derivative
            if q.grad is not None:
                np.testing.assert_allclose(p.grad.cpu().numpy(), q.grad.cpu().numpy(), rtol=1e-10, atol=1e-14)
                got += np.abs(q.grad.cpu().numpy()).max() > 0
        assert got == 3
        assert g.forward.graphed.replays(3) > 0  # the third derivative replayed its graph


@gpu
def test_a_graphed_function_returns_what_it_returned():
    w = tg.rand(3, 3, dtype=tg.float64, device="cuda", requires_grad=True)

    def two(x, y):
        return x @ y, (x * y).sum()

    x0 = tg.rand(3, 3, dtype=tg.float64, device="cuda", requires_grad=True)
    f = tg.cuda.make_graphed_callables(two, (x0, w))
    x = tg.rand(3, 3, dtype=tg.float64, device="cuda", requires_grad=True)
    a, b = f(x, w)
    assert tuple(a.shape) == (3, 3) and tuple(b.shape) == ()
    (a.sum() + b).backward()
    xn, wn = x.detach().cpu().numpy(), w.detach().cpu().numpy()
    np.testing.assert_allclose(x.grad.cpu().numpy(), np.ones((3, 3)) @ wn.T + wn, rtol=1e-12)
    np.testing.assert_allclose(w.grad.cpu().numpy(), xn.T @ np.ones((3, 3)) + xn, rtol=1e-12)
    assert f.replays(0) == 1 and f.replays(1) == 1
    with pytest.raises(tg.Error):
        f(tg.rand(4, 3, dtype=tg.float64, device="cuda"), w)  # not the captured shape


@gpu
def test_graphed_functions_warm_record_and_replay():
    calls = []

    @tg.cuda.graphed
    def step(x):
        calls.append(1)
        return tg.tanh(x) * 2.0

    xs = [tg.rand(8, device="cuda") for _ in range(4)]
    outs = [step(x).cpu().numpy() for x in xs]
    for x, o in zip(xs, outs):
        np.testing.assert_allclose(o, 2 * np.tanh(x.cpu().numpy()), rtol=1e-6)
    c = step.counters()
    assert (c["warmups"], c["recordings"], c["replays"]) == (1, 1, 3) and len(calls) == 2  # the recording call replays too


@gpu
def test_a_graph_captures_on_a_given_pool_and_stream():
    x = tg.rand(1024, device="cuda")
    g1, g2 = tg.cuda.CUDAGraph(), tg.cuda.CUDAGraph()
    with tg.cuda.graph(g1):
        y = x * 2.0
    with tg.cuda.graph(g2, pool=g1.pool(), stream=tg.cuda.Stream()):
        z = y + 1.0
    x.copy_(tg.ones(1024, device="cuda"))
    g1.replay()
    g2.replay()
    tg.cuda.synchronize()
    assert z.sum().item() == 3.0 * 1024

"""tapegrad.optim's other optimizers and tapegrad.optim.lr_scheduler, as
torch.optim users write them: each rule against its closed form, and against
torch.optim where PyTorch is importable (the GPU machines)."""
import gc
import math

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.optim as optim
from tapegrad.optim import lr_scheduler

P0 = np.array([1.0, -2.0, 3.0, 0.5])


def quadratic_steps(make, steps=1, p0=P0):
    """Runs `steps` steps of make([w]) on sum(w^3) + sum(w^2) (gradient 3 w^2 + 2 w)."""
    w = tg.tensor(p0.copy(), requires_grad=True)
    opt = make([w])
    for _ in range(steps):
        opt.zero_grad()
        ((w * w * w).sum() + (w * w).sum()).backward()
        opt.step()
    return w.detach().numpy(), opt


def grad_of(p):
    return 3 * p * p + 2 * p


def test_adaptive_rules_first_steps_against_their_closed_forms():
    g = grad_of(P0)
    # RMSprop (lr 1e-2, alpha 0.99 by default): v = (1 - alpha) g^2.
    got, opt = quadratic_steps(lambda p: optim.RMSprop(p))
    np.testing.assert_allclose(got, P0 - 1e-2 * g / (np.sqrt(0.01 * g * g) + 1e-8), rtol=1e-13)
    assert opt.param_groups[0]["lr"] == 1e-2
    # Adagrad (lr 1e-2, eps 1e-10): sum = g^2.
    got, _ = quadratic_steps(lambda p: optim.Adagrad(p, initial_accumulator_value=0.5))
    np.testing.assert_allclose(got, P0 - 1e-2 * g / (np.sqrt(0.5 + g * g) + 1e-10), rtol=1e-13)
    # Adamax (lr 2e-3): m = (1 - b1) g, u = |g| + eps, step lr / (1 - b1) m / u.
    got, opt = quadratic_steps(lambda p: optim.Adamax(p, betas=(0.8, 0.99)))
    np.testing.assert_allclose(got, P0 - 2e-3 / 0.2 * (0.2 * g) / (np.abs(g) + 1e-8), rtol=1e-13)
    assert opt.param_groups[0]["lr"] == 2e-3
    # RAdam's first steps (rho_t <= 5) are bias-corrected momentum: p -= lr m_hat.
    got, _ = quadratic_steps(lambda p: optim.RAdam(p, lr=0.01))
    np.testing.assert_allclose(got, P0 - 0.01 * g, rtol=1e-13)
    # NAdam with weight decay is finite and moves against the gradient.
    got, opt = quadratic_steps(lambda p: optim.NAdam(p, weight_decay=0.1, decoupled_weight_decay=True), steps=3)
    assert np.all(np.isfinite(got)) and np.all(np.sign(P0 - got) == np.sign(g))
    assert opt.param_groups[0]["weight_decay"] == 0.1


def test_rmsprop_momentum_centered_against_the_recurrence():
    p, v, gavg, buf = P0.copy(), np.zeros(4), np.zeros(4), np.zeros(4)
    for _ in range(4):
        g = grad_of(p)
        v = 0.9 * v + 0.1 * g * g
        gavg = 0.9 * gavg + 0.1 * g
        buf = 0.5 * buf + g / (np.sqrt(v - gavg * gavg) + 1e-8)
        p = p - 0.01 * buf
    got, _ = quadratic_steps(lambda q: optim.RMSprop(q, lr=0.01, alpha=0.9, momentum=0.5, centered=True), steps=4)
    np.testing.assert_allclose(got, p, rtol=1e-12)


def test_against_torch_optim_where_importable():
    torch = pytest.importorskip("torch")
    # torch.optim keeps scalar state (NAdam's mu_product, the step counts) in
    # the default dtype: float32 unless set, which alone moves NAdam's
    # parameters by ~5e-11 relative after 8 steps (measured on the GPU
    # machine). In float64 the rules agree to rounding.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        compare_with_torch_optim(torch)
    finally:
        torch.set_default_dtype(previous)


def compare_with_torch_optim(torch):
    rules = [("RMSprop", dict(momentum=0.3)), ("Adagrad", dict(lr_decay=0.01)), ("Adamax", {}),
             ("NAdam", dict(weight_decay=0.01)), ("RAdam", dict(weight_decay=0.01, decoupled_weight_decay=True)),
             ("SGD", dict(momentum=0.9, nesterov=True)), ("Adam", dict(amsgrad=True)), ("AdamW", {})]
    for name, kw in rules:
        got, _ = quadratic_steps(lambda p: getattr(optim, name)(p, **kw), steps=8)
        w = torch.tensor(P0.copy(), dtype=torch.float64, requires_grad=True)
        topt = getattr(torch.optim, name)([w], **kw)
        for _ in range(8):
            topt.zero_grad()
            ((w * w * w).sum() + (w * w).sum()).backward()
            topt.step()
        np.testing.assert_allclose(got, w.detach().numpy(), rtol=1e-11, atol=1e-14, err_msg=name)


def test_step_with_a_closure_returns_its_loss():
    w = tg.tensor(P0.copy(), requires_grad=True)
    opt = optim.Adam([w], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    with tg.no_grad():  # the closure records anyway, as torch.optim's step does
        loss = opt.step(closure)
    assert float(loss) == pytest.approx(float((P0 * P0).sum()))
    assert opt.steps == 1 and not np.allclose(w.detach().numpy(), P0)


def test_lbfgs_solves_a_quadratic():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((5, 5))
    a_np = m @ m.T + 5 * np.eye(5)
    b_np = rng.standard_normal(5)
    a, b = tg.tensor(a_np), tg.tensor(b_np)
    x = tg.tensor(np.zeros(5), requires_grad=True)
    opt = optim.LBFGS([x], lr=1, max_iter=50, tolerance_grad=1e-12, tolerance_change=1e-15,
                      line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x * (a @ x)).sum() - (b * x).sum()
        loss.backward()
        return loss

    first = opt.step(closure)
    assert float(first) == 0.0
    np.testing.assert_allclose(x.detach().numpy(), np.linalg.solve(a_np, b_np), rtol=1e-6, atol=1e-8)
    assert opt.evaluations > 1
    with pytest.raises(tg.Error, match="closure"):
        opt.step()
    with pytest.raises(tg.Error, match="strong_wolfe"):
        optim.LBFGS([x], line_search_fn="backtracking")


def rates(opt, sched, n, metric=None):
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step() if metric is None else sched.step(metric)
    return out


def test_schedulers_follow_torch_closed_forms():
    w = tg.tensor(P0.copy(), requires_grad=True)
    opt = optim.SGD([w], lr=1.0)
    np.testing.assert_allclose(rates(opt, lr_scheduler.StepLR(opt, step_size=2, gamma=0.5), 6),
                               [1, 1, 0.5, 0.5, 0.25, 0.25])
    opt = optim.SGD([w], lr=1.0)
    s = lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=0.1)
    np.testing.assert_allclose(rates(opt, s, 5), [0.1 + 0.9 * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(5)])
    assert s.last_epoch == 5 and s.get_last_lr() == [opt.param_groups[0]["lr"]]
    opt = optim.SGD([w], lr=2.0)
    np.testing.assert_allclose(rates(opt, lr_scheduler.LambdaLR(opt, lambda e: 1.0 / (e + 1)), 4),
                               [2, 1, 2 / 3, 0.5])
    opt = optim.SGD([w], lr=1.0)
    np.testing.assert_allclose(rates(opt, lr_scheduler.ExponentialLR(opt, gamma=0.9), 3), [1, 0.9, 0.81])
    opt = optim.SGD([w], lr=1.0)
    np.testing.assert_allclose(rates(opt, lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=2), 4),
                               [0.5, 0.75, 1, 1])
    opt = optim.Adam([w], lr=1.0)
    s = lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    r = rates(opt, s, 10)
    assert r[0] == pytest.approx(0.1 / 25) and max(r) == pytest.approx(0.1, rel=0.05)
    assert r[-1] < r[0]
    with pytest.raises(tg.Error, match="anneal_strategy"):
        lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10, anneal_strategy="exp")
    opt = optim.SGD([w], lr=1.0)
    warm = lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=2)
    decay = lr_scheduler.ExponentialLR(opt, gamma=0.5)
    s = lr_scheduler.SequentialLR(opt, schedulers=[warm, decay], milestones=[2])
    np.testing.assert_allclose(rates(opt, s, 5), [0.5, 0.75, 1, 0.5, 0.25])


def test_reduce_on_plateau_and_resuming():
    w = tg.tensor(P0.copy(), requires_grad=True)
    opt = optim.SGD([w], lr=1.0)
    s = lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1)
    np.testing.assert_allclose(rates(opt, s, 5, metric=tg.tensor(np.array(3.0))), [1, 1, 1, 0.5, 0.5])
    assert s.best == 3.0
    state = s.state_dict()
    opt2 = optim.SGD([w], lr=0.25)  # the rate is the optimizer's state
    s2 = lr_scheduler.ReduceLROnPlateau(opt2, factor=0.5, patience=1)
    s2.load_state_dict(state)
    for sched in (s, s2):
        sched.step(3.0)
        sched.step(3.0)  # the second epoch without improvement since the last reduction
    assert opt.param_groups[0]["lr"] == opt2.param_groups[0]["lr"] == 0.125
    # An epoch scheduler resumes at its epoch.
    opt = optim.SGD([w], lr=1.0)
    a = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    rates(opt, a, 3)
    opt3 = optim.SGD([w], lr=1.0)
    b = lr_scheduler.StepLR(opt3, step_size=1, gamma=0.5)
    b.load_state_dict(a.state_dict())
    assert b.last_epoch == 3 and opt3.param_groups[0]["lr"] == opt.param_groups[0]["lr"] == 0.125


def test_a_scheduler_keeps_its_optimizer_alive_and_groups_can_be_added():
    w = tg.tensor(P0.copy(), requires_grad=True)
    v = tg.tensor(P0.copy(), requires_grad=True)
    opt = optim.SGD([w], lr=1.0)
    opt.add_param_group({"params": [v], "lr": 0.1})
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["lr"] == 0.1
    s = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    del opt
    gc.collect()
    s.step()
    assert s.get_last_lr() == [0.5, 0.05]
    with pytest.raises(tg.Error):
        optim.SGD([w]).add_param_group({"params": [w]})  # already optimized


def test_more_layers_and_losses_as_torch_nn():
    nn = tg.nn
    rng = np.random.default_rng(1)
    x = tg.tensor(rng.standard_normal((4, 3, 5, 5)))
    # BatchNorm2d: batch statistics in training (running ones updated), running ones in eval.
    bn = nn.BatchNorm2d(3).to("float64")
    y = bn(x).detach().numpy()
    xn = x.numpy()
    mu, var = xn.mean(axis=(0, 2, 3)), xn.var(axis=(0, 2, 3))
    np.testing.assert_allclose(y, (xn - mu[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5),
                               rtol=1e-10, atol=1e-12)
    running = dict(bn.named_buffers())
    np.testing.assert_allclose(running["running_mean"].numpy(), 0.1 * mu, rtol=1e-12)
    bn.eval()
    np.testing.assert_allclose(bn(x).detach().numpy(), (xn - 0.1 * mu[None, :, None, None]) / np.sqrt(
        (0.9 + 0.1 * var[None, :, None, None] * 100 / 99) + 1e-5), rtol=1e-10)
    assert sorted(n for n, _ in bn.named_parameters()) == ["bias", "weight"]
    # InstanceNorm2d: per sample and channel.
    y = nn.InstanceNorm2d(3)(x).numpy()
    m, v = xn.mean(axis=(2, 3), keepdims=True), xn.var(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(y, (xn - m) / np.sqrt(v + 1e-5), rtol=1e-10, atol=1e-12)
    # ConvTranspose2d undoes a stride-2 convolution's shape; its weight is [in, out, k, k].
    ct = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1).to("float64")
    assert ct(x).shape == (4, 2, 10, 10) and dict(ct.named_parameters())["weight"].shape == (3, 2, 3, 3)
    with pytest.raises(tg.Error, match="padding_mode"):
        nn.ConvTranspose2d(3, 2, 3, padding_mode="reflect")
    # Embedding rows, padding_idx zero.
    emb = nn.Embedding(10, 4, padding_idx=0)
    idx = tg.tensor(np.array([[0, 3], [9, 3]]))
    out = emb(idx).detach().numpy()
    w = dict(emb.named_parameters())["weight"].detach().numpy()
    np.testing.assert_array_equal(out[0, 1], w[3])
    assert not out[0, 0].any()
    with pytest.raises(ValueError, match="scale_grad_by_freq"):
        nn.Embedding(10, 4, scale_grad_by_freq=True)
    # Pools, pixel shuffle, flatten, activations.
    assert nn.AdaptiveAvgPool2d(1)(x).shape == (4, 3, 1, 1)
    np.testing.assert_allclose(nn.AdaptiveAvgPool2d(1)(x).detach().numpy()[..., 0, 0], xn.mean(axis=(2, 3)), rtol=1e-12)
    assert nn.MaxPool1d(2)(tg.tensor(np.arange(6.0).reshape(1, 1, 6))).numpy().ravel().tolist() == [1, 3, 5]
    assert nn.AvgPool3d(2)(tg.tensor(np.ones((1, 1, 2, 2, 2)))).numpy().ravel().tolist() == [1.0]
    assert nn.PixelShuffle(2)(tg.tensor(np.zeros((1, 4, 3, 3)))).shape == (1, 1, 6, 6)
    assert nn.Flatten()(x).shape == (4, 75)
    assert nn.Identity(3, k=1)(x) is x
    np.testing.assert_allclose(nn.LeakyReLU(0.2)(tg.tensor(np.array([-1.0, 2.0]))).numpy(), [-0.2, 2.0])
    np.testing.assert_allclose(nn.ELU()(tg.tensor(np.array([-1.0]))).numpy(), [math.exp(-1) - 1])
    np.testing.assert_allclose(nn.LogSoftmax(1)(tg.tensor(np.zeros((2, 4)))).numpy(), np.full((2, 4), -math.log(4)))
    # Losses with their options.
    logits = tg.tensor(rng.standard_normal((5, 3)))
    t = tg.tensor(np.array([0, 2, 1, 1, 0]))
    ln = logits.numpy() - np.log(np.exp(logits.numpy()).sum(1, keepdims=True))
    wts = np.array([1.0, 2.0, 0.5])
    expect = -sum(wts[c] * ln[i, c] for i, c in enumerate([0, 2, 1, 1, 0])) / wts[[0, 2, 1, 1, 0]].sum()
    assert float(nn.CrossEntropyLoss(weight=tg.tensor(wts))(logits, t)) == pytest.approx(expect, rel=1e-12)
    assert float(nn.NLLLoss(ignore_index=1)(tg.tensor(ln), t)) == pytest.approx(
        -(ln[0, 0] + ln[1, 2] + ln[4, 0]) / 3, rel=1e-12)
    smooth = nn.CrossEntropyLoss(label_smoothing=0.1)(logits, t)
    assert float(smooth) == pytest.approx(np.mean([-(0.9 * ln[i, c] + 0.1 * ln[i].mean())
                                                   for i, c in enumerate([0, 2, 1, 1, 0])]), rel=1e-12)
    p = tg.tensor(np.array([0.2, 0.9])), tg.tensor(np.array([0.0, 1.0]))
    assert float(nn.BCELoss()(*p)) == pytest.approx(-(math.log(0.8) + math.log(0.9)) / 2, rel=1e-12)
    z = tg.tensor(np.array([0.3, -1.0]))
    sig = 1 / (1 + np.exp(-z.numpy()))
    assert float(nn.BCEWithLogitsLoss(pos_weight=tg.tensor(np.array([2.0, 2.0])))(z, p[1])) == pytest.approx(
        -(math.log(1 - sig[0]) + 2 * math.log(sig[1])) / 2, rel=1e-12)
    d = tg.tensor(np.array([0.5, 3.0])), tg.tensor(np.array([0.0, 0.0]))
    assert float(nn.SmoothL1Loss(beta=1.0)(*d)) == pytest.approx((0.125 + 2.5) / 2)
    assert float(nn.HuberLoss(delta=2.0)(*d)) == pytest.approx((0.125 + 2 * (3 - 1)) / 2)
    lp, tp = np.log(np.array([[0.25, 0.75]])), np.array([[0.5, 0.5]])
    kl = (tp * (np.log(tp) - lp)).sum()
    assert float(nn.KLDivLoss(reduction="batchmean")(tg.tensor(lp), tg.tensor(tp))) == pytest.approx(kl, rel=1e-12)
    assert float(nn.functional.kl_div(tg.tensor(lp), tg.tensor(tp), reduction="sum")) == pytest.approx(kl, rel=1e-12)
    with pytest.raises(tg.Error, match="batchmean"):
        nn.functional.mse_loss(*d, reduction="batch")


def test_modules_deepcopy_and_pickle():
    import copy
    import pickle
    nn = tg.nn
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.GELU(), nn.Flatten(),
                          nn.Linear(2 * 16, 3))
    x = tg.tensor(np.random.default_rng(2).standard_normal((2, 1, 4, 4)).astype(np.float32))
    model(x)  # moves the running statistics
    model.eval()
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert not clone.training and not clone[1].training
        np.testing.assert_array_equal(clone(x).detach().numpy(), model(x).detach().numpy())
        for (n, a), (m, b) in zip(model.state_dict().items(), clone.state_dict().items()):
            assert n == m
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        # Its own tensors: training the copy leaves the original alone.
        with tg.no_grad():
            clone[4].weight.add_(1.0)
        assert not np.array_equal(clone[4].weight.detach().numpy(), model[4].weight.detach().numpy())


def test_nn_init_utils_and_the_scientific_layers():
    nn = tg.nn
    import tapegrad.nn.init as init
    import tapegrad.nn.utils as nu
    tg.manual_seed(0)
    lin = nn.Linear(50, 40)
    w = lin.weight
    assert init.zeros_(w) is w and not w.detach().numpy().any() and w.requires_grad and w.is_leaf
    init.ones_(lin.bias)
    assert np.all(lin.bias.detach().numpy() == 1)
    init.xavier_uniform_(w, gain=2.0)
    bound = 2.0 * math.sqrt(6 / (50 + 40))
    wn = w.detach().numpy()
    assert np.abs(wn).max() <= bound and np.abs(wn).max() > 0.9 * bound
    init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert abs(w.detach().numpy().std() - math.sqrt(2 / 40)) < 0.02
    init.normal_(w, mean=3.0, std=0.01)
    assert abs(w.detach().numpy().mean() - 3.0) < 0.01
    init.uniform_(w, -0.5, 0.5)
    assert np.abs(w.detach().numpy()).max() <= 0.5
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    # Clipping and parameters as one vector.
    x = tg.tensor(np.ones((2, 50), dtype=np.float32))
    lin(x).sum().backward()
    grads = np.concatenate([p.grad.numpy().ravel() for p in lin.parameters()])
    total = nu.clip_grad_norm_(lin.parameters(), 0.5)
    assert float(total) == pytest.approx(np.linalg.norm(grads), rel=1e-5)
    clipped = np.concatenate([p.grad.numpy().ravel() for p in lin.parameters()])
    assert np.linalg.norm(clipped) == pytest.approx(0.5, rel=1e-4)
    nu.clip_grad_value_(lin.parameters(), 1e-3)
    assert np.abs(lin.weight.grad.numpy()).max() <= np.float32(1e-3)
    v = nu.parameters_to_vector(lin.parameters())
    assert v.shape == (50 * 40 + 40,)
    nu.vector_to_parameters(v * 2, lin.parameters())
    np.testing.assert_allclose(nu.parameters_to_vector(lin.parameters()).detach().numpy(), 2 * v.detach().numpy())
    with pytest.raises(tg.Error, match="vector_to_parameters"):
        nu.vector_to_parameters(v[:5], lin.parameters())
    # The scientific-ML layers of the C++ nn.
    u = nn.UNet2d(3, 1, channels=(8, 16), groups=4)
    assert u(tg.tensor(np.zeros((2, 3, 8, 8), dtype=np.float32))).shape == (2, 1, 8, 8)
    assert len(u.parameters()) > 8
    fno = nn.FNO(1, 2, width=8, modes=(4,), layers=2, projection=16)
    assert fno(tg.tensor(np.zeros((2, 16, 1), dtype=np.float32))).shape == (2, 16, 2)
    sc = nn.SpectralConv1d(2, 3, 4)
    xs = np.random.default_rng(3).standard_normal((1, 2, 16)).astype(np.float32)
    y = sc(tg.tensor(xs)).detach().numpy()
    wc = dict(sc.named_parameters())["weight"].detach().numpy()  # [in, out, modes] complex
    spec = np.fft.rfft(xs, axis=-1)
    mixed = np.zeros((1, 3, 9), dtype=complex)
    mixed[:, :, :4] = np.einsum("bim,iom->bom", spec[:, :, :4], wc)
    np.testing.assert_allclose(y, np.fft.irfft(mixed, n=16, axis=-1), rtol=1e-4, atol=1e-5)
    assert nn.SpectralConv2d(2, 3, 2, 2)(tg.tensor(np.zeros((1, 2, 8, 8), dtype=np.float32))).shape == (1, 3, 8, 8)
    ff = nn.FourierFeatures(2, 5)
    assert ff(tg.tensor(np.zeros((3, 2), dtype=np.float32))).shape == (3, 10)
    assert len(ff.parameters()) == 0 and len(ff.buffers()) == 1
    assert len(nn.FourierFeatures(2, 5, trainable=True).parameters()) == 1
    assert repr(nn.Linear(50, 40)) == "Linear(in_features=50, out_features=40, bias=True)"
    d = nn.ModuleDict({"enc": nn.Linear(2, 2)})
    d["act"] = nn.Tanhshrink()
    assert list(d.keys()) == ["enc", "act"] and "act" in d and len(d.parameters()) == 2
    np.testing.assert_allclose(d["act"](tg.tensor(np.array([1.0]))).numpy(), [1 - math.tanh(1)])
    with pytest.raises(TypeError, match="not a tapegrad.nn.Module"):
        d["x"] = 3


def test_the_second_python_adversarys_findings():
    import copy
    import pickle
    nn = tg.nn
    # A frozen weight stays frozen in a copy; a tie to a C++ layer's tensor stays a tie.
    lin = nn.Linear(2, 2)
    lin.weight.requires_grad_(False)
    lin.tag = "x"
    for c in (copy.deepcopy(lin), pickle.loads(pickle.dumps(lin))):
        assert not c.weight.requires_grad and c.bias.requires_grad and c.tag == "x"
        np.testing.assert_array_equal(c.weight.detach().numpy(), lin.weight.detach().numpy())

    class Tie(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 3)
            self.out_w = self.emb.weight

    t = Tie()
    c = copy.deepcopy(t)
    assert c.out_w is c.emb.weight and len(c.parameters()) == len(t.parameters()) == 1
    assert c.emb.weight is not t.emb.weight
    # A submodule added to a C++ layer, and a subclass's own attribute, survive.
    lin2 = nn.Linear(2, 2)
    lin2.sub = nn.Linear(2, 1)

    class MyLin(nn.Linear):
        def __init__(self):
            super().__init__(2, 2)
            self.extra = 7

    m = MyLin()
    m.extra = 11
    for cl in (copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))):
        c2 = cl(lin2)
        assert isinstance(c2.sub, nn.Linear) and len(c2.parameters()) == 4
    assert copy.deepcopy(m).extra == 11  # (a local class does not pickle)
    # A tensor's deepcopy keeps its .grad, as torch's.
    w = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    (w * w).sum().backward()
    wc = copy.deepcopy(w)
    np.testing.assert_array_equal(wc.grad.numpy(), [2.0, 4.0])
    assert wc.grad is not None and wc.requires_grad
    # OneCycleLR with linear annealing takes total_steps steps (its last rate the final one).
    v = tg.tensor(np.array([1.0]), requires_grad=True)
    opt = optim.SGD([v], lr=0.1, momentum=0.9)
    s = lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=20, anneal_strategy="linear")
    for _ in range(20):
        opt.step()
        s.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 / 25 / 1e4)
    with pytest.raises(tg.Error, match="past total_steps"):
        s.step()
    # InstanceNorm2d takes an unbatched [C, H, W] sample; BatchNorm2d refuses a 3-D input.
    x = np.random.default_rng(0).standard_normal((3, 5, 4))
    y = nn.InstanceNorm2d(3).to("float64")(tg.tensor(x)).numpy()
    m_, v_ = x.mean(axis=(1, 2), keepdims=True), x.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(y, (x - m_) / np.sqrt(v_ + 1e-5), rtol=1e-10, atol=1e-12)
    with pytest.raises(tg.Error, match="expected a 4-D input"):
        nn.BatchNorm2d(3).to("float64")(tg.tensor(x))
    # L-BFGS resumes from its state_dict as the uninterrupted run.
    def run(opt_, ps):
        def closure():
            opt_.zero_grad()
            loss = sum(((p ** 4).sum() + tg.sin(p).sum()) for p in ps)
            loss.backward()
            return loss
        return float(opt_.step(closure))

    pa = [tg.tensor(np.array([1.0, -0.5, 0.3]), requires_grad=True), tg.tensor(np.array([[0.2, 0.7]]),
                                                                                  requires_grad=True)]
    oa = optim.LBFGS(pa, max_iter=3, history_size=4)
    for _ in range(2):
        run(oa, pa)
    pb = [tg.tensor(p.detach().numpy().copy(), requires_grad=True) for p in pa]
    ob = optim.LBFGS(pb, max_iter=3, history_size=4)
    ob.load_state_dict(oa.state_dict())
    assert [run(oa, pa) for _ in range(3)] == [run(ob, pb) for _ in range(3)]
    for p, q in zip(pa, pb):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def test_bad_arguments_get_messages_naming_them():
    w = tg.tensor(np.array([1.0]), requires_grad=True)
    with pytest.raises(TypeError, match="params must be tensors or parameter groups"):
        optim.SGD([w, 3])
    with pytest.raises(TypeError, match='"lr" must be a number'):
        optim.SGD([{"params": [w], "lr": "x"}])
    with pytest.raises(TypeError, match="expected tapegrad.Tensor items"):
        tg.grad([w * 2], [np.ones(1)])
    with pytest.raises(tg.Error, match="closure returned <class 'float'>"):
        optim.LBFGS([w]).step(lambda: 1.0)
    s = lr_scheduler.LambdaLR(optim.SGD([w]), lambda e: "a" if e else 1.0)
    with pytest.raises(tg.Error, match=r"lr_lambda\(1\) returned <class 'str'>"):
        s.step()


def test_per_group_lambdas_and_min_lrs_as_pytorch():
    w, b = (tg.tensor(P0.copy(), requires_grad=True) for _ in range(2))
    opt = optim.SGD([{"params": [w]}, {"params": [b], "lr": 1.0}], lr=0.1)
    s = lr_scheduler.LambdaLR(opt, [lambda e: 0.5 ** e, lambda e: 1.0 / (e + 1)])
    got = []
    for _ in range(3):
        got.append(s.get_last_lr())
        opt.step()
        s.step()
    np.testing.assert_allclose(got, [[0.1, 1.0], [0.05, 0.5], [0.025, 1.0 / 3]])
    with pytest.raises(tg.Error, match="1 lambdas for 2 parameter groups"):
        lr_scheduler.LambdaLR(optim.SGD([{"params": [w]}, {"params": [b]}], lr=0.1), [lambda e: 1.0])
    with pytest.raises(TypeError, match="lr_lambda must be a function"):
        lr_scheduler.LambdaLR(optim.SGD([w], lr=0.1), 3)
    # ReduceLROnPlateau: torch's argument order, one min_lr per group.
    opt = optim.SGD([{"params": [w]}, {"params": [b], "lr": 1.0}], lr=0.1)
    r = lr_scheduler.ReduceLROnPlateau(opt, "min", 0.5, 0, min_lr=[0.06, 0.3])
    for metric in (1, 2, 3, 4, 5):
        r.step(metric)
    assert [g["lr"] for g in opt.param_groups] == [0.06, 0.3]
    with pytest.raises(tg.Error, match="1 min_lr values for 2 parameter groups"):
        lr_scheduler.ReduceLROnPlateau(opt, min_lr=[0.1])
    with pytest.raises(tg.Error, match="min_lr and eps must be finite and >= 0"):
        lr_scheduler.ReduceLROnPlateau(opt, min_lr=[0.1, -1.0])

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

"""The second-order fitters against known answers: a convex problem whose minimum is known in
closed form, a realizable target fitted to zero, a curve the fit hands its monitor, and the
convergence certificate, which an under-iterated fit fails; a batched fit of restarts takes each
restart's own steps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from blocklab.fitting import fit
from blocklab.fitting.batched import BatchedLevenbergMarquardt, converged_batched
from blocklab.fitting.certify import converged, first_check
from blocklab.fitting.fit import FITTERS, LBFGS, LevenbergMarquardt
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape


def least_squares(seed: int = 0):
    """A linear model on noisy linear data: the least-squares minimum is the lstsq solution."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(200, 5, generator=g, dtype=torch.float64)  # (N, 5)
    y = x @ torch.randn(5, 1, generator=g, dtype=torch.float64) + 0.3
    y = y + 0.1 * torch.randn(200, 1, generator=g, dtype=torch.float64)  # (N, 1)
    torch.manual_seed(seed)
    model = nn.Linear(5, 1).double()
    design = torch.cat([x, torch.ones(200, 1, dtype=torch.float64)], 1)  # (N, 6)
    best = torch.linalg.lstsq(design, y).solution  # (6, 1)
    return model, x, y, ((design @ best - y) ** 2).mean().item()


# A fit against the closed form (QR least squares), two algorithms apart: the loss at a minimum
# is second order in the weights' error, so rel=1e-8 asks each fit for its weights to about 1e-4
# of their scale, which a converged fit meets by orders on this well-conditioned design (its
# rounding leaves the loss within ulps) and a fit short of the minimum misses by far more
MINIMUM_REL = 1e-8


@pytest.mark.parametrize("method", sorted(FITTERS))
def test_a_convex_problem_reaches_its_closed_form_minimum(method):
    model, x, y, minimum = least_squares()
    loss = FITTERS[method](model, x, y).run(50)
    assert loss == pytest.approx(minimum, rel=MINIMUM_REL)


def test_both_methods_agree_on_a_convex_problem():
    losses, weights = [], []
    for method in sorted(FITTERS):
        model, x, y, _ = least_squares(seed=1)
        losses.append(FITTERS[method](model, x, y).run(50))
        weights.append(torch.cat([model.weight.reshape(-1), model.bias]))
    assert losses[0] == pytest.approx(losses[1], rel=MINIMUM_REL)
    # the weights are first order: each fit's own stopping point, to far below 1e-6 of their
    # scale here (ulps apart at LM's; L-BFGS stops once its steps no longer move the loss)
    torch.testing.assert_close(weights[0], weights[1], rtol=1e-6, atol=1e-8)


def product_target(n: int = 256):
    """y = x1 * x2: one degree-2 monomial, which one degree-2 layer of width 2 represents
    exactly (the readout of (a.x)(b.x) summed over two units spans every rank-2 quadratic)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 2, generator=g, dtype=torch.float64)  # (N, 2)
    return x, (x[:, :1] * x[:, 1:]) / (x[:, 0] * x[:, 1]).std()  # (N, 1), unit scale


@pytest.mark.parametrize("method", sorted(FITTERS))
def test_a_realizable_target_is_fitted_to_zero(method):
    x, y = product_target()
    # the best of restarts: a local minimum is possible from one start
    best = min(FITTERS[method](_student(seed), x, y).run(200) for seed in range(3))
    assert best < 1e-8


def _student(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    arm = parse_arm("2")
    return Net(arm, NetShape(1, 2, norm="none", residual=False), 2, 1).double()


def test_the_fit_hands_each_loss_to_its_monitor_and_stops_when_told():
    x, y = product_target()
    seen = []

    def on_step(i: int, loss: float) -> bool:
        seen.append((i, loss))
        return i < 9  # the tenth call says stop

    fitter = LBFGS(_student(0), x, y)
    fitter.run(100, on_step)
    assert [i for i, _ in seen] == list(range(10))
    assert seen[-1][1] < seen[0][1]  # the loss fell
    assert seen[0][1] == pytest.approx(nn.functional.mse_loss(_student(0)(x), y).item())


def test_levenberg_marquardt_never_accepts_a_worse_step():
    x, y = product_target()
    seen = []
    LevenbergMarquardt(_student(1), x, y).run(40, lambda i, loss: seen.append(loss) or True)
    assert all(b <= a for a, b in zip(seen, seen[1:], strict=False))


@pytest.mark.parametrize("method", sorted(FITTERS))
def test_an_under_iterated_fit_fails_the_certificate_and_a_converged_one_passes(method):
    x, y = product_target()
    # ten iterations leave both mid-descent on this target: ten more still gain most of the loss
    short = converged(FITTERS[method](_student(2), x, y), iterations=10, tol=0.03)
    assert not short.passed and short.second < 0.97 * short.first and short.gain > 0.03
    model, xs, ys, minimum = least_squares(seed=2)
    done = converged(FITTERS[method](model, xs, ys), iterations=50, tol=0.03)
    assert done.passed and done.second <= done.first
    assert done.second == pytest.approx(minimum, rel=MINIMUM_REL)


@pytest.mark.parametrize("method", sorted(FITTERS))
def test_a_fit_stopped_by_its_monitor_is_not_converged(method):
    x, y = product_target()
    seen = []

    def stop_at_5(i, loss):
        seen.append(i)
        return i < 5

    cert = converged(FITTERS[method](_student(2), x, y), 4, tol=0.5, on_step=stop_at_5)
    assert not cert.passed and seen == [0, 1, 2, 3, 4, 5]  # numbered across both stretches


@pytest.mark.parametrize(
    "steps, first", [(1024, 64), (1000, 125), (256, 64), (128, 64), (64, 32), (3, 1), (1, 1)]
)
def test_the_first_check_leaves_exact_doublings_up_to_the_limit(steps, first):
    assert first_check(steps) == first
    last = first
    while 2 * last <= steps:
        last *= 2
    assert last == steps or steps % 2 == 1  # the last check ends at the limit where it can


def test_a_fit_doubles_until_a_doubling_gains_less_than_the_tolerance(monkeypatch):
    monkeypatch.setattr(fit, "FLOOR", 0.0)  # the doubling schedule alone (the floor: below)
    x, y = _noisy_product()
    seen = []

    def on_step(i, loss):
        seen.append((i, loss))
        return True

    # mid-descent at 4 iterations and at its minimum within about 15: the fit doubles past 8 and
    # stops at the first doubling that gained less than 3%, well before its limit
    cert = converged(LevenbergMarquardt(_student(0), x, y), 4, tol=0.03, on_step=on_step, until=512)
    assert cert.passed and 8 < cert.iterations < 512
    assert [i for i, _ in seen] == list(range(cert.iterations))  # numbered across every stretch
    half = cert.iterations // 2
    assert cert.first == pytest.approx(seen[half][1]) and cert.gain < 0.03
    assert (seen[half // 2][1] - seen[half][1]) / seen[half][1] >= 0.03  # the check before failed


def test_a_fit_that_never_settles_stops_at_its_limit_uncertified():
    x, y = product_target()
    cert = converged(LevenbergMarquardt(_student(2), x, y), 2, tol=1e-12, until=16)
    assert not cert.passed and cert.iterations == 16


def _noisy_product():
    """`product_target` with label noise: no network fits it to zero, so every iteration's loss
    stays far above rounding and compares at a relative tolerance. Its minimum is reached in
    about 15 iterations; past it, whether a step of no gain is accepted is decided by rounding,
    and the parameters may wander along flat directions, so the comparisons stop short of it."""
    x, y = product_target()
    g = torch.Generator().manual_seed(4)
    return x, y + 0.3 * torch.randn(y.shape, generator=g, dtype=torch.float64)  # (N, 1)


# A batched fit of restarts against each restart alone: J^T J by bmm against syrk, the damping
# in tensor arithmetic against Python floats, so each step differs by a few ulps. On
# `_noisy_product`, whose comparisons stop short of its minimum, no step amplifies that much: the
# losses, weights and certificates stay within some thousands of ulps over every iteration, with
# one thread or two. BATCHED_REL leaves four orders above that for another CPU's kernels (and
# 1e-11 absolute for weights near zero, on weights of order one), while a member stepped with
# another's damping or weights misses by percent.
BATCHED_REL = 1e-8


def _weights(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])  # (P,)


def test_a_batched_fit_of_restarts_takes_each_restarts_own_steps_and_certificates():
    x, y = _noisy_product()
    alone = []
    for seed in range(3):
        seen, model = [], _student(seed)
        on_step = lambda i, loss, seen=seen: seen.append(loss) or True  # noqa: E731
        cert = converged(LevenbergMarquardt(model, x, y), 4, on_step=on_step, until=64)
        alone.append((seen, _weights(model), cert))
    # the restarts reject steps at different iterations: their damping must part ways
    rejected = [{i for i in range(1, len(seen)) if seen[i] == seen[i - 1]} for seen, _, _ in alone]
    assert len({frozenset(r) for r in rejected}) == 3
    models = [_student(seed) for seed in range(3)]
    seen = [[], [], []]
    on_steps = [lambda i, loss, s=s: s.append(loss) or True for s in seen]
    fitter = BatchedLevenbergMarquardt(models, x, y)
    certs = converged_batched(fitter, 4, on_steps=on_steps, until=64)
    # one certificate code for both (`certify.certify`): each member doubles, floors and stops
    # where it would alone, frozen while the others go on: the same iterations and verdicts
    # exactly, the losses, weights and certificates to rounding (`BATCHED_REL`)
    assert len({c.iterations for c in certs}) > 1  # they ended at different iterations
    for k, (losses, weights, cert) in enumerate(alone):
        assert len(seen[k]) == len(losses) and certs[k].iterations == cert.iterations
        torch.testing.assert_close(
            torch.tensor(seen[k], dtype=torch.float64),
            torch.tensor(losses, dtype=torch.float64),
            rtol=BATCHED_REL,
            atol=0,
        )
        torch.testing.assert_close(_weights(models[k]), weights, rtol=BATCHED_REL, atol=1e-11)
        assert certs[k].passed == cert.passed
        assert certs[k].first == pytest.approx(cert.first, rel=BATCHED_REL)
        assert certs[k].second == pytest.approx(cert.second, rel=BATCHED_REL)
        assert certs[k].gain == pytest.approx(cert.gain, rel=1e-6, abs=1e-12)


def test_a_member_stopped_by_the_callback_stays_frozen_while_the_others_go_on():
    x, y = _noisy_product()
    models, seen = [_student(seed) for seed in range(3)], []

    def on_step(i: int, losses: list[float]) -> list[bool]:
        seen.append(losses)
        return [True, i != 5, True]  # member 1 stops at iteration 5; a later True is ignored

    fitter = BatchedLevenbergMarquardt(models, x, y)
    fitter.run(14, on_step)
    # member 0 reached float64's floor before 14 iterations (frozen too, but `floored`)
    assert fitter.active.tolist() == [False, False, True]
    assert fitter.floored.tolist() == [True, False, False]
    assert len({step[1] for step in seen[5:]}) == 1  # its loss frozen from there
    stopped = _student(1)  # member 1 alone, stopped at the same iteration
    LevenbergMarquardt(stopped, x, y).run(14, lambda i, loss: i < 5)
    torch.testing.assert_close(_weights(models[1]), _weights(stopped), rtol=BATCHED_REL, atol=1e-11)
    for k in (0, 2):  # the others ran all 14 iterations
        alone = _student(k)
        LevenbergMarquardt(alone, x, y).run(14)
        torch.testing.assert_close(
            _weights(models[k]), _weights(alone), rtol=BATCHED_REL, atol=1e-11
        )
    frozen = _weights(models[1])
    fitter.run(5)  # a later run leaves it where it stopped
    assert torch.equal(_weights(models[1]), frozen)
    # a member stopped by its monitor is not converged; one at float64's floor is (member 0
    # floors at 11 iterations, member 1 at 17: stopped at 16, one short of it)
    fitter = BatchedLevenbergMarquardt([_student(seed) for seed in range(3)], x, y)
    on_steps = [lambda i, loss: True, lambda i, loss: i < 16, lambda i, loss: True]
    certs = converged_batched(fitter, 8, on_steps=on_steps)
    assert [c.passed for c in certs[:2]] == [True, False]
    assert fitter.floored.tolist()[:2] == [True, False]


@pytest.mark.parametrize(
    ("arm", "norm", "scaled", "ff"),
    [
        ("2", "rms", True, "none"),
        ("3", "layer", False, "none"),
        ("4", "none", False, "none"),
        ("e", "rms", True, "none"),
        ("mlp", "layer", True, "none"),
        ("[3,2]", "rms", False, "relu4x"),
    ],
)
def test_the_jacobian_by_layers_equals_the_per_example_reference(arm, norm, scaled, ff):
    """One forward and one backward per output, with each Linear's per-example outer products,
    give the Jacobian vmap(jacrev) gives, to float64 rounding, for every block the degree sweep
    fits, with norms, scaled residual branches and feed-forward sublayers."""
    from blocklab.jacobian import FlatParams
    from blocklab.models import Net, parse_arm

    torch.manual_seed(0)
    net = Net(
        parse_arm(arm), NetShape(3, 4, norm=norm, scaled_residual=scaled, ff=ff), 3, 2
    ).double()
    x, y = torch.randn(40, 3, dtype=torch.float64), torch.randn(40, 2, dtype=torch.float64)
    flat = FlatParams(net, x, y)
    theta = flat.get() + 0.01 * torch.randn(len(flat.get()), dtype=torch.float64)
    ref = flat.jacobian_by_examples(theta)
    got = flat.jacobian(theta)
    assert flat.path == "layers"
    # one pass each, nothing iterated: the two differ by the rounding of their sums (a few ulps
    # of the largest entry), so 1e-12 (thousands of ulps) holds on any kernel and thread count,
    # and a wrong layer's, example's or output's block misses by order one
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12 * float(ref.abs().max()))


def test_a_parameter_outside_a_linear_takes_the_reference_path():
    from blocklab.jacobian import FlatParams

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.gain = torch.nn.Linear(3, 1), torch.nn.Parameter(torch.ones(1))

        def forward(self, x):
            return self.gain * self.lin(x)

    net = Scaled().double()
    x, y = torch.randn(10, 3, dtype=torch.float64), torch.randn(10, 1, dtype=torch.float64)
    flat = FlatParams(net, x, y)
    jac = flat.jacobian(flat.get())
    assert flat.path == "examples" and jac.shape == (10, 5)


def test_gram_by_syrk_equals_the_matrix_product():
    from blocklab.jacobian import gram

    jac = torch.randn(300, 40, dtype=torch.float64)
    a = gram(jac)
    # syrk against gemm: one sum of 300 products per entry in different orders, apart by at most
    # 300 ulps of the sum of |products| (about 300 here): within 1e-10 absolute on any kernel;
    # the diagonal (about 300) within rtol 1e-12 too. A wrong triangle or transpose misses by O(1)
    torch.testing.assert_close(a, jac.T @ jac, rtol=1e-12, atol=1e-10)
    assert torch.equal(a, a.T)
    # the layer rule's layout: the transpose of a C-ordered J^T, read by syrk without a copy
    jac_t = jac.T.contiguous()
    assert not jac_t.T.is_contiguous()
    torch.testing.assert_close(gram(jac_t.T), a, rtol=1e-12, atol=1e-10)


def test_a_fit_at_float64s_floor_ends_there_certified_and_one_still_falling_does_not():
    x, y = _noisy_product()
    # past its minimum (about 15 iterations) no damped step predicts a decrease float64 resolves:
    # the fit ends there, certified whatever its last stretch gained, with the iterations it ran
    lm = LevenbergMarquardt(_student(0), x, y)
    cert = converged(lm, 64, tol=1e-9, until=4096)
    assert lm.floored and cert.passed and cert.iterations == lm.iterations < 128
    # the planted bad case: mid-descent, the same fit neither floors nor passes a tight tolerance
    lm = LevenbergMarquardt(_student(0), x, y)
    cert = converged(lm, 2, tol=1e-9)
    assert not lm.floored and not cert.passed and cert.iterations == 4


def test_an_lbfgs_fit_of_a_realizable_target_ends_certified_at_the_targets_rounding():
    # one degree-2 monomial, fitted exactly by a d=2 layer without norm or residual: L-BFGS
    # reaches the rounding of the targets, where it gains nothing more and, before the floor,
    # was certified in none of its runs
    g = torch.Generator().manual_seed(0)
    x = torch.rand(512, 2, generator=g, dtype=torch.float64) * 2 - 1
    y = (x[:, 0] * x[:, 1]).unsqueeze(1)  # (N, 1)
    torch.manual_seed(1)
    net = Net(parse_arm("2"), NetShape(1, 4, norm="none", residual=False), 2, 1).double()
    fitter = LBFGS(net, x, y)
    cert = converged(fitter, 64, tol=0.03, until=1024)
    assert fitter.floored and cert.passed and cert.second <= fitter.floor
    assert cert.iterations == fitter.iterations < 128
    # label noise keeps the loss far above the targets' rounding. The planted bad case: the fit
    # mid-descent neither floors nor passes; continued, it ends where its line search no longer
    # changes the loss (`fit.STALLED_ITERATIONS`), not at the targets' rounding
    noisy = y + 0.1 * torch.randn(y.shape, generator=g, dtype=torch.float64)
    fitter = LBFGS(
        Net(parse_arm("2"), NetShape(1, 4, norm="none", residual=False), 2, 1).double(), x, noisy
    )
    cert = converged(fitter, 4, tol=0.03)
    assert not fitter.floored and not cert.passed
    cert = converged(fitter, 16, tol=0.03, until=64)
    assert fitter.floored and fitter.stalled == fit.STALLED_ITERATIONS and cert.passed
    assert cert.second > 1e10 * fitter.floor


def _sweep_monomial(n: int = 1024):
    """The degree sweep's training set for one degree-2 monomial (`poly_target`, x1 * x2): its
    targets are rounded to float32, so a d=2 layer fits them to a loss of float32's rounding, a
    minimum far above the targets' float64 rounding (`fit.TARGET_FLOOR`)."""
    from blocklab.fitting import converge, network

    options = {"n_in": 2, "rank": 1, "max_exponent": 1, "n_train": 512, "n_val": 64}
    split = converge.training_set(network.task_data("poly_target", options, 0), n, 0)
    return split.x, split.y  # (N, 2), (N, 1) float64


def test_an_lbfgs_fit_ends_certified_where_its_line_search_no_longer_changes_the_loss():
    x, y = _sweep_monomial()
    for seed in range(2):
        # the line search finds no lower point at the minimum and leaves the fit where it was:
        # the loss repeats, and the fit ends there certified, long before its limit. Without the
        # floor nothing certifies it: a stretch that gains nothing with a gradient not ~0
        # (`certify.STATIONARY`) is a stall, and it would run to its limit
        fitter = LBFGS(_student(seed), x, y)
        cert = converged(fitter, 25, tol=0.03, until=400)
        assert fitter.floored and fitter.stalled == fit.STALLED_ITERATIONS
        assert cert.passed and cert.iterations == fitter.iterations < 100
        assert cert.second > 1e10 * fitter.floor  # far above the targets' rounding
        # Levenberg-Marquardt floors at the same minimum. Each stops within the loss's rounding
        # there, so the two agree far inside 1e-6 of the loss, which a fit short of it misses
        lm = LevenbergMarquardt(_student(seed), x, y)
        lm_cert = converged(lm, 25, tol=0.03, until=400)
        assert lm.floored and lm_cert.passed and lm_cert.iterations < 100
        assert cert.second == pytest.approx(lm_cert.second, rel=1e-6)
    # the planted bad case: the same fit mid-descent neither floors nor passes
    fitter = LBFGS(_student(0), x, y)
    cert = converged(fitter, 4, tol=0.03)
    assert not fitter.floored and fitter.stalled == 0 and not cert.passed


def test_an_lbfgs_fit_creeping_slowly_is_not_floored():
    # four d=2 layers without residual fit x1 * x2 slowly: past 48 iterations each gains a share
    # of 1e-4 of the loss or less, yet far more than the loss's rounding, so the fit goes on
    x, y = product_target()
    torch.manual_seed(4)
    net = Net(parse_arm("2"), NetShape(4, 2, norm="none", residual=False), 2, 1).double()
    fitter = LBFGS(net, x, y)
    losses = []
    cert = converged(fitter, 48, tol=1e-4, on_step=lambda i, loss: losses.append(loss) or True)
    assert not fitter.floored and fitter.stalled == 0
    assert not cert.passed and cert.iterations == len(losses) == 96
    late = [(a - b) / a for a, b in zip(losses[48:], [*losses[49:], cert.second], strict=True)]
    assert cert.gain < 0.01 and max(late) < 1e-4  # the premise: a creep
    assert min(late) > 1e3 * fit.loss_resolution(y.numel())  # every step resolved


@pytest.mark.parametrize("arm", ["2", "4", "mlp"])
def test_an_accepted_steps_kept_forward_pass_gives_the_fit_the_reference_flow_gives(
    arm, monkeypatch
):
    """`FlatParams.trial` keeps the layer rule's forward pass at a trial point, so an accepted
    step's Jacobian runs only its backward. It computes the same operations on the same values
    as the reference flow (the residuals by `functional_call`, then the Jacobian's own forward):
    a fit of 30 iterations, accepted and rejected steps among them, lands on the same
    parameters bit for bit; a pass kept at the wrong point would move the fit by order one."""
    from blocklab.jacobian import FlatParams

    def fit_once():
        torch.manual_seed(0)
        net = Net(parse_arm(arm), NetShape(3, 3, norm="rms", scaled_residual=True), 2, 1).double()
        g = torch.Generator().manual_seed(1)
        x = 2 * torch.rand(300, 2, generator=g, dtype=torch.float64) - 1  # (N, 2)
        y = torch.tanh(3 * x[:, :1] * x[:, 1:])  # (N, 1)
        lm = LevenbergMarquardt(net, x, y)
        lm.run(30)
        assert lm.flat.path == "layers"
        return lm.theta, lm.iterations

    fused, iterations = fit_once()

    def reference(self, theta):
        self.forget()
        with torch.no_grad():
            return self.residuals(theta)

    monkeypatch.setattr(FlatParams, "trial", reference)
    plain, _ = fit_once()
    assert iterations == 30 and torch.equal(fused, plain)

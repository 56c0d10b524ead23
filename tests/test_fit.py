"""The second-order fitters against known answers: a convex problem whose minimum is known in
closed form, a realizable target fitted to zero, a curve the fit hands its monitor, and the
convergence certificate, which an under-iterated fit fails."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from blocklab.engine.fit import FITTERS, LBFGS, LevenbergMarquardt, converged
from blocklab.models import Net, parse_arm


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


@pytest.mark.parametrize("method", sorted(FITTERS))
def test_a_convex_problem_reaches_its_closed_form_minimum(method):
    model, x, y, minimum = least_squares()
    loss = FITTERS[method](model, x, y).run(50)
    assert loss == pytest.approx(minimum, rel=1e-8)


def test_both_methods_agree_on_a_convex_problem():
    losses, weights = [], []
    for method in sorted(FITTERS):
        model, x, y, _ = least_squares(seed=1)
        losses.append(FITTERS[method](model, x, y).run(50))
        weights.append(torch.cat([model.weight.reshape(-1), model.bias]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-8)
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
    return Net(arm, 1, 2, 2, 1, norm="none", residual=False).double()


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
    short, first, second = converged(FITTERS[method](_student(2), x, y), iterations=10, tol=0.03)
    assert not short and second < 0.97 * first
    model, xs, ys, minimum = least_squares(seed=2)
    done, first, second = converged(FITTERS[method](model, xs, ys), iterations=50, tol=0.03)
    assert done and second <= first and second == pytest.approx(minimum, rel=1e-8)

"""The separable targets (`tasks/separable`): the rank they are drawn at is the rank the lab's
grid measures (`measures.separation_rank`, 512 templates a variable as `seprank-degree`), a
planted repeated factor lowers it, and `poly_target` on two inputs cannot reach such ranks."""

import pytest
import torch

from blocklab.errors import UserError
from blocklab.measures import separation_rank
from blocklab.tasks import make_task
from blocklab.tasks.base import moments
from blocklab.tasks.separable import Separable, _evaluator

SMALL = {"n_train": 256, "n_val": 64, "n_test": 128}
GRID = 512  # templates per variable: the grid `seprank-degree` measures networks on


def rank_of(fn) -> int:
    return separation_rank(fn, 2, 1, templates=GRID, vector=True).rank


@pytest.mark.parametrize("rank, frequencies", [(1, 1), (3, 2), (8, 4), (16, 8)])
def test_the_drawn_rank_is_the_measured_rank(rank, frequencies):
    task = make_task("separable", rank=rank, frequencies=frequencies, **SMALL)
    assert [rank_of(task.target_fn(seed)) for seed in range(3)] == [rank] * 3


def test_a_repeated_factor_is_measured_one_rank_lower():
    task = make_task("separable", rank=6, frequencies=4, **SMALL)
    factors = task._factors(torch.Generator().manual_seed(0))  # (2, R, 2K)
    factors[0, 5] = factors[0, 4]  # g_6 = g_5: y = ... + g_5 (h_5 / 5 + h_6 / 6)
    assert rank_of(_evaluator(factors)) == 5


def test_poly_target_on_two_inputs_stays_below_its_rank_option():
    # its monomials x1^a x2^b merge into a (max - min + 1)^2 coefficient matrix
    for lo, cap in ((1, 2), (0, 3)):
        task = make_task("poly_target", n_in=2, rank=16, min_exponent=lo, **SMALL)
        assert max(rank_of(task.target_fn(seed)) for seed in range(3)) <= cap


def test_target_fn_reproduces_the_splits_and_the_samples():
    task = make_task("separable", rank=4, **SMALL)
    d, fn = task.make(3), task.target_fn(3)
    raw = [fn(s.x.double())[:, None] for s in (d.train, d.val, d.test)]  # (n, 1)
    mean, std = moments(raw[0])
    for s, y in zip((d.train, d.val, d.test), raw, strict=True):
        torch.testing.assert_close(s.y, ((y - mean) / std).float(), rtol=1e-4, atol=1e-4)
    x, y = d.sample(512, torch.Generator().manual_seed(0))
    torch.testing.assert_close(y, ((fn(x)[:, None] - mean) / std).float(), rtol=1e-4, atol=1e-4)
    assert d.info["separation_rank"] == 4


def test_each_factor_has_unit_variance_on_the_inputs():
    factors = Separable(rank=3, frequencies=3)._factors(torch.Generator().manual_seed(1))
    x = (2 * torch.rand(200_000, dtype=torch.float64) - 1) * 3**0.5
    for side in range(2):
        for r in range(3):
            one = torch.zeros_like(factors)
            one[side, r] = factors[side, r]
            one[1 - side, r, 0] = 2**0.5  # the other factor: sqrt 2 cos(w x), variance 1
            y = _evaluator(one)(torch.stack([x, x.flip(0)], 1)) * (r + 1)
            assert y.var().item() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("opts", [{"rank": 0}, {"rank": 9, "frequencies": 4}, {"n_test": 0},
                                  {"noise": -1.0}])
def test_bad_options_are_refused(opts):
    with pytest.raises(UserError):
        make_task("separable", **opts)

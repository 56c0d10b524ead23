"""The shared scaling model with a multiplier per arm: it recovers planted multipliers, its
intervals cover them, m_2 / m_4 reads their ratio, and the shape test tells one exponent from
several."""

import math

import numpy as np
import pytest

from blocklab.experiments.degree_sweep.analysis import multiplier
from blocklab.experiments.degree_sweep.analysis.scaling import Observation
from blocklab.sample_size import units_for

PARAMS = (30, 60, 120, 240)


def observations(truth, alphas=None, seeds=8, noise=0.08, teachers=1, seed=1):
    """Losses L_inf + A (P / m)^-alpha times a log-normal factor per (unit, cell), at counts
    that differ per arm by up to 10% (the fits read actual counts)."""
    rng = np.random.default_rng(seed)
    out = []
    for arm, m in truth.items():
        alpha = (alphas or {}).get(arm, 0.6)
        for j, p in enumerate(PARAMS):
            p = int(p * (1 + 0.1 * rng.uniform(-1, 1)))
            for t in range(teachers):
                for s in range(seeds):
                    loss = 0.001 + 0.5 * (p / m) ** -alpha * math.exp(noise * rng.normal())
                    out.append(Observation(arm, j, p, (t, s), loss))
    return out


TRUTH = {"d=2": 1.3, "d=3": 1.0, "d=4": 1.15, "mlp": 2.0}


def test_planted_multipliers_are_recovered_inside_their_intervals():
    fit = multiplier.fit(observations(TRUTH), n_boot=200)
    assert fit.multipliers["d=3"] == multiplier.Interval(1.0, 1.0, 1.0)
    for arm, m in TRUTH.items():
        got = fit.multipliers[arm]
        assert got.bounded and got.low <= m <= got.high, (arm, got)
        assert got.value == pytest.approx(m, rel=0.1)
    ratio = fit.ratio_2_4
    assert ratio.low <= 1.3 / 1.15 <= ratio.high
    assert ratio.value == pytest.approx(fit.multipliers["d=2"].value / fit.multipliers["d=4"].value)
    assert fit.alpha.value == pytest.approx(0.6, rel=0.1)  # L_inf and alpha trade off a little
    assert fit.shape.shared_alpha_preferred and fit.shape.p > 0.05


def test_more_units_narrow_the_intervals():
    few = multiplier.fit(observations(TRUTH, seeds=4), n_boot=200)
    many = multiplier.fit(observations(TRUTH, seeds=12), n_boot=200)  # t_11 / sqrt(12) vs t_3 / 2
    for arm in ("d=2", "d=4", "mlp"):
        assert many.multipliers[arm].half_width_log() < few.multipliers[arm].half_width_log()


def test_exponents_that_differ_reject_a_constant_multiplier():
    alphas = {"d=2": 0.3, "d=3": 0.6, "d=4": 0.9, "mlp": 0.6}
    fit = multiplier.fit(observations(TRUTH, alphas, noise=0.02), n_boot=50)
    assert not fit.shape.shared_alpha_preferred and fit.shape.p < 0.01
    assert fit.arm_alpha["d=2"].high < fit.arm_alpha["d=4"].low


def test_an_arm_that_never_reaches_the_reference_is_unbounded():
    """A flat arm whose loss stays above every loss of the reference needs more parameters than
    any the fit allows: its multiplier sits on the bound and reads as unbounded."""
    obs = observations({"d=3": 1.0}, noise=0.02)
    obs += [Observation("d=2", j, p, (0, s), 0.5) for j, p in enumerate(PARAMS) for s in range(8)]
    fit = multiplier.fit(obs, n_boot=50)
    assert not fit.multipliers["d=2"].bounded
    assert math.isinf(fit.multipliers["d=2"].half_width_log())


def test_teachers_keep_their_seeds_in_the_bootstrap():
    units = [(t, s) for t in range(3) for s in range(4)]
    counts = multiplier._within_teacher_counts(units, 100, np.random.default_rng(0))
    for t in range(3):
        cols = [i for i, u in enumerate(units) if u[0] == t]
        assert (counts[:, cols].sum(1) == 4).all()  # each teacher keeps its 4 draws


def test_run_size_for_three_percent_grows_as_the_square_of_the_half_width():
    """The bootstrap's half width (df = inf) shrinks as 1 / sqrt(units)."""
    hw = math.log(1.06)  # +-6% with 4 units: +-3% needs 4 times as many
    assert units_for(hw, 4, df=math.inf) == math.ceil(4 * (hw / math.log(1.03)) ** 2)
    assert units_for(math.inf, 4) is None


def test_without_the_reference_there_is_no_fit():
    assert multiplier.fit(observations({"d=2": 1.0, "d=4": 1.0}), n_boot=10) is None

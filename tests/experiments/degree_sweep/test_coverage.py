"""The shared model's intervals hold the truth they claim: the per-unit t interval (the default)
covers at a degree sweep's smallest sizes, where the paired bootstrap measurably does not; and
the default's edges (a unit on the multiplier's bound, its progress, the run size it asks for)."""

import math

import numpy as np
import pytest
from scipy import stats

from blocklab.experiments.degree_sweep.analysis import coverage, multiplier
from blocklab.experiments.degree_sweep.analysis.scaling import Observation
from blocklab.sample_size import units_for

# Replications per design. The assertion "covers >= 90%" is read as: every quantity's observed
# coverage >= 85% and their mean >= 90%. With R = 80 the Monte Carlo SE of a 95% coverage is
# 2.4 points: a method that truly covers 95% fails a quantity's 85% with binomial probability
# ~1e-4, one that covers 90% with ~5%; the bootstrap at 3 units (about 70% in the simulation's
# full table) would need its mean over the quantities 3 SE above its measure to pass for cover.
R = 80
QUANTITIES = ("m(d=2)", "m(d=4)", "m(mlp)", "m2/m4", "alpha")


def _coverage(design, target):
    rows = coverage.simulate(design, R, methods=("units", "bootstrap"), n_boot=200, seed=7)
    return {
        (r.method, r.quantity): r.coverage
        for r in rows
        if r.target == target and r.quantity in QUANTITIES
    }


@pytest.mark.parametrize(
    ("units", "teachers", "target"),
    # one teacher: the interval can only speak of that teacher; with two, teachers are drawn
    # and the interval must hold the population's multiplier
    [(3, 1, "teachers"), (4, 2, "population")],
)
def test_the_unit_interval_covers_where_the_bootstrap_does_not(units, teachers, target):
    got = _coverage(coverage.Design(units, teachers, sigma=0.3), target)
    mine = [got[("units", q)] for q in QUANTITIES]
    assert min(mine) >= 0.85 and np.mean(mine) >= 0.90, dict(zip(QUANTITIES, mine, strict=True))
    # the planted bad case, on the same draws: 3 units give the bootstrap 10 distinct draws, and
    # resampling seeds within teachers never sees the spread between teachers
    boot = [got[("bootstrap", q)] for q in QUANTITIES]
    assert np.mean(boot) <= 0.85 and np.mean(boot) <= np.mean(mine) - 0.1, boot


def _observations(units=4, teachers=1, seed=3):
    rng = np.random.default_rng(seed)
    design = coverage.Design(units, teachers, sigma=0.1)
    return coverage.draw(design, rng)[0]


def test_a_unit_on_the_bound_makes_the_interval_unbounded():
    """One unit's d=2 needs 10^4 times the reference's parameters, beyond LOG_M_MAX: its own
    multiplier sits on the bound, so no finite interval holds d=2's, while mlp keeps its own."""
    rng = np.random.default_rng(0)
    obs = []
    for s in range(4):
        for arm, m in coverage.TRUTH.items():
            m = 1e4 if (arm, s) == ("d=2", 3) else m
            for depth in coverage.DEPTHS:
                p = coverage.PER_LAYER[arm] * depth
                loss = 10 * (p / m) ** -2.0 * math.exp(0.05 * rng.normal())
                obs.append(Observation(arm, depth, p, (0, s), loss))
    fit = multiplier.fit(obs)
    assert not fit.shape.differs
    m2 = fit.multipliers["d=2"]
    assert not m2.bounded and m2.low == 0 and math.isinf(m2.high) and math.isfinite(m2.value)
    assert not fit.ratio_2_4.bounded
    assert fit.multipliers["mlp"].bounded


def test_the_unit_fits_report_their_progress_and_degrees_of_freedom():
    calls = []
    fit = multiplier.fit(_observations(4, 2), on_draw=lambda *call: calls.append(call))
    assert calls == [(i, 4) for i in range(1, 5)]  # one call per unit's fit
    assert (fit.method, fit.teachers, fit.df, fit.n_boot, fit.n_failed) == ("units", 2, 1, 0, 0)
    # the interval is the pooled point +- t_1 se: symmetric in log about the point
    m = fit.multipliers["mlp"]
    assert math.log(m.high / m.value) == pytest.approx(math.log(m.value / m.low), rel=1e-9)
    with pytest.raises(ValueError, match="method"):
        multiplier.fit(_observations(), method="percentile")


def test_a_unit_without_an_arm_leaves_that_arm_to_the_others():
    """A unit that lost every d=4 cell (diverged) still informs the other arms; d=4's interval
    rests on the 3 units that have it."""
    obs = [o for o in _observations() if not (o.arm == "d=4" and o.unit == (0, 0))]
    fit = multiplier.fit(obs)
    assert fit.n_failed == 0 and fit.df == 3
    assert fit.multipliers["d=4"].bounded and fit.multipliers["d=2"].bounded


def test_run_size_solves_the_t_interval_at_the_new_degrees_of_freedom():
    """+-6% from 3 units (t with 2 df): +-3% needs the least n whose t_{n-1} s / sqrt(n) reaches
    it, s the units' spread this run measured."""
    hw, goal = math.log(1.06), math.log(1.03)
    t = lambda n: stats.t.ppf(0.975, n - 1)  # noqa: E731
    sd = hw / t(3) * math.sqrt(3)
    n = units_for(hw, 3)
    assert t(n) * sd / math.sqrt(n) <= goal < t(n - 1) * sd / math.sqrt(n - 1)
    # t_2 = 4.3 made this run's interval wide on a small spread: fewer units than 1 / sqrt(n)
    assert n < units_for(hw, 3, df=math.inf) == 12
    # teachers as the groups (4 units in 2 teachers, df 1): the run grows by whole teachers
    g = units_for(hw, 4, df=1) / 2
    sd = hw / t(2) * math.sqrt(2)
    assert g == int(g) and t(g) * sd / math.sqrt(g) <= goal < t(g - 1) * sd / math.sqrt(g - 1)
    assert units_for(hw, 4, df=0) is None

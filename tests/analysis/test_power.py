"""The t-test power calculation, against published values and against simulated tests."""

import numpy as np
import pytest
from scipy import stats

from blocklab.analysis.power import design_power, seeds_for, t_test_power
from blocklab.errors import UserError


def test_power_matches_published_values():
    # Cohen (1988): a one-sample (paired) test, d = 1, n = 10, one-sided 0.05: power 0.897
    assert t_test_power(1.0, 1.0, 10, 0.05, paired=True).power == pytest.approx(0.897, abs=2e-3)
    # two groups of 64, d = 0.5, two-sided 0.05 (one-sided 0.025): the textbook 0.80
    assert t_test_power(0.5, 1.0, 64, 0.025).power == pytest.approx(0.80, abs=5e-3)


@pytest.mark.parametrize("paired", [False, True])
def test_power_matches_a_simulation_of_the_test(paired):
    effect, sd, n, alpha, draws = 0.06, 0.04, 5, 0.01, 20000
    rng = np.random.default_rng(0)
    a = rng.normal(effect, sd, (draws, n))
    b = rng.normal(0.0, sd, (draws, n))
    if paired:  # sd is the sd of the differences
        p = stats.ttest_1samp(a, 0.0, axis=1, alternative="greater").pvalue
    else:
        p = stats.ttest_ind(a, b, axis=1, alternative="greater").pvalue
    simulated = float((p < alpha).mean())
    computed = t_test_power(effect, sd, n, alpha, paired=paired).power
    assert computed == pytest.approx(simulated, abs=0.015)


def test_seeds_for_is_the_fewest_that_reach_the_target():
    n = seeds_for(0.05, 0.04, 0.0125, 0.8, paired=True)
    assert t_test_power(0.05, 0.04, n, 0.0125, paired=True).power >= 0.8
    assert t_test_power(0.05, 0.04, n - 1, 0.0125, paired=True).power < 0.8
    assert seeds_for(1e-6, 1.0, 0.01, most=8) is None


@pytest.mark.parametrize(
    "args", [(0.0, 1.0, 5, 0.05), (1.0, -1.0, 5, 0.05), (1.0, 1.0, 1, 0.05), (1.0, 1.0, 5, 1.5)]
)
def test_power_refuses_what_it_cannot_compute(args):
    with pytest.raises(UserError):
        t_test_power(*args)


def test_design_power_pools_the_measured_stds_and_refuses_one_seed():
    power = design_power(0.09, 0.017, 4, 0.01, measured_sds=[0.03, 0.02, float("nan")])
    assert power["measured_sd"] == pytest.approx((0.0013 / 2) ** 0.5)
    assert power["power"] == t_test_power(0.09, 0.017, 4, 0.01).power
    assert power["power_at_measured_sd"] == t_test_power(0.09, power["measured_sd"], 4, 0.01).power
    one = design_power(0.09, 0.017, 1, 0.01, measured_sds=[])
    assert one["power"] is None and one["power_at_measured_sd"] is None and "2 seeds" in one["why"]

"""Scaling-curve fits and parameter multipliers, on synthetic curves with known answers."""

import json
import math

import numpy as np
import pytest

from blocklab.experiments.degree_sweep.analysis import scaling
from blocklab.experiments.degree_sweep.analysis.power_law import (
    ALPHA_MAX,
    fit_batch,
    fit_power_law,
    power_law,
)
from blocklab.experiments.degree_sweep.analysis.scaling import ArmFit, Observation, analyze

BUDGETS = (1000, 2000, 4000, 8000, 16000, 32000)


def observations(curves, teachers=2, seeds=8, noise=0.05, budgets=BUDGETS, seed=0, shared=False):
    """Losses curve(P) * (1 + noise * eps) with P the budget off by up to 2% per arm.

    shared: one eps per (unit, budget) for every arm, and the same P for every arm, so each arm's
    loss is the first arm's loss times a constant per arm.
    """
    rng = np.random.default_rng(seed)
    units = [(t, s) for t in range(teachers) for s in range(seeds)]
    common = 1 + noise * rng.standard_normal((len(budgets), len(units)))
    offset = 1 + 0.02 * rng.uniform(-1, 1, len(budgets))
    out = []
    for arm, curve in curves.items():
        if not shared:
            offset = 1 + 0.02 * rng.uniform(-1, 1, len(budgets))
        eps = common if shared else 1 + noise * rng.standard_normal((len(budgets), len(units)))
        for i, b in enumerate(budgets):
            p = int(round(b * offset[i]))
            for j, u in enumerate(units):
                out.append(Observation(arm, b, p, u, float(power_law(p, *curve) * eps[i, j])))
    return out


def test_power_law_is_vectorized():
    p = np.array([1.0, 4.0, 16.0])
    np.testing.assert_allclose(power_law(p, 0.5, 2.0, 0.5), [2.5, 1.5, 1.0])


@pytest.mark.parametrize("truth", [(0.05, 30.0, 0.7), (0.0, 30.0, 0.7), (0.2, 5e3, 1.8)])
def test_fit_recovers_exact_curves(truth):
    p = np.linspace(1000, 16000, 5)
    fit = fit_power_law(p, power_law(p, *truth))
    assert fit is not None
    c, a, alpha = fit
    assert c == pytest.approx(truth[0], abs=1e-6)
    assert a == pytest.approx(truth[1], rel=1e-5)
    assert alpha == pytest.approx(truth[2], rel=1e-6)


def test_fit_respects_bounds_and_needs_three_points():
    p = np.array([1000.0, 2000, 4000, 8000])
    assert fit_power_law(p[:2], [1.0, 0.5]) is None
    assert fit_power_law(p, [1.0, 0.5, math.nan, -1.0]) is None  # 2 usable points
    assert fit_power_law([1000, 1000, 2000], [1.0, 1.1, 0.5]) is None  # 2 distinct counts
    # losses that rise with P: a must stay > 0, L_inf below the smallest loss
    c, a, alpha = fit_power_law(p, [0.5, 0.6, 0.7, 0.8])
    assert 0 <= c < 0.5 and a > 0 and 0 < alpha <= ALPHA_MAX
    # a curve steeper than ALPHA_MAX is fit at the bound
    _, _, alpha = fit_power_law(p, power_law(p, 0.01, 1e20, 6.0))
    assert alpha == pytest.approx(ALPHA_MAX)


def test_vectorized_bootstrap_fit_matches_fit_power_law():
    # the intervals come from the batched fitter: it must be the same estimator as the point fit
    rng = np.random.default_rng(3)
    p = np.geomspace(1000, 32000, 6) * (1 + 0.02 * rng.uniform(-1, 1, 6))
    y = power_law(p, 0.05, 30, 0.7) * (1 + 0.08 * rng.standard_normal((200, 6)))
    mask = rng.uniform(size=y.shape) > 0.1  # some budgets dropped, as in a draw
    batch = np.column_stack(fit_batch(p, y, mask))
    for row, m, got in zip(y, mask, batch, strict=True):
        want = fit_power_law(p[m], row[m])
        if want is None:
            assert np.isnan(got).all()
        else:
            # two iterative solvers stopping at their own tolerances: 1e-4 of each estimate,
            # and 1e-7 absolute for an asymptote at its bound of zero
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)


def test_arm_fit_predict_and_budget_for_invert():
    fit = ArmFit("x", 0.05, 30.0, 0.7, {}, (), (), ())
    assert fit.predict(5000) == pytest.approx(0.05 + 30 * 5000**-0.7)
    assert fit.budget_for(fit.predict(5000)) == pytest.approx(5000)
    assert fit.budget_for(0.05) == math.inf
    assert fit.budget_for(0.01) == math.inf


def test_draws_are_hierarchical():
    units = [(0, 0), (0, 1), (0, 2), (7, 0), (7, 1), (7, 2)]
    counts = scaling._draw_counts(units, 500, np.random.default_rng(0))
    per_teacher = counts[:, :3].sum(1), counts[:, 3:].sum(1)
    assert set(per_teacher[0]) == {0, 3, 6}  # a teacher is drawn 0, 1 or 2 times, whole
    assert np.all(per_teacher[0] + per_teacher[1] == 6)
    one = scaling._draw_counts(units[:3], 500, np.random.default_rng(0))
    assert np.all(one.sum(1) == 3) and len({tuple(r) for r in one}) > 5  # plain bootstrap


CURVES = {"d=3": (0.0, 30.0, 0.7), "d=2": (0.0, 60.0, 0.7), "d=4": (0.02, 40.0, 0.6)}


def test_noisy_fits_cover_the_truth_and_the_multiplier_is_analytic():
    result = analyze(observations(CURVES), n_boot=1000, seed=1)
    assert result.reference == "d=3" and set(result.fits) == set(CURVES)
    for arm, truth in CURVES.items():
        fit = result.fits[arm]
        assert fit.n_failed == 0
        for name, value in zip(("L_inf", "a", "alpha"), truth, strict=True):
            lo, hi = fit.ci[name]
            assert lo <= value <= hi, (arm, name, lo, value, hi)
        assert fit.ci["alpha"][1] - fit.ci["alpha"][0] < 0.3  # informative, not just wide
    want = 2 ** (1 / 0.7)  # (a_X / a_ref)^(1/alpha) with L_inf = 0
    eff = result.efficiency["d=2"]
    assert eff.ci_low <= want <= eff.ci_high
    assert eff.multiplier == pytest.approx(want, rel=0.05)
    assert eff.ci_high - eff.ci_low < 0.2 * want
    assert not eff.extrapolated and eff.infinite_share == 0
    assert eff.ref_params == pytest.approx(math.sqrt(min(result.fits["d=3"].params) * 32000), 0.03)
    ref = result.efficiency["d=3"]
    assert (ref.multiplier, ref.ci_low, ref.ci_high) == (1.0, 1.0, 1.0)
    assert result.resolution is not None and result.resolution > 0


def test_actual_parameter_counts_are_used():
    # the same curve, measured at counts 2% above nominal: the fit must not read them as nominal
    curves = {"d=3": (0.0, 30.0, 0.7)}
    obs = [
        Observation("d=3", b, int(b * 1.02), (0, s), power_law(b * 1.02, *curves["d=3"]))
        for b in BUDGETS
        for s in range(2)
    ]
    fit = analyze(obs, n_boot=0).fits["d=3"]
    assert fit.params == tuple(float(int(b * 1.02)) for b in BUDGETS)
    assert fit.a == pytest.approx(30.0, rel=1e-4)


def test_multiplier_is_infinite_below_the_arms_floor():
    ref = (0.0, 30.0, 0.7)
    target = power_law(math.sqrt(1000 * 32000), *ref)
    curves = {"d=3": ref, "mlp": (2 * target, 30.0, 0.7)}
    result = analyze(observations(curves, noise=0.02), n_boot=200)
    eff = result.efficiency["mlp"]
    assert eff.multiplier == math.inf and eff.extrapolated
    assert eff.infinite_share > 0.9 and eff.ci_high == math.inf
    d = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert d["efficiency"]["mlp"]["multiplier"] is None
    assert d["efficiency"]["mlp"]["ci_high"] is None
    assert d["efficiency"]["d=3"]["multiplier"] == 1.0
    assert d["fits"]["mlp"]["ci"]["alpha"] == list(result.fits["mlp"].ci["alpha"])


def test_draws_are_paired_across_arms():
    # d=2 is 1.06 x d=3 (the size of effect to resolve); shared noise cancels only if paired
    curves = {"d=3": (0.03, 30.0, 0.7), "d=2": (0.03 * 1.06, 30.0 * 1.06, 0.7)}
    width = {}
    for shared in (True, False):
        result = analyze(observations(curves, noise=0.1, shared=shared), n_boot=500)
        eff = result.efficiency["d=2"]
        width[shared] = eff.ci_high - eff.ci_low
    assert width[True] < width[False] / 4, width  # about 1/20 over data seeds 0-9


def test_missing_units_are_skipped_and_short_arms_left_out():
    obs = observations({"d=3": (0.0, 30.0, 0.7), "d=4": (0.0, 40.0, 0.7)}, seeds=4)
    obs = [o for o in obs if not (o.arm == "d=4" and o.budget >= 4000)]  # d=4: 2 budgets
    assert obs[0].arm == "d=3" and obs[0].budget == 1000
    obs[0] = Observation("d=3", 1000, obs[0].params, obs[0].unit, math.nan)  # diverged
    result = analyze(obs, n_boot=50)
    assert set(result.fits) == {"d=3"} and set(result.efficiency) == {"d=3"}
    d3 = [o.loss for o in obs[1:] if o.arm == "d=3" and o.budget == 1000]
    assert len(d3) == 7
    assert result.fits["d=3"].means[0] == pytest.approx(np.mean(d3))
    assert result.fits["d=3"].n_failed == 0


def test_missing_reference_gives_no_efficiency():
    result = analyze(observations({"d=2": (0.0, 60.0, 0.7)}), n_boot=20)
    assert set(result.fits) == {"d=2"}
    assert result.reference is None and result.efficiency == {} and result.resolution is None
    assert result.to_dict()["reference"] is None


def test_bad_observations_are_refused():
    o = Observation("d=3", 1000, 1010, (0, 0), 0.1)
    with pytest.raises(ValueError, match="pairing"):
        analyze([o, o])
    with pytest.raises(ValueError, match="> 0"):
        analyze([Observation("d=3", 1000, 1010, (0, 0), 0.0)])


def test_same_seed_same_result():
    obs = observations(CURVES, seeds=4)
    first, again = analyze(obs, n_boot=200, seed=5), analyze(obs, n_boot=200, seed=5)
    assert first == again and first.to_dict() == again.to_dict()
    other = analyze(obs, n_boot=200, seed=6)
    assert other.efficiency["d=2"].ci_low != first.efficiency["d=2"].ci_low

"""Depth-to-width analysis against the paper's Table 4 and eq. 10-11, by hand and by sampling."""

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy import optimize

from blocklab.analysis.depth_width import (
    ALREADY_BETTER,
    FOUND,
    NEVER_WORSE,
    PAPER_FIT,
    PAPER_TRANSITIONS,
    TOO_FEW,
    Fit,
    OptimalShape,
    Point,
    advise,
    find_transition,
    fit_transitions,
    n_transition,
    optimal_depth,
    optimal_shape,
    transitions,
)
from blocklab.errors import UserError


def two_digits(x):
    return f"{x:.1e}"


def cut(x, decimals):
    """x with its digits truncated, as the paper prints them."""
    return math.floor(x * 10**decimals) / 10**decimals


def test_table4_reproduces_eq11():
    fit = fit_transitions(**PAPER_TRANSITIONS)
    assert fit.a == pytest.approx(5.0397, abs=1e-4)
    assert fit.b == pytest.approx(0.05550, abs=1e-5)
    # the paper truncates its printed digits: a = 5.0397 -> 5.039, chi2_red, R^2 alike below
    assert cut(fit.a, 3) == PAPER_FIT.a and round(fit.b, 4) == PAPER_FIT.b
    for got, paper in zip(np.ravel(fit.cov), np.ravel(PAPER_FIT.cov), strict=True):
        assert two_digits(got) == two_digits(paper)
    # sigma_a = 0.0307 is printed 0.030, sigma_b = 0.00132 is printed 1.3e-3
    assert cut(fit.sigma_a, 3) == 0.030 and round(fit.sigma_b, 4) == 0.0013
    # 0.8549: rounds to 0.855, truncates to the printed 0.854
    assert round(fit.chi2_red, 3) == 0.855 and cut(fit.chi2_red, 3) == 0.854
    assert fit.dof == 3 and fit.n_points == 5 and fit.depths == PAPER_FIT.depths
    # 0.99856: rounds to 0.999, truncates to the printed 0.998
    assert fit.r2 == pytest.approx(0.9986, abs=1e-4)
    assert cut(fit.r2, 3) == PAPER_FIT.r2


def test_table4b_is_the_log_of_table4a():
    dx, ddx = np.array(PAPER_TRANSITIONS["widths"]), np.array(PAPER_TRANSITIONS["errors"])
    assert np.round(np.log(dx), 2).tolist() == [5.37, 5.73, 6.08, 6.35, 6.71]
    assert np.allclose(ddx / dx, [2.80e-2, 3.90e-2, 4.59e-2, 2.10e-2, 1.94e-2], rtol=5e-3)


def test_weighted_fit_by_hand():
    # L = 1, 2, 3; y = 0, 1, 3; sigma_y = 1, 1, 1/2 so weights 1, 1, 4.
    # S = 6, Sx = 15, Sxx = 41, Sy = 13, Sxy = 38, det = 6 * 41 - 15^2 = 21.
    # b = (6 * 38 - 15 * 13) / 21 = 33/21, a = (41 * 13 - 15 * 38) / 21 = -37/21,
    # residuals 4/21, -8/21, 1/21: chi2 = (16 + 64 + 4 * 1) / 441 = 4/21 on 1 dof.
    # weighted mean y = 13/6: total = 169/36 + 49/36 + 4 * 25/36 = 53/6, R^2 = 1 - (4/21)/(53/6).
    y, sigma = np.array([0.0, 1.0, 3.0]), np.array([1.0, 1.0, 0.5])
    fit = fit_transitions([1, 2, 3], np.exp(y), sigma * np.exp(y))
    assert fit.b == pytest.approx(33 / 21) and fit.a == pytest.approx(-37 / 21)
    assert np.allclose(fit.cov, np.array([[41, -15], [-15, 6]]) / 21)
    assert fit.chi2 == pytest.approx(4 / 21) and fit.dof == 1
    assert fit.chi2_red == pytest.approx(4 / 21)
    assert fit.r2 == pytest.approx(1 - (4 / 21) / (53 / 6))
    # eq. 59 read literally: y-bar = (1/n) sum(y / sigma^2) = (0 + 1 + 12) / 3 = 13/3 and
    # total = (13/3)^2 + (10/3)^2 + 4 (4/3)^2 = 37, a different (and meaningless) R^2
    assert fit.r2 != pytest.approx(1 - (4 / 21) / 37)


def test_fit_recovers_a_line_and_its_covariance():
    rng = np.random.default_rng(7)
    a, b, draws = 4.8, 0.06, 2000
    L = np.arange(4.0, 44.0, 5.0)
    sigma = rng.uniform(0.02, 0.06, len(L))
    fits = []
    for _ in range(draws):
        y = a + b * L + sigma * rng.standard_normal(len(L))
        fits.append(fit_transitions(L, np.exp(y), sigma * np.exp(y)))
    est = np.array([(f.a, f.b) for f in fits])
    cov = np.array(fits[0].cov)
    assert all(np.allclose(f.cov, cov) for f in fits)  # depends on L and sigma only
    se = np.sqrt(np.diag(cov) / draws)
    assert np.all(np.abs(est.mean(axis=0) - [a, b]) < 4 * se)
    assert np.allclose(np.cov(est.T), cov, rtol=0.1, atol=0)
    assert np.mean([f.chi2_red for f in fits]) == pytest.approx(1.0, abs=0.05)


def test_fit_rejects_bad_input():
    for args in [
        ([6, 12], [200, 300], [0, 5]),
        ([6, 12], [200, -300], [5, 5]),
        ([6, 6, 6], [200, 210, 220], [5, 5, 5]),
        ([6], [200], [5]),
        ([6, 12], [200, 300], [5]),
        ([6, 12], [200, math.nan], [5, 5]),
    ]:
        with pytest.raises(UserError):
            fit_transitions(*args)
    two = fit_transitions([6, 12], [200, 300], [5, 5])
    assert two.dof == 0 and math.isnan(two.chi2_red)


def test_propagated_error_matches_sampling():
    rng = np.random.default_rng(11)
    ab = rng.multivariate_normal([PAPER_FIT.a, PAPER_FIT.b], PAPER_FIT.cov, size=200_000)
    for L in (12, 30):
        N, dN = n_transition(L)
        sampled = 12 * L * np.exp(2 * ab[:, 0] + 2 * ab[:, 1] * L)
        assert sampled.std() == pytest.approx(dN, rel=0.03)
        assert np.median(sampled) == pytest.approx(N, rel=0.01)
    N, dN = n_transition(100)
    assert dN / N == pytest.approx(0.2, abs=0.01)  # section 5.3
    Ns, dNs = n_transition(np.array([12.0, 30.0]))
    assert np.allclose(Ns, [n_transition(12)[0], n_transition(30)[0]])
    assert np.allclose(dNs, [n_transition(12)[1], n_transition(30)[1]])
    with pytest.raises(UserError):
        n_transition(0)


@pytest.mark.parametrize("n", [1e6, 3e7, 1e9, 1e10, 1e11, 1e12, 1e13])
def test_optimal_depth_inverts_n_transition(n):
    L = optimal_depth(n)
    assert n_transition(L)[0] == pytest.approx(n, rel=1e-9)

    def log_gap(x):
        return math.log(12 * x) + 2 * PAPER_FIT.a + 2 * PAPER_FIT.b * x - math.log(n)

    root = optimize.brentq(log_gap, 1e-9, 1e4, xtol=1e-13)
    assert abs(L - root) <= 1e-9 * root


def test_optimal_shape():
    shapes = [optimal_shape(n) for n in np.logspace(1, 13, 40)]
    for n, (depth, width) in zip(np.logspace(1, 13, 40), shapes, strict=True):
        assert isinstance(depth, int) and depth >= 1
        assert width == pytest.approx(math.sqrt(n / (12 * depth)))
    assert shapes[0].depth == 1  # below one layer's worth the real root is < 0.5
    assert all(s.depth <= t.depth for s, t in zip(shapes, shapes[1:], strict=False))
    exact = [optimal_depth(n) for n in np.logspace(1, 13, 40)]
    assert all(np.diff(exact) > 0)
    depth, width = optimal_shape(1e12)
    assert isinstance(optimal_shape(1e12), OptimalShape)
    assert (depth, width) == (round(optimal_depth(1e12)), math.sqrt(1e12 / (12 * depth)))
    other = fit_transitions([6, 12, 18], [200, 260, 340], [6, 6, 6])
    assert optimal_shape(1e9, other) != optimal_shape(1e9)


def test_optimal_depth_refuses():
    for b in (0.0, -0.01):
        with pytest.raises(UserError, match="does not grow with depth"):
            optimal_depth(1e9, dataclasses.replace(PAPER_FIT, b=b))
    for n in (0, -5.0, math.nan, math.inf, "1e9", None, True):
        with pytest.raises(UserError):
            optimal_shape(n)


def test_depth_sigma_matches_sampling():
    n = 1e10
    advice = advise(n)
    rng = np.random.default_rng(3)
    ab = rng.multivariate_normal([PAPER_FIT.a, PAPER_FIT.b], PAPER_FIT.cov, size=20_000)
    roots = [optimal_depth(n, dataclasses.replace(PAPER_FIT, a=a, b=b)) for a, b in ab]
    assert np.std(roots) == pytest.approx(advice.depth_sigma, rel=0.1)
    assert np.mean(roots) == pytest.approx(advice.depth_exact, rel=0.01)
    assert advice.width_sigma == pytest.approx(
        advice.width * advice.depth_sigma / (2 * advice.depth)
    )


def test_advice_range_and_flags():
    # below L = 300 the paper fit's relative error stays under 100%, so the scan is not cut short
    depths = np.arange(1, 300)
    N, dN = n_transition(depths)
    sizes = []
    for n in (1e7, 1e9, 1e10, 1e12):
        advice = advise(n)
        inside = depths[np.abs(N - n) <= dN]
        assert np.all(np.diff(inside) == 1)
        expected = (inside[0], inside[-1]) if len(inside) else (advice.depth, advice.depth)
        assert advice.depth_range == expected
        sizes.append(len(inside))
    assert 0 in sizes and max(sizes) > 1  # both the fallback and a real range were exercised
    inside = n_transition(18)[0]
    assert not advise(inside).extrapolated and advise(inside).depth == 18
    assert advise(1e12).extrapolated and advise(1e3).extrapolated
    d = json.loads(json.dumps(advise(1e11).to_dict(), allow_nan=False))
    assert d["depth"] == advise(1e11).depth and Fit.from_dict(d["fit"]) == PAPER_FIT


def test_fit_round_trip():
    for fit in (
        PAPER_FIT,
        fit_transitions(**PAPER_TRANSITIONS),
        fit_transitions([6, 9], [3, 4], [1, 1]),
    ):
        text = json.dumps(fit.to_dict(), allow_nan=False)
        back = Fit.from_dict(json.loads(text))
        assert back.to_dict() == fit.to_dict()
        assert back.a == fit.a and back.cov == fit.cov


@pytest.mark.parametrize(
    "change",
    [
        {"b": None},
        {"a": math.nan},
        {"a": "5"},
        {"chi2": math.inf},
        {"cov": [[9.4e-4, -3.74e-5], [-3.0e-5, 1.7e-6]]},
        {"cov": [[1.0, 2.0], [2.0, 1.0]]},
        {"cov": [[1.0, 0.0]]},
        {"cov": [[1.0, 0.0], [0.0, 1.0], 5]},
        {"cov": [[1.0, 0.0], 5]},
        {"cov": [[1.0, 0.0], [0.0, math.nan]]},
        {"dof": 2.5},
        {"depths": [6, 12]},
        {"source": 3},
        {"extra": 1},
    ],
)
def test_fit_from_dict_rejects(change):
    d = PAPER_FIT.to_dict() | change
    if change == {"b": None}:
        del d["b"]
    with pytest.raises(UserError) as info:
        Fit.from_dict(d)
    assert "\n" not in str(info.value)


def test_fit_from_dict_rejects_non_objects():
    with pytest.raises(UserError, match="missing keys: b"):
        Fit.from_dict({k: v for k, v in PAPER_FIT.to_dict().items() if k != "b"})
    with pytest.raises(UserError):
        Fit.from_dict([1, 2])


SHALLOW, DEEP = 6, 12


def curves(shallow_loss, deep_loss, widths=(100, 120, 140, 160, 180, 200), std=0.01, seeds=3):
    """Points at the same sizes N = 12 L dx^2 for both depths, losses given per size."""
    sizes = [12 * SHALLOW * w**2 for w in widths]
    shallow = [Point(n, w, shallow_loss(n), std, seeds) for n, w in zip(sizes, widths, strict=True)]
    deep = [Point(n, math.sqrt(n / (12 * DEEP)), deep_loss(n), std, seeds) for n in sizes]
    return shallow, deep


def loss(n):
    return 5.0 - 0.2 * math.log(n)


def search(shallow, deep, **kw):
    return find_transition(shallow, deep, depth_shallow=SHALLOW, depth_deep=DEEP, **kw)


def test_transition_between_the_bracketing_widths():
    cut = 12 * SHALLOW * 150**2
    shallow, deep = curves(loss, lambda n: loss(n) - (0.2 if n > cut else 0.0))
    result = search(shallow, deep)
    assert result.reason == FOUND
    t = result.transition
    assert (t.width, t.error) == ((140 + 160) / 2, (160 - 140) / 2)
    assert t.n_params == pytest.approx(12 * SHALLOW * (140**2 + 160**2) / 2)
    assert (t.depth_shallow, t.depth_deep) == (SHALLOW, DEEP)
    assert [c.significant for c in result.comparisons] == [False] * 3 + [True] * 3
    assert all(c.p_value == pytest.approx(0.5) for c in result.comparisons[:3])


def test_shuffled_input_and_later_dips_do_not_matter():
    cut = 12 * SHALLOW * 130**2
    shallow, deep = curves(loss, lambda n: loss(n) - (0.2 if n > cut else 0.0))
    shallow[-1] = dataclasses.replace(shallow[-1], mean_loss=deep[-1].mean_loss)
    result = search(shallow[::-1], deep[::-1])
    assert result.transition.width == 130 and result.transition.error == 10


def test_no_transition_reasons():
    shallow, deep = curves(loss, lambda n: loss(n) - 0.2)
    assert search(shallow, deep).reason == ALREADY_BETTER
    assert search(shallow, deep).transition is None
    shallow, deep = curves(loss, lambda n: loss(n) + 0.001)
    assert search(shallow, deep).reason == NEVER_WORSE
    shallow, deep = curves(loss, lambda n: loss(n) - 0.2)
    result = search(shallow, deep[-1:])
    assert result.reason == TOO_FEW and len(result.comparisons) == 1
    assert search(shallow, deep, alpha=0.0).reason == NEVER_WORSE
    one_seed = [dataclasses.replace(p, n_seeds=1) for p in shallow]
    assert search(one_seed, deep).reason == TOO_FEW


def test_noiseless_points_compare_by_sign():
    shallow, deep = curves(
        loss, lambda n: loss(n) - (0.01 if n > 12 * SHALLOW * 150**2 else 0), std=0
    )
    result = search(shallow, deep)
    assert [c.p_value for c in result.comparisons] == [1.0] * 3 + [0.0] * 3
    assert result.transition.width == 150


def test_deep_curve_is_interpolated_in_log_size():
    # deep loss falls linearly in log10 N from 1 at 1e5 to 0 at 1e7, measured at the ends only
    deep = [Point(1e5, 30, 1.0, 0.01, 3), Point(1e7, 300, 0.0, 0.01, 3)]
    shallow = [
        Point(1e5, 40, 1.0, 0.01, 3),
        Point(3e5, 70, 0.80, 0.01, 3),
        Point(1e7, 400, 0.30, 0.01, 3),
        Point(2e7, 560, 0.30, 0.01, 3),
    ]
    result = search(shallow, deep)
    assert [c.n_params for c in result.comparisons] == [1e5, 3e5, 1e7]
    assert result.comparisons[1].deep_mean == pytest.approx(1 - math.log10(3) / 2)
    # 0.80 against the log interpolation 0.761 is worse; against a linear one (0.98) it would not be
    assert result.transition.width == (40 + 70) / 2


def test_sizes_just_past_the_deep_curve_take_its_end_point():
    deep = [Point(1e5, 30, 1.0, 0.01, 3), Point(1e6, 100, 0.5, 0.02, 3)]
    shallow = [
        Point(0.9e5, 40, 1.0, 0.01, 3),  # 10% below the first deep size: compared with it
        Point(1.1e6, 130, 0.6, 0.01, 3),  # 10% above the last: compared with it
        Point(1.3e6, 150, 0.6, 0.01, 3),  # 30% above: too far, dropped
        Point(0.8e5, 35, 1.0, 0.01, 3),  # 20% below: dropped
    ]
    comps = search(shallow, deep).comparisons
    assert [c.n_params for c in comps] == [0.9e5, 1.1e6]
    assert (comps[0].deep_mean, comps[0].deep_std) == (1.0, 0.01)
    assert (comps[1].deep_mean, comps[1].deep_std) == (0.5, 0.02)


def test_single_seed_points_are_skipped():
    cut = 12 * SHALLOW * 150**2
    shallow, deep = curves(loss, lambda n: loss(n) - (0.2 if n > cut else 0.0))
    deep[2] = dataclasses.replace(deep[2], std_loss=math.nan, n_seeds=1)
    result = search(shallow, deep)
    # only the shallow point measured exactly at the single-seed size drops out; its neighbours
    # match measured deep points and are not touched by the missing spread
    assert [c.width for c in result.comparisons] == [100, 120, 160, 180, 200]
    assert all(math.isfinite(c.p_value) for c in result.comparisons)
    assert (result.transition.width, result.transition.error) == (140, 20)


def test_transitions_over_adjacent_depths():
    cut = 12 * SHALLOW * 150**2
    shallow, deep = curves(loss, lambda n: loss(n) - (0.2 if n > cut else 0.0))
    deeper = [dataclasses.replace(p, mean_loss=p.mean_loss - 0.2) for p in deep]
    results = transitions({24: deeper, SHALLOW: shallow, DEEP: deep})
    assert [(r.depth_shallow, r.depth_deep) for r in results] == [(6, 12), (12, 24)]
    assert results[0].transition.width == 150 and results[1].reason == ALREADY_BETTER
    assert transitions({6: shallow}) == []


def test_point_and_pair_validation():
    for bad in [
        (0, 10, 1.0, 0.1, 3),
        (1e6, -1, 1.0, 0.1, 3),
        (1e6, 10, 1.0, -0.1, 3),
        (1e6, 10, 1.0, 0.1, 0),
    ]:
        with pytest.raises(UserError):
            Point(*bad)
    with pytest.raises(UserError):
        Point(1e6, 10, 1.0, math.nan, 2)
    assert (
        Point(1e6, 10, 1.0, math.nan, 1).n_seeds
        == 1
        == Point(1e6, 10, 1.0, 0.1, np.int64(1)).n_seeds
    )
    shallow, deep = curves(loss, loss)
    with pytest.raises(UserError):
        find_transition(shallow, deep, depth_shallow=12, depth_deep=6)
    with pytest.raises(UserError):
        search(shallow, deep + deep[:1])


def test_advice_gives_the_nearest_buildable_width_and_what_it_spends():
    advice = advise(1e9)
    assert advice.buildable_width % 64 == 0 and advice.multiple == 64
    assert abs(advice.buildable_width - advice.width) <= 32  # the nearest multiple
    assert advice.buildable_params == 12 * advice.depth * advice.buildable_width**2
    small = advise(1e5)  # a width below 256 is rounded to a multiple of 8
    assert small.multiple == 8 and abs(small.buildable_width - small.width) <= 4
    assert advise(1e9, multiple=128).buildable_width % 128 == 0

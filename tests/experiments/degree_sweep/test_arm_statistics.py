"""Seed statistics, verdicts, theory, plots and the report, on synthetic rows."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from blocklab import theory
from blocklab.analysis.stats import holm, interval
from blocklab.analysis.summary import drawn_interval, positive_interval
from blocklab.experiments.degree_sweep.analysis.arms import (
    Outcome,
    compare,
    layer_degrees,
    ranking_vs_theory,
    summarize_arms,
)
from blocklab.experiments.degree_sweep.report import (
    plots,
    table,
    tabulate,
    to_json,
    verdicts,
    write_report,
)

DEGREE = {
    "d=2": 2.0,
    "d=e": math.e,
    "d=3": 3.0,
    "d=4": 4.0,
    "mix[3,2,3]": 8 / 3,
    "mlp": None,
    "A": 2.0,
    "B": 3.0,
    "C": 4.0,
    "D": 5.0,
}


def row(
    arm,
    seed,
    value,
    *,
    task="teacher",
    budget=24576,
    status="done",
    metric="mse",
    steps=100,
    curve=None,
):
    diverged = status == "diverged"
    curve = curve or [1.0, 0.5, value if value and value > 0 else 0.1]
    return dict(
        task=task,
        budget=budget,
        arm=arm,
        degree=DEGREE[arm],
        seed=seed,
        status=status,
        metric=metric,
        higher_is_better=metric == "accuracy",
        test_metric=None if diverged else value,
        steps_to_threshold=None if diverged else steps,
        threshold=0.3,
        max_steps=300,
        curve_step=[0, 100, 200],
        curve_val_loss=curve,
        block_params=budget - 100,
        other_params=577,
        depth=3,
        width=32,
        lr=1e-3,
    )


def arms(values, **kw):
    """Rows from {arm: [value per seed]}, seeds 0, 1, ..."""
    return [
        row(arm, seed, float(v), **kw) for arm, vs in values.items() for seed, v in enumerate(vs)
    ]


def by_arm(verdict):
    return {c.arm: c for c in verdict.comparisons}


# ---- stats


def test_interval_matches_hand_computation():
    x = [1.0, 2.0, 4.0, 7.0]
    mean, std, lo, hi, n = interval(x, level=0.9)
    hand_std = math.sqrt(sum((v - 3.5) ** 2 for v in x) / 3)
    half = stats.t.ppf(0.95, df=3) * hand_std / 2.0
    assert (mean, n) == (3.5, 4)
    assert std == pytest.approx(hand_std)
    assert (lo, hi) == pytest.approx((3.5 - half, 3.5 + half))


def test_interval_of_one_value_has_nan_spread_and_of_none_is_empty():
    mean, std, lo, hi, n = interval([5.0])
    assert mean == 5.0 and n == 1 and all(math.isnan(v) for v in (std, lo, hi))
    assert interval([])[4] == 0 and math.isnan(interval([])[0])


def test_holm_step_down_by_hand():
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])


def test_consistent_shift_beats_while_equal_noise_does_not():
    rng = np.random.default_rng(7)
    base = rng.normal(1.0, 0.3, 5)  # seed spread far above the shift: only pairing sees it
    shifted = base + 0.1 + rng.normal(0, 0.01, 5)
    [v] = compare(arms({"A": base, "B": shifted}))
    assert v.best == "A" and v.beats == ("B",)
    b = by_arm(v)["B"]
    assert b.p_holm < 0.05 and b.mean_diff == pytest.approx(-0.1, abs=0.02)
    said = verdicts.text(v)
    assert "A is best" in said and "it beats B (p=" in said and "alpha=0.05" in said

    rng = np.random.default_rng(1234)
    [v] = compare(arms({"A": rng.normal(1.0, 0.1, 5), "B": rng.normal(1.0, 0.1, 5)}))
    assert v.beats == () and not by_arm(v)[v.comparisons[0].arm].significant
    assert "no significant difference between arms" in verdicts.text(v)


def test_higher_is_better_is_respected():
    values = {"A": [0.6, 0.62, 0.61], "B": [0.8, 0.83, 0.81]}
    [acc] = compare(arms(values, metric="accuracy"))
    [mse] = compare(arms(values, metric="mse"))
    assert acc.best == "B" and acc.beats == ("A",)
    assert mse.best == "A" and mse.beats == ("B",)


def test_holm_makes_a_borderline_p_insignificant_among_several_comparisons():
    base = np.array([1.0, 1.5, 0.7, 1.2, 0.9])
    borderline = base + np.array([0.12, 0.30, 0.08, 0.25, 0.06])  # p = 0.028
    noisy = {
        "C": base + np.array([0.5, -0.4, 0.6, -0.3, 0.1]),
        "D": base + np.array([-0.2, 0.6, -0.3, 0.5, 0.0]),
    }
    [alone] = compare(arms({"A": base, "B": borderline}))
    p = by_arm(alone)["B"].p_raw
    assert p < 0.05 and by_arm(alone)["B"].p_holm == p and alone.beats == ("B",)

    [v] = compare(arms({"A": base, "B": borderline, **noisy}))
    b = by_arm(v)["B"]
    assert v.best == "A" and b.p_raw == pytest.approx(p)
    assert b.p_holm == pytest.approx(3 * p) and not b.significant and v.beats == ()


def test_pairing_uses_only_common_seeds():
    rows = [row("A", s, 1.0 + 0.1 * s) for s in range(5)]
    # B's seeds 5 and 6 have no partner; if they were used, B (mean 2.2) would look far worse
    rows += [row("B", s, 1.2 + 0.1 * s + 0.01 * (s % 2)) for s in range(2, 5)]
    rows += [row("B", s, 5.0) for s in (5, 6)]
    [v] = compare(rows)
    b = by_arm(v)["B"]
    a_common = np.array([1.2, 1.3, 1.4])
    b_common = np.array([1.4, 1.51, 1.6])
    assert b.n_pairs == 3
    assert b.mean_diff == pytest.approx(np.mean(a_common - b_common))
    assert b.p_raw == pytest.approx(stats.ttest_rel(a_common, b_common).pvalue)


def test_best_mean_losing_on_the_common_seeds_is_not_a_win():
    rows = [row("A", s, v) for s, v in enumerate([0.1, 0.1, 0.1, 1.0, 1.1])]
    rows += [row("B", s, v) for s, v in zip([3, 4, 5, 6], [0.9, 1.0, 2.0, 2.0], strict=True)]
    [v] = compare(rows)
    b = by_arm(v)["B"]
    assert v.best == "A" and b.n_pairs == 2 and b.significant and v.beats == ()
    assert v.outcome is Outcome.BEATS_NONE and v.beaten_by == ("B",)
    said = verdicts.text(v)
    assert "beats no arm" in said and "but B is better on the 2 seeds both finished" in said


def test_diverged_seeds_are_excluded_and_counted():
    rows = arms({"A": [1.0, 1.1, 0.9, 1.05], "B": [1.5, 1.6, 1.4, 1.55]})
    rows[5] = row("B", 1, None, status="diverged")
    rows += [row("C", s, None, status="diverged") for s in range(4)]
    by = {s.arm: s for s in summarize_arms(rows)}
    assert (by["B"].n, by["B"].n_diverged, by["B"].n_seeds) == (3, 1, 4)
    assert by["B"].mean == pytest.approx(np.mean([1.5, 1.4, 1.55]))
    assert by["C"].n == 0 and by["C"].n_diverged == 4 and math.isnan(by["C"].mean)
    [v] = compare(rows)
    assert by_arm(v)["B"].n_pairs == 3 and "C" not in by_arm(v)
    assert v.diverged_all == ("C",) and "C diverged in all seeds" in verdicts.text(v)


def test_identical_arms_give_p_one():
    [v] = compare(arms({"A": [1.0, 1.2, 0.8], "B": [1.0, 1.2, 0.8]}))
    c = v.comparisons[0]
    assert (c.p_raw, c.p_holm, c.significant) == (1.0, 1.0, False)
    assert "no significant difference" in verdicts.text(v)


def test_untestable_arm_is_named():
    rows = arms({"A": [1.0, 1.1, 0.9], "B": [2.0]})
    [v] = compare(rows)
    assert v.untestable == ("B",) and math.isnan(by_arm(v)["B"].p_raw)
    assert "B untestable" in verdicts.text(v)


def test_summaries_sorted_by_degree_with_mlp_last_and_steps_counted(tmp_path):
    rows = arms({"mlp": [1.0, 1.1], "d=4": [1.0, 1.2], "d=2": [1.3, 1.1]})
    rows[0]["steps_to_threshold"] = None
    s = summarize_arms(rows)
    assert [x.arm for x in s] == ["d=2", "d=4", "mlp"]
    assert (s[2].n_reached, s[2].steps_mean) == (1, 100)
    path = write_report(tmp_path, tabulate(rows, 0.05), title="t", config={}, provenance={})
    assert "reached 1/2" in path.read_text()


def test_ranking_follows_h_and_spearman():
    # measured order equal to h's: h(e) > h(3) > h([3, 2, 3]) > h(2)
    rows = arms(
        {"d=3": [0.1, 0.11], "mix[3,2,3]": [0.2, 0.21], "d=2": [0.3, 0.31], "d=e": [0.05, 0.06]}
    )
    [r] = ranking_vs_theory(summarize_arms(rows))
    assert r.predicted == ("d=e", "d=3", "mix[3,2,3]", "d=2")
    assert r.measured == r.predicted and r.rho == pytest.approx(1.0)
    [r2] = ranking_vs_theory(summarize_arms(arms({"d=2": [1, 1.1], "d=3": [1, 1.2]})))
    assert math.isnan(r2.rho)
    assert layer_degrees("mix[3,2,3]", 8 / 3) == (3.0, 2.0, 3.0)
    assert layer_degrees("mix[3,2,3]", 2.0) == (2.0,)  # label disagrees with degree: trust degree


def test_bad_rows_are_refused():
    rows = arms({"A": [1.0, 1.1]})
    with pytest.raises(ValueError, match="two trials"):
        compare(rows + [row("A", 0, 1.0)])
    with pytest.raises(ValueError, match="mixes metrics"):
        compare(rows + [row("B", 0, 1.0, metric="accuracy")])


# ---- theory


def test_h_peaks_at_e_and_orders_integers():
    grid = np.linspace(1.1, 6.0, 2001)
    assert max(theory.h(d) for d in grid) <= theory.h(math.e)
    assert theory.optimal_degree() == math.e
    assert theory.h(3) > theory.h(2) and theory.h(3) > theory.h(4)
    assert theory.h(2) == theory.h(4)  # ln 4 / 4 = 2 ln 2 / 4, exactly in floating point too
    assert theory.h([3, 3]) == pytest.approx(theory.h(3))
    assert theory.h([3, 2, 3]) == pytest.approx((2 * math.log(3) + math.log(2)) / 8)
    with pytest.raises(ValueError):
        theory.h(0)


def test_degree_proxy_and_layers_match_direct_computation():
    for d, budget, n_dx in [(2, 8, 2), (3, 36, 4), (2.5, 50, 10)]:
        direct = math.log10((d ** (1 / d)) ** (budget / n_dx))
        assert theory.degree_proxy_log10(d, budget, n_dx) == pytest.approx(direct)
    # 2 layers of degree 3: degree 3^2 = 9 (eq. 16) at budget 2 * 3 * N_dx (eq. 4)
    assert theory.layers_at_budget(3, 600, 100) == 2
    assert theory.degree_proxy_log10(3, 600, 100) == pytest.approx(math.log10(9))


# ---- plots and report


def synthetic_rows():
    rng = np.random.default_rng(0)
    level = {"d=2": 0.5, "d=3": 0.3, "mix[3,2,3]": 0.35, "mlp": 0.6}
    rows = []
    for budget in (6144, 24576):
        for arm, mu in level.items():
            for seed in range(3):
                v = mu * (1.2 if budget == 6144 else 1.0) + rng.normal(0, 0.02)
                curve = list(np.exp(-np.linspace(0, 2, 3)) + v)
                rows.append(row(arm, seed, v, budget=budget, curve=curve, steps=100 + seed))
    rows[7] = row(rows[7]["arm"], rows[7]["seed"], None, budget=6144, status="diverged")
    return rows


def _is_png(path):
    return path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_report(tmp_path):
    rows = synthetic_rows()
    path = write_report(
        tmp_path / "out",
        tabulate(rows),
        title="Degree sweep",
        config={"seeds": 3},
        provenance={"commit": "abc123"},
    )
    text = path.read_text()
    assert path.name == "report.md"
    for name in ("metric_vs_degree.png", "learning_curves.png", "ranking_vs_theory.png"):
        assert _is_png(path.parent / name) and f"]({name})" in text
    for v in compare(rows):
        assert verdicts.claim(v) in text
    for section in (
        "## Question",
        "## Paired tests per budget",
        "## Results",
        "## Theory beside measurement",
        "## Configuration",
        "## Provenance",
    ):
        assert section in text
    assert "commit: abc123" in text and '"seeds": 3' in text and "1/3" in text


def test_to_json_is_strict_json():
    rows = synthetic_rows()
    rows.append(row("d=2", 9, None, status="diverged"))
    data = to_json(tabulate(rows))
    json.dumps(data, allow_nan=False)
    assert len(data["summaries"]) == 8 and len(data["verdicts"]) == 2


def test_plots_survive_a_single_arm_and_uneven_curves(tmp_path):
    rows = [row("d=3", 0, 0.2), row("d=3", 1, None, status="diverged")]
    rows[0]["curve_step"], rows[0]["curve_val_loss"] = [0, 50], [1.0, 0.2]
    rows.append(row("mlp", 0, 0.5))
    tables = tabulate(rows)
    for fn, args in [
        (plots.metric_vs_degree, (tables.summaries, tables.bands)),
        (plots.learning_curves, (rows,)),
        (plots.ranking_vs_theory, (tables.summaries,)),
    ]:
        assert _is_png(fn(*args, tmp_path / f"{fn.__name__}.png"))


def test_mean_curve_interpolates_and_does_not_extend_short_runs():
    a = row("d=3", 0, 0.2, curve=[1.0, 0.5, 0.2])
    b = row("d=3", 1, 0.2)
    b["curve_step"], b["curve_val_loss"] = [0, 50, 100], [3.0, 2.0, 1.0]
    steps, mean, lo, hi = plots._mean_curve([a, b])
    assert list(steps) == [0, 100, 200]
    assert mean[:2] == pytest.approx([2.0, 0.75]) and mean[2] == pytest.approx(0.2)
    assert (lo[2], hi[2]) == (0.2, 0.2)


def test_the_terminal_table_fits_100_columns_and_the_report_keeps_every_column(tmp_path):
    rows = arms({"d=2": [0.5, 0.4, 0.45], "mix[3,2,3]": [0.6, 0.5, 0.55], "mlp": [1.5, 0.1, 3]})
    text = table(summarize_arms(rows))
    assert max(map(len, text.splitlines())) <= 100
    assert text.splitlines()[0].startswith("teacher: test mse")  # named once, above the table
    assert "embed+readout" not in text
    assert "1.5 ± 1.5 [0.0, " in text  # no interval below zero
    path = write_report(tmp_path, tabulate(rows, 0.05), title="t", config={}, provenance={})
    assert "embed+readout" in path.read_text() and "| 577 |" in path.read_text()


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"d=2": [0.5, 0.4], "d=3": [0.6, 0.5]}, set()),
        ({"d=2": [0.5, 0.4], "mix[3,2,3]": [0.6, 0.5]}, {"mixed stack"}),
        ({"d=2": [0.5, 0.4], "mlp": [0.6, 0.5]}, {"non-polynomial (mlp), band: CI"}),
    ],
)
def test_the_degree_plot_names_only_the_arms_that_ran(values, expected, monkeypatch, tmp_path):
    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, path: figures.append(fig) or path.name)
    tables = tabulate(arms(values))
    plots.metric_vs_degree(tables.summaries, tables.bands, tmp_path / "m.png")
    labels = {t.get_text() for t in figures[0].axes[0].get_legend().get_texts()}
    assert {x for x in labels if not x.startswith("B = ")} == expected


def test_a_positive_metric_keeps_its_plotted_interval_positive(monkeypatch, tmp_path):
    """Two seeds of an MSE: the t-interval (t = 12.7) reaches below zero, the plotted bootstrap
    interval stays within the seeds' range."""
    [s] = summarize_arms(arms({"d=3": [0.2, 0.6]}))
    assert s.lo < 0 and s.values == (0.2, 0.6)
    lo, hi = positive_interval(s.values)
    assert 0.2 <= lo <= s.mean <= hi <= 0.6
    [err_lo], [err_hi] = plots._yerr([s], tabulate(arms({"d=3": [0.2, 0.6]})).bands)
    assert s.mean - err_lo >= 0.2 and s.mean + err_hi <= 0.6
    # accuracy keeps its t-interval
    [a] = summarize_arms(arms({"d=3": [0.2, 0.6]}, metric="accuracy"))
    assert drawn_interval(a) == (a.lo, a.hi)

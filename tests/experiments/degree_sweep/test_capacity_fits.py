"""The capacity analysis of second-order fits: their design checks (converged, generalization,
and neither plateau nor learning-rate edge), per-budget statistics, the JSON contract's new keys
and the referee's summary, on synthetic rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blocklab.experiments.degree_sweep.analysis import capacity, cells, design, fit_checks
from blocklab.experiments.degree_sweep.analysis.arms import compare
from blocklab.experiments.degree_sweep.analysis.referee import referee_summary

DEGREE = {"d=2": 2.0, "d=3": 3.0, "d=4": 4.0, "mlp": None}
BUDGETS = (1000, 2000, 4000, 8000)
SCALE = {"d=3": 1.0, "d=2": 1.2, "d=4": 1.1, "mlp": 2.0}  # parameters each needs against d=3
STEPS = 64
# every trial's three restarts, as multiples of its best: restart 0 is not the best one
RESTARTS = (1.01, 1.0, 1.3)


def fit_row(arm, budget, seed, train, *, teacher=0, optimizer="lm", converged=True, gap=1.05):
    """A finished second-order fit: its best restart reached `train`, the test loss is `gap`
    times that, and its curves fall geometrically to both."""
    steps = list(range(0, STEPS + 1, 8))
    fall = [train * (1 + 9 * 0.5**i) for i in range(len(steps))]
    restarts = [train * k for k in RESTARTS]
    return {
        "task": "teacher",
        "budget": budget,
        "arm": arm,
        "degree": DEGREE[arm],
        "layer_degrees": [] if DEGREE[arm] is None else [DEGREE[arm]],
        "seed": seed,
        "teacher": teacher,
        "status": "done",
        "metric": "mse",
        "higher_is_better": False,
        "test_metric": train * gap,
        "test_loss": train * gap,
        "block_params": budget,
        "other_params": 40,
        "total_params": budget + 40,
        "depth": 2,
        "width": 8,
        "lr": 3e-3,
        "schedule": "wsd",
        "max_steps": STEPS,
        "steps_to_threshold": None,
        "threshold": 1e-4,
        "diverged_step": None,
        "plateau_improvement": 0.001 if converged else 0.2,
        "optimizer": optimizer,
        "train_loss": train,
        "converged": converged,
        "examples": 32 * budget,
        "restart_train_losses": restarts,
        "restart_spread": (float(np.median(restarts)) - train) / train,
        "curve_step": steps,
        "curve_val_loss": [v * gap for v in fall],
        "curve_train_loss": fall,
    }


def fit_rows(seeds=3, unconverged=0, overfit=None, optimizer="lm"):
    """Fits following L = 0.02 + 5 (P / k)^-0.5 per arm, with small noise; the first
    `unconverged` rows lack the certificate; the cell `overfit` tests 1.5x its training loss."""
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(seeds):
        for arm, k in SCALE.items():
            for b in BUDGETS:
                train = (0.02 + 5.0 * (b / k) ** -0.5) * math.exp(rng.normal(0, 0.003))
                gap = 1.5 if overfit == (arm, b) else 1.05
                rows.append(fit_row(arm, b, seed, train, optimizer=optimizer, gap=gap))
    for r in rows[:unconverged]:
        r["converged"], r["plateau_improvement"] = False, 0.2
    return rows


def referee_rows(rows, ratio=1.02):
    """The other optimizer's fit of each cell's first trial, `ratio` times the main trial's
    restart 0 training loss."""
    return [
        {
            **r,
            "referee": True,
            "optimizer": "lbfgs" if r["optimizer"] == "lm" else "lm",
            "train_loss": r["restart_train_losses"][0] * ratio,
            "restart_train_losses": [r["restart_train_losses"][0] * ratio],
            "restart_spread": 0.0,
            "max_steps": 4 * STEPS,
            "curve_step": [4 * s for s in r["curve_step"]],
        }
        for r in rows
        if r["seed"] == 0 and r["teacher"] == 0
    ]


def analyze(rows, referee=(), converge_tol=0.03, answer=False):
    """The scaling model's status on `rows` (`answer` False: these tests plant its checks;
    `test_matched` plants the matched answer's)."""
    return capacity.analyze(
        rows,
        {},
        list(BUDGETS),
        tol=0.03,
        n_boot=50,
        paired=compare(rows),
        width=8,
        converge_tol=converge_tol,
        referee=referee,
        answer=answer,
    )


def names(result):
    return [c.name for c in result.checks]


def check(result, name):
    return next(c for c in result.checks if c.name == name)


def test_fits_are_judged_by_their_certificates_not_a_plateau():
    result = analyze(fit_rows())
    assert result.second_order
    assert names(result) == [
        "budget_span",
        "converged",
        "search",
        "curve",
        "generalization",
        "width_matched",
        "replicates",
        "resolution",
    ]
    assert result.passed and result.decision.outcome is capacity.Outcome.VERDICT


def test_adam_runs_keep_plateau_and_lr_edge_and_get_no_fit_checks():
    rows = fit_rows(optimizer="adam")
    for r in rows:  # what an Adam trial's row holds of the fits' fields
        r.update(train_loss=None, converged=None, restart_train_losses=[], restart_spread=None)
    result = analyze(rows)
    assert not result.second_order
    assert names(result) == [
        "budget_span",
        "plateau",
        "curve",
        "lr_not_at_edge",
        "width_matched",
        "replicates",
        "resolution",
    ]
    s = result.stats["d=3"][1000]
    assert math.isnan(s["train_mean"]) and math.isnan(s["restart_spread"])
    assert math.isnan(s["converged_fraction"])


def test_rows_without_an_optimizer_are_adam_runs():
    rows = [{k: v for k, v in r.items() if k != "optimizer"} for r in fit_rows(seeds=2)]
    assert not cells.second_order(rows)
    assert "plateau" in names(analyze(rows))


@pytest.mark.parametrize(
    ("unconverged", "outcome"), [(0, "passed"), (4, "edge"), (5, "edge"), (10, "failed")]
)
def test_converged_needs_the_band_of_its_share_to_clear_90_percent(unconverged, outcome):
    """48 trials: all certified, the Wilson band [92.6%, 100%] clears 90%; 4 or 5 without the
    certificate (91.7%, 89.6%) straddle it; 10 (79.2%, [65.7%, 88.3%]) miss it."""
    c = check(analyze(fit_rows(unconverged=unconverged), converge_tol=0.05), "converged")
    assert c.trials == 48 and c.share == pytest.approx((48 - unconverged) / 48)
    assert c.outcome == outcome and c.passed is (outcome == "passed")
    assert c.band[0] <= c.share <= c.band[1] and c.certificate_tol == 0.05
    assert c.tol == pytest.approx((1 + fit_checks.RESOLUTION) ** c.alpha - 1)
    if unconverged:  # the first rows are d=3's cells of seed 0, each 1 of its 3 trials
        assert c.least[0][2] == pytest.approx(2 / 3)


def test_exactly_90_percent_converged_is_at_the_edge():
    """36 of 40: the figure sits on the threshold, its band on both sides of it."""
    rows = fit_rows(seeds=5)[:40]
    for r in rows[:4]:
        r["converged"], r["plateau_improvement"] = False, 0.2
    c = design.design_checks(rows, {}, list(BUDGETS), 0.03)[1]
    assert c.name == "converged" and c.share == pytest.approx(0.9) and c.outcome == "edge"


def test_generalization_fails_where_one_cell_tests_above_1_2x_its_training_loss():
    good = check(analyze(fit_rows()), "generalization")
    assert good.passed and good.worst == pytest.approx(1.05, rel=1e-9)
    result = analyze(fit_rows(overfit=("d=4", 1000)))  # the smallest budget: no rise in budget
    bad = check(result, "generalization")
    assert not bad.passed and [c[:2] for c in bad.failing] == [("d=4", 1000)]
    assert bad.worst == pytest.approx(1.5, rel=1e-9)
    assert [c.name for c in result.decision.failed] == ["generalization"]


def test_budget_stats_of_fits():
    rows = fit_rows()
    s = capacity.budget_stats(rows, 0.03)["d=2"][4000]
    cell = [r for r in rows if r["arm"] == "d=2" and r["budget"] == 4000]
    assert s["converged_fraction"] == 1.0
    assert s["train_mean"] == pytest.approx(np.mean([r["train_loss"] for r in cell]))
    assert s["restart_median_mean"] == pytest.approx(1.01 * s["train_mean"])
    assert s["restart_spread"] == pytest.approx(0.01)


def test_arms_json_adds_the_fit_keys_and_keeps_the_old_ones():
    budgets = analyze(fit_rows()).arms_json()["d=3"]["budgets"]["1000"]
    old = {"mean", "std", "ci_low", "ci_high", "plateaued_fraction", "n", "block_params"}
    assert old | {"params", "within_teacher_std", "between_teacher_std"} <= set(budgets)
    assert {"converged_fraction", "train_mean", "restart_spread"} <= set(budgets)
    assert budgets["converged_fraction"] == 1.0 and budgets["restart_spread"] == pytest.approx(0.01)


def test_referee_summary_compares_restart_0_with_the_other_optimizer():
    rows = fit_rows()
    referee = referee_rows(rows, ratio=1.02)
    referee[0]["train_loss"] = referee[0]["restart_train_losses"][0] * 0.9 / 1.02  # 10% lower
    summary = referee_summary(rows, referee)
    assert len(summary.cells) == len(SCALE) * len(BUDGETS)
    first = summary.cells[0]
    main = next(
        r for r in rows if (r["arm"], r["budget"], r["seed"]) == (first.arm, first.budget, 0)
    )
    assert (first.main, first.referee) == ("lm", "lbfgs")
    assert first.main_train == pytest.approx(1.01 * main["train_loss"])  # restart 0, not the best
    assert first.gap == pytest.approx(-0.1)
    assert all(c.gap == pytest.approx(0.02) for c in summary.cells[1:])
    assert summary.median_gap == pytest.approx(0.02) and summary.max_gap == pytest.approx(0.1)
    assert first.main_converged is True and first.referee_converged is True


def test_referee_summary_without_referee_rows_or_a_loss():
    rows = fit_rows(seeds=1)
    assert referee_summary(rows, []) is None
    referee = referee_rows(rows)
    for r in referee:
        r.update(status="diverged", train_loss=None)
    summary = referee_summary(rows, referee)
    assert all(math.isnan(c.gap) for c in summary.cells)
    assert math.isnan(summary.median_gap) and math.isnan(summary.max_gap)
    assert analyze(rows, referee).referee == summary


def test_search_fails_where_the_second_half_of_the_restarts_finds_much_lower_losses():
    """Restarts that keep finding lower losses: the best of the first half lies 50% above the
    best of all, far past the slack the claimed resolution allows, so more restarts would
    move the curve."""
    good = check(analyze(fit_rows()), "search")
    assert good.passed and max(g for _, g, _ in good.gaps) == pytest.approx(0.01)
    rows = fit_rows()
    for r in rows:
        if r["arm"] == "d=4":
            r["restart_train_losses"] = [
                r["train_loss"] * 1.5,
                r["train_loss"] * 1.6,
                r["train_loss"],
            ]
    bad = check(analyze(rows), "search")
    gaps = {a: g for a, g, _ in bad.gaps}
    assert not bad.passed and gaps["d=4"] == pytest.approx(0.5) and gaps["d=3"] < bad.tol
    one = [{**r, "restart_train_losses": [r["train_loss"]]} for r in fit_rows()]
    assert not check(analyze(one), "search").passed  # one restart measures no search


def test_a_stalled_fit_is_not_converged_however_small_its_gain():
    from blocklab.experiments.degree_sweep.analysis.fit_checks import _gained_at_most

    row = {"status": "done", "converged": False, "plateau_improvement": 0.0}
    assert not _gained_at_most(row, 0.1)  # no gain and no certificate: every step rejected
    assert _gained_at_most({**row, "plateau_improvement": 0.05}, 0.1)
    assert _gained_at_most({**row, "converged": True}, 0.0)


def test_the_figures_name_only_what_ran_and_no_interval_they_cannot_have(tmp_path, monkeypatch):
    """The scaling legend gives the reference no interval ([1, 1]) and no arm a NaN one; the
    relative plot names an mlp line only where an mlp ran."""
    from blocklab.experiments.degree_sweep.analysis.arms import summarize_arms
    from blocklab.experiments.degree_sweep.report import curves, plots

    figures = []
    monkeypatch.setattr(curves, "save", lambda fig, path: figures.append(fig))
    monkeypatch.setattr(plots, "save", lambda fig, path: figures.append(fig))
    rows = fit_rows()
    curves.scaling_curves(analyze(rows), tmp_path / "s.png", "mse")
    labels = [t.get_text() for t in figures[-1].axes[0].get_legend().get_texts()]
    assert "d=3: m = 1 (the reference)" in labels
    assert not any("nan" in label or "[1, 1]" in label for label in labels), labels
    for with_mlp in (True, False):
        ran = [r for r in rows if with_mlp or r["arm"] != "mlp"]
        plots.ranking_vs_theory(summarize_arms(ran), tmp_path / "r.png")
        xlabels = " ".join(ax.get_xlabel() for ax in figures[-1].axes)
        assert ("dashed line: mlp" in xlabels) == with_mlp and "degree d" in xlabels

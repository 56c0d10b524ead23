"""The next command's estimated cost (`degree_sweep.analysis.cost.next_cost`), read off this run's
fit rows: more iterations continue the fits the budget cut and refit the rungs above them; more
units cost what a unit cost; any other change is not estimated."""

from __future__ import annotations

import pytest

from blocklab.experiments.degree_sweep.analysis.cells import Change
from blocklab.experiments.degree_sweep.analysis.cost import next_cost
from blocklab.experiments.degree_sweep.report.status_line import cost_words


def _row(trial: str, depth: int, converged, losses=None, seconds=10.0, teacher=0, seed=0):
    """One rung of a ladder trial with two chains, each 100 iterations."""
    losses = losses or [0.1, 0.2]
    return {
        "id": trial, "status": "done", "depth": depth, "seconds": seconds, "teacher": teacher,
        "seed": seed, "restart_iterations": [100, 100], "restart_converged": list(converged),
        "restart_train_losses": losses,
    }  # fmt: skip


def test_more_iterations_continue_cut_fits_and_refit_the_rungs_above_them_on_their_chain():
    rows = [
        _row("a", 1, [True, False]),  # chain 1 cut: continues; chain 0 stands
        _row("a", 2, [True, True]),  # chain 1 refits above its continued fit; chain 0 stands
    ]
    cost = next_cost(rows, [Change("train.steps", 100, 200)])
    assert (cost.continued, cost.refit, cost.kept) == (1, 1, 2)
    # 10 s over 200 iterations a rung: 0.05 s an iteration; 100 more, then 200 for the refit
    assert cost.core_seconds == pytest.approx(0.05 * 100 + 0.05 * 200)
    assert "1 fit(s) continue, 1 above them fit again, 2 stand" in cost_words(cost)


def test_a_diverged_chain_stands_and_more_units_cost_what_a_unit_cost():
    rows = [_row("a", 1, [False, False], losses=[None, 0.3], teacher=0)]
    rows += [_row("b", 1, [True, True], teacher=1)]
    cost = next_cost(rows, [Change("train.steps", 100, 200)])
    assert (cost.continued, cost.refit, cost.kept) == (1, 0, 3)
    units = next_cost(rows, [Change("teachers", 2, 4)])
    assert units.units == 2 and units.core_seconds == pytest.approx(2 * 10.0)


def test_a_change_of_shape_is_not_estimated():
    rows = [_row("a", 1, [True, False])]
    assert next_cost(rows, [Change("budgets", (18,), (18, 36))]) is None
    assert next_cost(rows, []) is None
    assert cost_words(None) is None


def test_where_chains_continue_the_best_one_every_chain_above_a_continued_fit_fits_again():
    rows = [_row("a", 1, [True, False]), _row("a", 2, [True, True])]
    cost = next_cost(rows, [Change("train.steps", 100, 200)], chains="best")
    assert (cost.continued, cost.refit, cost.kept) == (1, 2, 1)

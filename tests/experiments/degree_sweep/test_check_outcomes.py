"""Every design check is decided with its figure's own 95% band: passed (the whole band clears
the threshold), edge (it straddles it) or failed (the whole band misses it), planted here at all
three for each check whose figure has a band, with the status each gives: a failed check NO
VERDICT, a check at its edge INCONCLUSIVE naming it, and never a VERDICT. Exact figures are
passed or failed. The shape test's "no constant multiplier" holds only where it rejects with
every unit left out in turn."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_capacity import BUDGETS as ADAM_BUDGETS
from test_capacity import _analyze as analyze_adam
from test_capacity import _rows as adam_rows
from test_capacity_fits import analyze, fit_rows

from blocklab.experiments.degree_sweep.analysis import capacity, cells
from blocklab.experiments.degree_sweep.report.capacity import capacity_json, detail
from blocklab.experiments.degree_sweep.report.status_line import status_line

NO, INC = capacity.Outcome.NO_VERDICT, capacity.Outcome.INCONCLUSIVE

@pytest.fixture(autouse=True)
def scaling_status(monkeypatch):
    """These tests plant the scaling model's checks and read the status they give: the matched
    answer, which leads wherever arms meet (`test_matched` plants its checks), is off here."""
    from blocklab.experiments.degree_sweep.analysis import matched

    monkeypatch.setattr(matched, "applies", lambda rows: False)



def _check(result, name):
    return next(c for c in result.checks if c.name == name)


def _status(result, name, outcome):
    """The status a check's outcome gives, and what the line and the JSON say of it."""
    d = result.decision
    verdict, line = status_line(result)
    payload = capacity_json(result)
    entry = next(c for c in payload["design_checks"] if c["name"] == name)
    assert entry["outcome"] == outcome and entry["passed"] is (outcome == "passed")
    if outcome == "failed":
        assert d.outcome is NO and not verdict and line.startswith("NO VERDICT")
        assert name in [c.name for c in d.failed]
    elif outcome == "edge":
        assert d.outcome is INC and not verdict and line.startswith("INCONCLUSIVE")
        assert name in [c.name for c in d.edges] and name in line
        assert payload["at_edge"] and name in payload["at_edge"]
        lo, hi = entry["band"]
        assert lo <= entry["threshold"] <= hi
    else:
        assert name not in [c.name for c in d.failed + d.edges]


def _converged(k):
    return fit_rows(unconverged=k)


def _generalization(spread):
    """fit_rows with d=2 at 1000's three units testing at 1.05 x (1 - spread, 1, 1 + spread)
    their training loss; spread None: 1.5x each (an overfitted cell)."""
    rows = fit_rows()
    cell = [r for r in rows if (r["arm"], r["budget"]) == ("d=2", 1000)]
    for r, k in zip(cell, (-1, 0, 1), strict=True):
        gap = 1.5 if spread is None else 1.05 * (1 + k * spread)
        r["test_loss"] = r["test_metric"] = r["train_loss"] * gap
    return rows


def _search(gaps):
    """fit_rows whose d=4 trials' first restart lands `gaps[i % len(gaps)]` above the best."""
    rows = fit_rows()
    d4 = [r for r in rows if r["arm"] == "d=4"]
    for i, r in enumerate(d4):
        r["restart_train_losses"] = [r["train_loss"] * (1 + gaps[i % len(gaps)]), r["train_loss"]]
    for r in rows:
        if r["arm"] != "d=4":
            r["restart_train_losses"] = [r["train_loss"] * 1.001, r["train_loss"]]
    return rows


# check -> outcome -> (how to make the rows, how to analyze them)
PLANTED = {
    "converged": {
        "passed": (lambda: _converged(0), analyze),  # 48 of 48: band [92.6%, 100%]
        "edge": (lambda: _converged(5), analyze),  # 43 of 48: [77.8%, 95.5%]
        "failed": (lambda: _converged(10), analyze),  # 38 of 48: [65.7%, 88.3%]
    },
    "generalization": {
        "passed": (lambda: _generalization(0.0), analyze),  # 1.05x, no spread between units
        "edge": (lambda: _generalization(0.08), analyze),  # 1.05x, units 0.97x to 1.13x
        "failed": (lambda: _generalization(None), analyze),  # 1.5x in every unit
    },
    "search": {
        "passed": (lambda: _search([0.001, 0.002, 0.003]), analyze),
        "edge": (lambda: _search([0.0, 0.01, 0.25]), analyze),
        "failed": (lambda: _search([1.0, 1.1, 1.2]), analyze),
    },
    "plateau": {
        "passed": (lambda: adam_rows(), analyze_adam),  # 96 of 96 plateaued
        "edge": (lambda: _plateaued(86), analyze_adam),  # 86 of 96: [82%, 94%]
        "failed": (lambda: _plateaued(70), analyze_adam),  # 70 of 96
    },
    "curve": {
        "passed": (lambda: adam_rows(), analyze_adam),  # 2.35x, 1% noise
        "edge": (lambda: adam_rows(seeds=3, noise=0.2), analyze_adam),  # 2.48x [1.91, 3.22]
        "failed": (lambda: adam_rows(rise=("d=4", 8000)), analyze_adam),  # d=4 rises
    },
}


def _plateaued(k):
    rows = adam_rows()
    for r in rows[k:]:
        r["plateau_improvement"] = 0.2
    return rows


@pytest.mark.parametrize(
    ("name", "outcome"), [(n, o) for n, by in PLANTED.items() for o in by]
)  # fmt: skip
def test_each_check_at_each_outcome_gives_its_status(name, outcome):
    make, run = PLANTED[name][outcome]
    result = run(make())
    c = _check(result, name)
    assert c.outcome == outcome, detail(c)
    assert c.band is not None and c.band[0] <= c.band[1]
    _status(result, name, outcome)


def test_a_check_at_its_edge_names_its_figure_band_and_what_settles_it():
    rows = fit_rows(unconverged=5)
    from test_next_step_reasons import RUN, reported

    _, result = reported(RUN, rows)
    line = status_line(result)[1]
    assert line == (
        "INCONCLUSIVE: converged 89.6% [77.8%, 95.5%] straddles >= 90%; to settle: rerun with "
        "--steps 128"
    )


def test_every_trial_counted_and_the_band_still_short_asks_for_more_trials():
    """32 of 32 converged: no 32 trials clear 90% (35 do); the remedy is seeds, not steps."""
    from test_next_step_reasons import RUN, reported

    cfg, result = reported([*RUN[:9], "2", *RUN[10:]], fit_rows(seeds=2))
    c = _check(result, "converged")
    assert (c.count, c.trials, c.outcome) == (32, 32, "edge")
    assert cells.trials_to_clear(0.9) == 35
    (change,) = c.remedy(cfg)
    assert change.key == "seeds" and change.new * 16 >= 35


def test_exact_checks_are_never_at_an_edge():
    result = analyze(fit_rows())
    exact = [c for c in result.checks if c.band is None]
    assert {c.name for c in exact} >= {"budget_span", "width_matched", "replicates"}
    assert all(c.outcome in ("passed", "failed") and not c.edge for c in exact)
    cut = analyze_adam([r for r in adam_rows() if r["budget"] != ADAM_BUDGETS[2]],
                       budgets=ADAM_BUDGETS[:2] + ADAM_BUDGETS[3:])  # fmt: skip
    assert _check(cut, "budget_span").outcome == "failed"


def test_wilson_band_is_scipys():
    lo, hi = cells.wilson(35, 36)
    assert lo == pytest.approx(0.8583, abs=1e-4) and hi == pytest.approx(0.9951, abs=1e-4)
    assert cells.wilson(36, 36)[0] > 0.9 > cells.wilson(35, 36)[0]
    assert cells.side(0.91, 0.99, 0.9, at_least=True) == "passed"
    assert cells.side(0.85, 0.99, 0.9, at_least=True) == "edge"
    assert cells.side(0.8, 0.89, 0.9, at_least=True) == "failed"
    assert cells.side(1.0, 1.09, 1.1, at_least=False) == "passed"
    assert cells.side(1.0, 1.2, 1.1, at_least=False) == "edge"
    assert cells.side(1.11, 1.2, 1.1, at_least=False) == "failed"


def _shape_rows(own_exponent_in):
    """Adam rows whose d=4 follows an exponent of its own (0.9 against 0.5) in the units
    `own_exponent_in` (seeds), the shared one in the others."""
    rng = np.random.default_rng(1)
    rows = adam_rows(seeds=4, noise=0.0)
    for r in rows:
        b, k = r["budget"], {"d=3": 1.0, "d=2": 1.2, "d=4": 1.1, "mlp": 2.0}[r["arm"]]
        alpha = 0.9 if r["arm"] == "d=4" and r["seed"] in own_exponent_in else 0.5
        scale = 5.0 * (1000 / k) ** (alpha - 0.5)  # both curves meet at the smallest budget
        loss = (0.02 + scale * (b / k) ** -alpha) * math.exp(rng.normal(0, 0.01))
        r["test_loss"] = r["test_metric"] = loss
    return rows


def test_an_exponent_of_its_own_is_a_verdict_only_where_every_unit_left_out_names_it():
    steady = analyze_adam(_shape_rows(own_exponent_in={0, 1, 2, 3}))
    assert steady.model.shape.differs == ("d=4",) and steady.model.shape.stable
    assert steady.decision.outcome is capacity.Outcome.VERDICT
    assert status_line(steady)[1].startswith("VERDICT: no constant multiplier")
    one = analyze_adam(_shape_rows(own_exponent_in={0}))  # one unit carries the difference
    shape = one.model.shape
    assert "d=4" in shape.differs and not shape.stable and (0, 0) in shape.flips
    assert one.decision.outcome is INC and one.decision.shape_edge
    line = status_line(one)[1]
    assert line.startswith("INCONCLUSIVE") and "shape test" in line
    assert capacity_json(one)["shape_test"]["stable"] is False

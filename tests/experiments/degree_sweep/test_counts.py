"""The degree sweep on two parameter counts: each cell's functional count beside its nominal one,
the shared model fitted on either (`--count`), the theory's prediction on each, and the exact
per-parameter measures beside the trained result."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from blocklab.experiments import degree_sweep
from blocklab.experiments.degree_sweep import SHAPE, DegreeSweepConfig
from blocklab.experiments.degree_sweep import exact as degree_exact
from blocklab.experiments.degree_sweep.analysis import capacity, counts
from blocklab.experiments.degree_sweep.analysis.arms import compare
from blocklab.experiments.degree_sweep.report import exact
from blocklab.experiments.degree_sweep.report.capacity import capacity_json
from blocklab.formatting import plain
from blocklab.theory import h

DEGREE = {"d=2": 2.0, "d=3": 3.0, "d=4": 4.0, "mlp": None}
WIDTH = 3
PER_LAYER = {"d=2": 18, "d=3": 27, "d=4": 36, "mlp": 12}
DEPTHS = (1, 2, 4, 8)


def share(arm: str) -> float:
    """Functional parameters per nominal one: 1 - (d-1) / (d w) for a poly arm, 1 for mlp."""
    d = DEGREE[arm]
    return 1.0 if d is None else 1 - (d - 1) / (d * WIDTH)


def _rows(functional_m: dict[str, float], seeds=6, noise=0.01):
    """Units whose loss follows one curve in the FUNCTIONAL count, each arm at `functional_m`
    times d = 3's functional parameters for the same loss."""
    rng = np.random.default_rng(3)
    rows = []
    for s in range(seeds):
        shared = rng.normal(0, noise)
        for arm, m in functional_m.items():
            for depth in DEPTHS:
                nominal = PER_LAYER[arm] * depth
                functional = round(nominal * share(arm))
                loss = 2.0 * (functional / m) ** -1.5 * math.exp(shared + rng.normal(0, noise))
                rows.append(
                    {
                        "task": "teacher",
                        "budget": nominal,
                        "arm": arm,
                        "degree": DEGREE[arm],
                        "seed": s,
                        "teacher": 0,
                        "status": "done",
                        "metric": "mse",
                        "higher_is_better": False,
                        "test_metric": loss,
                        "test_loss": loss,
                        "plateau_improvement": 0.001,
                        "block_params": nominal,
                        "functional_params": functional,
                        "width": WIDTH,
                    }
                )
    return rows


def _analyze(rows, count="nominal"):
    budgets = sorted({r["budget"] for r in rows})
    choice = {f"{r['budget']}/{r['arm']}": {"lr": 0.01, "tried": [0.01]} for r in rows}
    return capacity.analyze(
        rows, choice, budgets, tol=0.03, n_boot=100, paired=compare(rows), width=WIDTH,
        count=count,
    )  # fmt: skip


PLANTED = {"d=3": 1.0, "d=2": 1.0, "d=4": 1.0, "mlp": 1.5}


def test_equal_arms_on_the_functional_count_differ_on_the_nominal_one_by_their_shares():
    """Arms planted equal per functional parameter: the functional fit finds m = 1, the nominal
    one m_a = share(3) / share(a) (d = 2 needs fewer nominal parameters at width 3)."""
    result = _analyze(_rows(PLANTED), count="functional")
    fun = result.counts["functional"].model.multipliers
    nom = result.counts["nominal"].model.multipliers
    assert result.count == "functional" and result.model is result.counts["functional"].model
    for arm in ("d=2", "d=4"):
        assert fun[arm].value == pytest.approx(1.0, rel=0.03)
        assert nom[arm].value == pytest.approx(share("d=3") / share(arm), rel=0.03)
    assert fun["mlp"].value == pytest.approx(1.5, rel=0.05), result.model.shape


def test_the_json_names_both_sets_of_multipliers_and_the_count_fitted_on():
    rows = _rows(PLANTED)
    for count in ("nominal", "functional"):
        payload = json.loads(json.dumps(plain(capacity_json(_analyze(rows, count)))))
        assert payload["count"] == count
        assert payload["multipliers"] == payload[f"multipliers_{count}"]
        for key in ("multipliers_nominal", "multipliers_functional"):
            assert payload[key]["d=3"] == {"m": 1.0, "ci_low": 1.0, "ci_high": 1.0}
            assert set(payload[key]["d=2"]) == {"m", "ci_low", "ci_high"}
        assert set(payload["outcomes"]) == {"nominal", "functional"}
        cell = payload["arms"]["d=4"]["budgets"]["144"]
        assert cell["functional_params"] == 108 and cell["block_params"] == 144


def test_the_prediction_on_the_functional_count_is_the_proxy_per_functional_parameter():
    rows = _rows(PLANTED)
    degrees = {r["arm"]: r["degree"] for r in rows}
    nominal = counts.predictions(rows, degrees, "nominal")
    functional = counts.predictions(rows, degrees, "functional")
    assert nominal["d=2"] == pytest.approx(h(3) / h(2))
    # h(3) / h(d) times the arm's functional share over d = 3's, to the rounding of the counts
    for arm in ("d=2", "d=4"):
        expected = h(3) / h(DEGREE[arm]) * share(arm) / share("d=3")
        assert functional[arm] == pytest.approx(expected, rel=1e-2)
    assert functional["mlp"] is None and functional["d=3"] == pytest.approx(1.0)


def test_rows_without_a_functional_count_fit_the_nominal_one_alone():
    rows = [{k: v for k, v in r.items() if k != "functional_params"} for r in _rows(PLANTED)]
    result = _analyze(rows)
    assert list(result.counts) == ["nominal"]
    with pytest.raises(ValueError, match="functional_params"):
        _analyze(rows, count="functional")


def test_exact_measures_match_their_closed_forms_at_width_3():
    """d = 2, 3, 4 at the budget they share (12 w^2: depths 6, 4, 3): separation rank d^p + 1 on
    two variables, exactly (over F_p); functional dimension per parameter 1 - (d-1) / (d w)."""
    cfg = DegreeSweepConfig()
    got = degree_exact.exact_measures(cfg, cfg.arms())
    for arm, depth in (("d=2", 6), ("d=3", 4), ("d=4", 3)):
        d = int(DEGREE[arm])
        assert got[arm]["depth"] == depth and got[arm]["params"] == 108
        assert got[arm]["separation_rank"] == got[arm]["separation_predicted"] == d**depth + 1
        assert got[arm]["functional_dimension_per_param"] == pytest.approx(share(arm), abs=1e-12)
    assert exact.order(got, "separation_rank_per_param") == "d=3 > d=2 = d=4"
    poly = {arm: v for arm, v in got.items() if arm != "mlp"}
    assert exact.order(poly, "functional_dimension_per_param") == "d=2 > d=3 > d=4"
    assert got["mlp"]["separation_rank"] is None
    said = exact.said(got)
    assert "separation rank d=3 > d=2 = d=4" in said and "functional dimension" in said


def test_every_cell_of_a_sweep_records_its_functional_count():
    """The poly cells of the demo's shape count P - (d-1) w L (no bias: a factor's rows rescale
    against another's), measured before any fit."""
    cfg = DegreeSweepConfig(depths=(1, 2), shape=replace(SHAPE, width=WIDTH))
    shapes = degree_sweep.plan.shapes(cfg)
    counts = degree_exact.functional_counts(cfg, shapes)
    for (budget, arm), got in counts.items():
        if DEGREE[arm] is None:
            assert got["functional_params"] <= budget
            continue
        depth = budget // PER_LAYER[arm]
        d = int(DEGREE[arm])
        assert got["functional_params"] == budget - (d - 1) * WIDTH * depth

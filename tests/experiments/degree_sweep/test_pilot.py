"""The spreads a degree run is sized by (`degree_sweep.analysis.pilot`), on planted rows whose
spreads are known, and the pilot form of the degree sweep."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from blocklab.engine.devices import GPU_OVER_CORE
from blocklab.experiments.degree_sweep import DegreeSweepConfig
from blocklab.experiments.degree_sweep.analysis.pilot import pilot
from blocklab.experiments.degree_sweep.report.pilot import pilot_json, pilot_lines


def _row(arm, budget, teacher, seed, log_loss, seconds=10.0):
    return {
        "arm": arm, "budget": budget, "teacher": teacher, "seed": seed, "status": "done",
        "test_loss": math.exp(log_loss), "seconds": seconds,
    }  # fmt: skip


def _rows(gaps=(0.2, 0.6), noise=(-0.1, 0.1)):
    """d=3 and d=2 at two budgets, two teachers, two seeds: log loss = -budget/100 + the arm's
    gap on that teacher (d=2) + the seed's noise."""
    rows = []
    for t, gap in enumerate(gaps):
        for s, e in enumerate(noise):
            for b in (100, 200):
                rows.append(_row("d=3", b, t, s, -b / 100 + e))
                rows.append(_row("d=2", b * 2 // 3, t, s, -b / 100 + gap + e))
    return rows


def test_sigma_and_the_spread_between_teachers_are_the_planted_ones():
    p = pilot(_rows(), None)
    p = dataclasses.replace(p, widest=0.1, df=3)  # planted: 4 units, t over 4 groups
    need = p.units_for(0.03)
    # sigma: between seeds of one teacher, the seed's noise alone; the units of a cell also
    # differ by the teacher's gap (d=2)
    assert p.sigma == {"d=2": pytest.approx(0.02**0.5), "d=3": pytest.approx(0.02**0.5)}
    assert p.sigma_pooled == pytest.approx(0.02**0.5)  # SD of (-0.1, 0.1)
    assert p.unit_spread["d=3"] == pytest.approx(np.std([-0.1, 0.1, -0.1, 0.1], ddof=1))
    assert p.unit_spread["d=2"] == pytest.approx(np.std([0.1, 0.3, 0.5, 0.7], ddof=1))
    assert p.teacher_spread == {"d=2": pytest.approx(np.std([0.2, 0.6], ddof=1))}
    assert p.units == 4 and p.core_seconds_per_unit == pytest.approx(16 * 10 / 4)
    assert p.estimate(cores=2) == pytest.approx(need * 40 / 2)
    assert p.estimate(gpu=True) == pytest.approx(need * 40 / GPU_OVER_CORE)
    # one teacher measures no spread between teachers; equal gaps measure none
    assert math.isnan(pilot(_rows(gaps=(0.2,)), None).teacher_spread["d=2"])
    assert pilot(_rows(gaps=(0.3, 0.3)), None).teacher_spread["d=2"] == pytest.approx(0)


def test_without_a_bounded_interval_the_run_is_not_sized():
    p = pilot(_rows(), None)  # no bounded interval: widest NaN
    assert p.core_seconds() is None and p.estimate(cores=64) is None
    assert "not sized" in pilot_lines(p)[-1]
    assert pilot_json(p)["estimate_seconds"]["one_gpu"] is None


def test_the_pilot_form_is_the_demos_ladder_with_more_units_and_chains():
    quick, form = DegreeSweepConfig.demo(), DegreeSweepConfig.pilot()
    assert (form.teachers, form.seeds, form.train.restarts) == (4, 2, 8)
    assert form.depths == quick.depths and form.staged and form.degrees == quick.degrees
    assert form.baselines == quick.baselines and form.train.chains == quick.train.chains

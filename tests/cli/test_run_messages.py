"""A run says what it is doing: the analysis's bootstraps report their draws (to the command's
display, which shows them), a resumed sweep says what the store held and what is left, a
finished one says it re-analyses, and `blocklab.run` shows all of it on a terminal and nothing
with `progress=False`."""

from __future__ import annotations

import dataclasses
import math
import re
import sys

import numpy as np
import pytest
import test_api

from blocklab.api import run
from blocklab.cli import main
from blocklab.engine import progress as progress_mod
from blocklab.engine.executors import Resources
from blocklab.experiments import degree_sweep
from blocklab.experiments.degree_sweep.analysis import multiplier, scaling
from blocklab.experiments.degree_sweep.analysis.scaling import Observation
from blocklab.store import Store


def _observations(arms, budgets=(30, 60, 120), seeds=6, seed=0):
    """Losses on one curve per arm with log-normal noise, one per (arm, budget, seed)."""
    rng = np.random.default_rng(seed)
    return [
        Observation(arm, p, p, (0, s), 0.001 + 0.5 * p**-0.6 * math.exp(0.1 * rng.normal()))
        for arm in arms
        for p in budgets
        for s in range(seeds)
    ]


def test_the_shared_models_bootstrap_reports_every_draw_failed_or_not():
    obs = _observations(["d=3"])
    # d=2's second budget has one unit: the draws that leave it out cannot fit d=2 and fail
    for p, units in ((30, range(6)), (60, [0])):
        obs += [Observation("d=2", p, p, (0, s), 0.5 * p**-0.5) for s in units]
    calls = []
    fit = multiplier.fit(
        obs, n_boot=30, method="bootstrap", on_draw=lambda done, total: calls.append((done, total))
    )
    assert fit is not None and 0 < fit.n_failed < 30
    assert calls == [(i, 30) for i in range(1, 31)]


def test_each_arms_curve_bootstrap_reports_as_each_arm_is_refitted():
    calls = []
    obs = _observations(["d=2", "d=3", "d=4"])
    result = scaling.analyze(obs, n_boot=10, on_draw=lambda *call: calls.append(call))
    assert len(result.fits) == 3
    assert calls == [(10, 30), (20, 30), (30, 30)]
    assert scaling.analyze(obs, n_boot=0, on_draw=lambda *call: calls.append(call))
    assert len(calls) == 3  # no bootstrap, no draws to report


def _lines(err: str) -> list[str]:
    """What a run said of its trials: its lines less the checks it says it begins before any
    (`[2s] checking ...`) and the line each phase of trials starts with."""
    stage = re.compile(r"\[\d+(m\d+)?s\] ")
    return [
        line
        for line in err.splitlines()
        if not stage.match(line) and not line.rstrip().endswith("] started")
    ]


def test_a_resumed_sweep_says_what_is_stored_and_what_is_left(
    tmp_path, capsys, tiny_searched_sweep
):
    one = Resources(workers=1, ensemble=1)
    bar = progress_mod.Progress()
    degree_sweep.run(tiny_searched_sweep, Store(tmp_path), resources=one, progress=bar)
    # the seeds reuse the search's seed-0 trial: a fresh run, which resumes nothing
    assert "resuming" not in capsys.readouterr().err
    more = dataclasses.replace(tiny_searched_sweep, seeds=4)
    bar = progress_mod.Progress()
    degree_sweep.run(more, Store(tmp_path), resources=one, progress=bar)
    err = _lines(capsys.readouterr().err)
    assert err[0] == "resuming seeds: 2 of 4 trials stored, 2 to fit"
    assert len(err) == 3  # then one line per trial fitted
    with bar.analysing(4):
        pass
    assert capsys.readouterr().err == "analysing 4 trials\n"


TINY, FLAGS = test_api.TINY, test_api.FLAGS  # a tiny Adam sweep of 8 trials


@pytest.mark.slow
def test_a_sweep_shows_its_analysis_and_its_rerun_says_it_re_analyses(tmp_path, capsys):
    args = ["degree-sweep", "--out", str(tmp_path), *FLAGS]
    assert main(args) == 0
    first = _lines(capsys.readouterr().err)
    trials = [line for line in first if line.startswith("[lr search") or line.startswith("[seeds")]
    assert len(trials) == 8 and "analysing 8 trials" in first
    assert first.index("analysing 8 trials") > first.index(trials[-1])
    # the shared model's intervals refit each of the 2 units (each arm's own curve needs 3
    # budgets: with 2 it is not fitted, and draws nothing)
    fits = [line.split(",")[0] for line in first if line.startswith("[analysis:")]
    assert fits == [f"[analysis: multiplier intervals {n}/2 fits" for n in (1, 2)]
    assert not any("resuming" in line or "re-analysing" in line for line in first)

    assert main(args) == 0
    second = _lines(capsys.readouterr().err)
    assert second[0] == "all 8 trials stored: re-analysing"
    assert not any(line.startswith(("[lr search", "[seeds", "analysing")) for line in second)
    assert "[analysis: multiplier intervals 2/2 fits" in [s.split(",")[0] for s in second]
    # --quiet says none of it: the flag turns the display off (test_cli's stop outside the
    # trials), and a run without it says nothing, analysis included (the test below)


@pytest.mark.slow
def test_run_is_silent_with_progress_off_and_shows_progress_on_a_terminal(
    tmp_path, capfd, monkeypatch
):
    run("degree-sweep", out=tmp_path, progress=False, **TINY)
    assert capfd.readouterr().err == ""  # the trials' workers and the analysis alike
    # by default (progress=None) a terminal on stderr shows it: here the rerun's
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    run("degree-sweep", out=tmp_path, **TINY)
    err = capfd.readouterr().err
    assert _lines(err)[0].startswith("all 8 trials stored: re-analysing")
    assert "analysis: multiplier intervals" in err and "2/2" in err


def test_a_fit_sweep_plans_aloud_only_what_is_left_to_fit(ladder_run, tmp_path, capsys):
    """The plan line (the fits' optimizer and time) where trials are left to fit; a rerun that
    only re-analyses fits nothing, and says that instead."""
    from test_ladder import TINY

    assert "fits: Levenberg-Marquardt for" in ladder_run.said  # TINY's run (conftest), not quiet
    out = ladder_run.copy(tmp_path / "fits")
    flags = ["degree-sweep", "--out", str(out), *(f for f in TINY if f != "--quiet")]
    assert main(flags) == 0
    second = capsys.readouterr().err
    assert "fits: Levenberg-Marquardt for" not in second
    assert _lines(second)[0] == "all 6 trials stored: re-analysing"

"""More iterations continue a stored ladder (`fitting.continuation`): a continued fit equals a fresh
fit of the larger budget bit for bit on one machine, a sweep at a larger budget continues the
stored trials of a smaller one and says so, and what may not continue refits."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import shutil

import pytest
import torch

from blocklab.engine import sweep
from blocklab.fitting import continuation, ladder
from blocklab.fitting.certify import Certificate
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape, TrainConfig, TrialSpec
from blocklab.store import Store
from blocklab.tasks import make_task

DEPTHS = (1, 2)
# the smallest budget whose double keeps its first check (`certify.first_check`: 64 at both), so
# the double continues it (`continuation.opens`)
SMALL, LARGE = 128, 256


def _data():
    return make_task("teacher", n_in=3, n_train=256, n_val=64, n_test=64).make(0)


def _make(depth: int, seed: int) -> Net:
    torch.manual_seed(seed)
    return Net(parse_arm("3"), NetShape(depth, 4, norm="rms"), 3, 1)


def _cfg(steps: int, **kw) -> TrainConfig:
    # a tolerance no fit of this size meets, so the small budget cuts fits and the large one
    # continues them; a warm start, so a continued first rung must not warm again
    kw = {"converge_tol": 1e-9, "warm_start": 8, **kw}
    return TrainConfig(optimizer="lm", steps=steps, restarts=2, data_ratio=4, **kw)


def _climb(cfg: TrainConfig, prior=None) -> ladder.Climb:
    climb = ladder.Climb(_make, _data(), cfg, 0, prior)
    ladder.run_climb(climb, DEPTHS, climb.data, cfg, 10.0)
    return climb


def _fits(climb: ladder.Climb):
    """Every rung's result, chain losses included, and the best network's parameters."""
    out = []
    for rung in climb.rungs:
        r = rung.result
        params = [p.detach().clone() for p in rung.model.parameters()]
        out.append((r.train_loss, r.test_loss, r.iterations, r.converged, r.restarts, params))
    return out


def _same(a, b) -> None:
    for (*numbers_a, params_a), (*numbers_b, params_b) in zip(a, b, strict=True):
        assert numbers_a == numbers_b  # floats compared exactly
        assert all(torch.equal(p, q) for p, q in zip(params_a, params_b, strict=True))


@pytest.fixture(scope="module")
def ladders():
    """A ladder fitted to SMALL iterations and a fresh one of LARGE."""
    return _climb(_cfg(SMALL)), _fits(_climb(_cfg(LARGE)))


def test_a_continued_ladder_equals_a_fresh_one_of_the_larger_budget_bit_for_bit(ladders):
    small, fresh = ladders
    prior = continuation.unpack(continuation.pack(small.states))  # through the store's bytes
    continued = _climb(_cfg(LARGE), prior)
    actions = [a for row in continued.actions for a in row]
    assert continuation.CONTINUED in actions  # the small budget cut a fit, and it continued
    _same(_fits(continued), fresh)
    # the continued fits ran past where the small budget ended them
    assert any(b[2] > a[2] for a, b in zip(_fits(small), fresh, strict=True))


def test_a_continued_ladder_from_a_tampered_state_differs(ladders):
    """The comparison above can fail: one damping value changed in the stored state moves the
    continued fit off the fresh one."""
    small, fresh = ladders
    prior = continuation.unpack(continuation.pack(small.states))
    actions = continuation.actions(prior, _cfg(LARGE))
    rung, chain = next(
        (i, c)
        for i, row in enumerate(actions)
        for c, a in enumerate(row)
        if a == continuation.CONTINUED
    )
    prior[rung][chain]["fitter"]["mu"] *= 1e3
    with pytest.raises(AssertionError):
        _same(_fits(_climb(_cfg(LARGE), prior)), fresh)


def _cert(**kw) -> Certificate:
    base = {"passed": False, "gain": 0.5, "first": 2.0, "second": 1.0, "iterations": 64}
    return Certificate(**{**base, "done": 64, "still": True, **kw})


def test_which_stored_decisions_stand_under_a_larger_budget():
    cfg = _cfg(256, converge_tol=0.03)
    assert not continuation.stands(_cert(), cfg)  # cut by its budget: continues
    assert continuation.stands(_cert(gain=0.01, passed=True), cfg)  # certified
    assert continuation.stands(_cert(floored=True), cfg)
    assert continuation.stands(_cert(stopped=True), cfg)
    assert continuation.stands(_cert(second=float("nan")), cfg)
    assert continuation.stands(_cert(done=128), _cfg(128))  # the budget that cut it ends it
    assert not continuation.stands(_cert(done=128), _cfg(256))
    # a tighter tolerance reopens a fit the looser one certified
    assert not continuation.stands(_cert(gain=0.01, passed=True), _cfg(256, converge_tol=0.001))


def test_only_a_prefix_of_the_larger_fit_opens_it():
    assert continuation.opens(512, 0.03, _cfg(1024, converge_tol=0.03))
    assert continuation.opens(512, 0.03, _cfg(512, converge_tol=0.01))
    assert not continuation.opens(1024, 0.03, _cfg(512, converge_tol=0.03))  # fewer
    assert not continuation.opens(512, 0.01, _cfg(1024, converge_tol=0.03))  # looser
    assert not continuation.opens(512, 0.03, _cfg(512, converge_tol=0.03))  # the same
    assert not continuation.opens(96, 0.03, _cfg(192, converge_tol=0.03))  # checks 48 vs 96


def test_rungs_above_a_continued_fit_refit_on_its_chain_and_every_chain_under_best():
    state = {"cert": dataclasses.asdict(_cert())}
    done = {"cert": dataclasses.asdict(_cert(gain=0.0, passed=True))}
    prior = [[state, done], [done, done]]
    assert continuation.actions(prior, _cfg(128, converge_tol=0.03)) == [
        ["continued", "kept"],
        ["refit", "kept"],
    ]
    assert continuation.actions(prior, _cfg(128, converge_tol=0.03, chains="best")) == [
        ["continued", "kept"],
        ["refit", "refit"],
    ]


def _spec(steps: int) -> TrialSpec:
    shape = NetShape(2, 4, norm="rms")
    options = {"n_in": 3, "n_train": 256, "n_val": 64, "n_test": 64}
    return TrialSpec("teacher", options, parse_arm("3"), 0, shape, _cfg(steps), 0, ladder=DEPTHS)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A store holding one sweep trial fitted to SMALL iterations, for the tests to copy."""
    out = tmp_path_factory.mktemp("continuation") / "small"
    with Store(out) as store:
        sweep.run([_spec(SMALL)], store, "test", progress=False)
    return out


@pytest.fixture(scope="module")
def refitted(small_run, tmp_path_factory):
    """The stored trial run again at LARGE with reuse "none": a fresh fit of LARGE iterations.
    Its records and what the sweep said."""
    said = io.StringIO()
    out = shutil.copytree(small_run, tmp_path_factory.mktemp("continuation") / "refit")
    with Store(out, reuse="none") as store, contextlib.redirect_stderr(said):
        records = sweep.run([_spec(LARGE)], store, "test", progress=False)
    return records[_spec(LARGE).id], said.getvalue()


def test_a_sweep_at_a_larger_budget_continues_the_stored_trials_and_says_so(
    small_run, refitted, tmp_path, capsys
):
    with Store(shutil.copytree(small_run, tmp_path / "run")) as store:
        records = sweep.run([_spec(LARGE)], store, "test", progress=False)
    said = capsys.readouterr().err
    assert f"continuing 1 stored trial(s) from {SMALL} to {LARGE} iterations" in said
    got, want = records[_spec(LARGE).id]["metrics"], refitted[0]["metrics"]
    assert got["continued"]["parent"] == _spec(SMALL).id
    assert got["continued"]["from_steps"] == SMALL
    # the continued fit ends where a fresh one of LARGE iterations does
    for a, b in zip(got["ladder"], want["ladder"], strict=True):
        assert a["metrics"]["train_loss"] == b["metrics"]["train_loss"]
        assert a["metrics"]["iterations"] == b["metrics"]["iterations"]


def test_a_fresh_run_refits_rather_than_continue(refitted):
    record, said = refitted
    assert "continuing" not in said
    assert "continued" not in record["metrics"]

"""What a depth ladder's fits record for the analysis, and its one refit rule: every chain its
validation loss and its fit at half its iterations (read at the certificate's checks without
moving the fit by a bit), and a rung whose chain chosen by validation tests above
`ladder.REFIT_RATIO` times its validation loss fitted once more with fresh seeds from the same
starting points, alone, batched, in units together and when continued; and the rows that expose
it all."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from torch import nn

from blocklab.engine import trial
from blocklab.experiments import _trials
from blocklab.fitting import cohorts as fit_units
from blocklab.fitting import continuation, converge, ladder
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape, TrainConfig, TrialSpec
from blocklab.tasks import make_task

OPTIONS = {"n_in": 3, "n_train": 256, "n_val": 64, "n_test": 64}
DEPTHS = (1, 2)
# 16 iterations: checks at 8 and 16, and no chain here converges at the first (0.03)
CFG = TrainConfig(optimizer="lm", steps=16, restarts=2, data_ratio=4, warm_start=0)
FIRES, NEVER = 1e-9, math.inf  # REFIT_RATIO values every rung fails, and none
HALF = {"iterations", "train_loss", "val_loss", "test_loss"}


def _data(teacher: int = 0):
    return make_task("teacher", **OPTIONS).make(teacher)


def _make(depth: int, seed: int) -> Net:
    torch.manual_seed(seed)
    return Net(parse_arm("3"), NetShape(depth, 4, norm="rms"), 3, 1)


def _sets(data, n: int = 128) -> converge.FitData:
    return converge.FitData(
        converge.training_set(data, n, 0), converge._f64(data.val), converge._f64(data.test)
    )


def _spy(monkeypatch) -> list[dict]:
    """Every rung's fits as `ladder._fit` runs them, in order: the fits, each chain's training
    loss as it entered (before any fit moved it) and the runs."""
    calls, real = [], ladder._fit

    def spy(fits, data, threshold, batched):
        x, y = fits.sets.train.x, fits.sets.train.y
        with torch.no_grad():
            entered = [float(((m.double()(x) - y) ** 2).mean()) for m in fits.models]
        runs = real(fits, data, threshold, batched)
        calls.append({"fits": fits, "entered": entered, "runs": runs})
        return runs

    monkeypatch.setattr(ladder, "_fit", spy)
    return calls


def _climb(cfg: TrainConfig = CFG, prior=None, data=None) -> ladder.Climb:
    data = _data() if data is None else data
    climb = ladder.Climb(_make, data, cfg, 0, prior)
    ladder.run_climb(climb, DEPTHS, data, cfg, 10.0)
    return climb


def _loss(model: nn.Module, split) -> float:
    with torch.no_grad():
        return float(((model(split.x) - split.y) ** 2).mean())


def test_every_chain_records_its_validation_loss_and_its_fit_at_half_its_iterations(
    monkeypatch,
):
    monkeypatch.setattr(ladder, "REFIT_RATIO", NEVER)
    rungs = ladder.fit_ladder(DEPTHS, _make, _data(), CFG, 0, 10.0)
    for rung in rungs:
        for chain in rung.result.restarts:
            assert chain["val_loss"] > 0 and chain["test_loss"] > 0
            half = chain["half"]
            assert set(half) == HALF and 2 * half["iterations"] == chain["iterations"] == 16
            # the same fit earlier: its loss no lower (a Levenberg-Marquardt step never raises it)
            assert half["train_loss"] >= chain["train_loss"]
            assert math.isfinite(half["val_loss"]) and math.isfinite(half["test_loss"])
        assert (rung.result.restarts[0]["refit"], rung.result.restarts[0]["first_attempt"]) == (
            False,
            None,
        )


def test_the_half_is_the_fit_of_half_the_iterations():
    """At the first rung a chain's half reads the numbers a fit of half the budget ends with:
    the same iterations on the same fit."""
    data, sets = _data(), _sets(_data())
    full = converge.fit_once(_make(1, 0), data, sets, CFG, 0, 10.0)
    half = converge.fit_once(_make(1, 0), data, sets, replace(CFG, steps=8), 0, 10.0)
    assert half.iterations == full.half["iterations"] == 8
    assert full.half["train_loss"] == half.train_loss
    assert full.half["val_loss"] == half.val_loss
    assert full.half["test_loss"] == half.result.test_loss


def test_a_fit_floored_inside_its_last_stretch_keeps_the_check_before_and_one_at_its_first_none():
    """A linear model floors at its least-squares fit after 4 iterations: with checks at 3 and 6
    its half is the check at 3 (its end, 4, is short of 6); with its first check at 4 it has no
    check before its end."""
    data, sets = _data(), _sets(_data(), 64)

    def fit(steps: int):
        torch.manual_seed(0)
        cfg = TrainConfig(optimizer="lm", steps=steps, restarts=1, warm_start=0)
        return converge.fit_once(nn.Linear(3, 1), data, sets, cfg, 0, 10.0)

    inside, first = fit(6), fit(8)
    assert inside.state["cert"].floored and inside.iterations == 4
    assert inside.state["cert"].done == 6 and inside.half["iterations"] == 3
    assert set(inside.half) == HALF
    assert first.state["cert"].floored and first.state["cert"].done == 4
    assert first.half is None and first.val_loss is not None


def _numbers(run: converge.Restart) -> tuple:
    return (run.train_loss, run.val_loss, run.result.test_loss, run.iterations, run.gain)


def test_reading_the_checks_leaves_every_fit_bit_for_bit_as_it_was():
    """The checks' readings sync the model and evaluate it: the fit, alone (by either fitter)
    and batched, ends with the same parameters, losses and certificate as with no readings."""
    data, sets = _data(), _sets(_data())

    def alone(halves: bool, optimizer: str = "lm"):
        cfg = replace(CFG, optimizer=optimizer)
        return converge.fit_once(_make(2, 3), data, sets, cfg, 3, 10.0, halves=halves)

    def batched(halves: bool):
        models = [_make(2, s) for s in (3, 4)]
        return converge.fit_batched(
            models, [data] * 2, [sets] * 2, [CFG] * 2, [3, 4], [10.0] * 2, halves=halves
        )

    # L-BFGS fits the model's own parameters, which the readings evaluate
    pairs = [(alone(True, o), alone(False, o)) for o in ("lm", "lbfgs")]
    pairs += zip(batched(True), batched(False), strict=True)
    for read, plain in pairs:
        assert read.half is not None and plain.half is None
        assert _numbers(read) == _numbers(plain)
        assert read.state["cert"] == plain.state["cert"]
        pairs = zip(read.model.parameters(), plain.model.parameters(), strict=True)
        assert all(torch.equal(p, q) for p, q in pairs)


@pytest.mark.parametrize("batched", [False, True])
def test_a_rung_failing_the_ratio_is_refitted_once_with_fresh_seeds_and_the_next_climbs_on_it(
    batched, monkeypatch
):
    """With a ratio every rung fails, each rung is fitted twice, no more: the second attempt
    from the same starting points (its chains enter at the first attempt's losses) with seeds
    none of the first's, on the same training set; it is the rung's, with the first attempt in
    its records; and the rung above continues the second attempt's chains."""
    monkeypatch.setattr(ladder, "REFIT_RATIO", FIRES)
    if batched:  # a GPU's path, forced on the CPU
        monkeypatch.setattr(ladder, "batch_chains", lambda device, cfg: True)
    calls = _spy(monkeypatch)
    climb = _climb()
    assert len(calls) == 2 * len(DEPTHS)  # once per rung, though the second fails it too
    seeds = [converge.restart_seed(0, r) for r in range(4)]
    for i, rung in enumerate(climb.rungs):
        first, second = calls[2 * i], calls[2 * i + 1]
        assert first["fits"].inits == seeds[:2] and second["fits"].inits == seeds[2:]
        assert len(set(seeds)) == 4
        assert second["fits"].sets is first["fits"].sets
        if i:  # a chain's silenced layers leave its function: it enters where the first did
            assert second["entered"] == pytest.approx(first["entered"], rel=1e-12)
        chains = rung.result.restarts
        assert [c["seed"] for c in chains] == seeds[2:]
        assert all(c["refit"] for c in chains)
        assert [c["first_attempt"] for c in chains] == [
            converge.chain_record(r) for r in first["runs"]
        ]
        assert [c["first_attempt"]["seed"] for c in chains] == seeds[:2]
        assert rung.result.train_loss == min(r.train_loss for r in second["runs"])
        assert rung.result.batched is batched
        states = climb.states[i]
        assert [s["first_attempt"] for s in states] == [c["first_attempt"] for c in chains]
    # the rung above entered each chain with its second attempt's fit below, not its first's
    above, below = calls[2], calls[1]
    split = above["fits"].sets.train
    for chain, entered in enumerate(above["entered"]):
        kept, dropped = below["runs"][chain].model, calls[0]["runs"][chain].model
        assert entered == pytest.approx(_loss(kept, split), rel=1e-12)
        assert entered != pytest.approx(_loss(dropped, split), rel=1e-6)


def test_a_rung_within_the_ratio_is_not_refitted_and_the_default_rule_reads_the_chosen_chain(
    monkeypatch,
):
    calls = _spy(monkeypatch)
    monkeypatch.setattr(ladder, "REFIT_RATIO", NEVER)
    climb = _climb()
    assert len(calls) == len(DEPTHS)
    chains = [c for rung in climb.rungs for c in rung.result.restarts]
    assert not any(c["refit"] for c in chains)
    assert all(c["first_attempt"] is None for c in chains)
    # at the default ratio, each rung's decision is the rule's on its first attempt
    monkeypatch.setattr(ladder, "REFIT_RATIO", 2.0)
    for rung in _climb().rungs:
        chains = rung.result.restarts
        first = [c["first_attempt"] for c in chains] if chains[0]["refit"] else chains
        chosen = min(first, key=lambda c: c["val_loss"])
        assert chains[0]["refit"] == (chosen["test_loss"] > 2.0 * chosen["val_loss"])


def _ratio(rung: ladder.Rung) -> float:
    chosen = min(rung.result.restarts, key=lambda c: c["val_loss"])
    return chosen["test_loss"] / chosen["val_loss"]


def test_units_fitted_together_refit_the_rungs_they_refit_alone(monkeypatch):
    """Two units whose first rungs' chosen chains test at different ratios, the ratio set
    between them: alone and together, the same unit is refitted there, with the same seeds and
    the same first attempt, and their losses agree to rounding (`test_fit_units`)."""
    units = [(0, 0), (1, 1)]  # (teacher, seed)

    def alone():
        return [ladder.fit_ladder(DEPTHS, _make, _data(t), CFG, s, 10.0) for t, s in units]

    monkeypatch.setattr(ladder, "REFIT_RATIO", NEVER)
    ratios = [_ratio(rungs[0]) for rungs in alone()]
    assert abs(math.log(ratios[0] / ratios[1])) > 0.1  # the premise: far apart
    monkeypatch.setattr(ladder, "REFIT_RATIO", math.sqrt(ratios[0] * ratios[1]))
    each = alone()
    together = fit_units.fit_ladders(
        DEPTHS, [_make] * 2, [_data(t) for t, _ in units], CFG, [s for _, s in units], [10.0] * 2
    )
    assert [rungs[0].result.restarts[0]["refit"] for rungs in each] == [
        r > ladder.REFIT_RATIO for r in ratios
    ]
    for a_rungs, climb in zip(each, together, strict=True):
        for a, b in zip(a_rungs, climb.rungs, strict=True):
            assert b.result.batched
            for ca, cb in zip(a.result.restarts, b.result.restarts, strict=True):
                assert (cb["seed"], cb["refit"]) == (ca["seed"], ca["refit"])
                assert cb["train_loss"] == pytest.approx(ca["train_loss"], rel=1e-6)
                fa, fb = ca["first_attempt"], cb["first_attempt"]
                assert (fa is None) == (fb is None)
                if fa is not None:
                    assert fb["seed"] == fa["seed"]
                    assert fb["train_loss"] == pytest.approx(fa["train_loss"], rel=1e-6)


# the smallest budgets a continuation opens (`test_continuation`: first checks of 64 at both)
SMALL, LARGE = 128, 256


def _budget(steps: int, tol: float) -> TrainConfig:
    return replace(CFG, steps=steps, converge_tol=tol)


def test_a_kept_rung_keeps_its_stored_refit(monkeypatch):
    """Every fit certified at the small budget stands at the large one: each rung is kept as
    stored, its refit record with it, and nothing is fitted again, though the ratio fails."""
    monkeypatch.setattr(ladder, "REFIT_RATIO", FIRES)
    small = _climb(_budget(SMALL, 0.9))
    assert all(c["refit"] for rung in small.rungs for c in rung.result.restarts)
    prior = continuation.unpack(continuation.pack(small.states))  # through the store's bytes
    calls = _spy(monkeypatch)
    kept = _climb(_budget(LARGE, 0.9), prior)
    assert {a for row in kept.actions for a in row} == {continuation.KEPT}
    assert len(calls) == len(DEPTHS)  # the kept fits, no refit
    for a, b in zip(small.rungs, kept.rungs, strict=True):
        assert b.result.restarts == a.result.restarts


def test_a_continued_rung_stands_refitted_and_a_rung_fitted_afresh_above_it_is_refitted(
    monkeypatch,
):
    """The small budget cuts every fit: the large one continues the first rung's refitted
    chains (once refitted, never again; its first attempt as stored, each continued chain's
    half read at the check before its end), and fits the rung above afresh, where the rule
    applies again."""
    monkeypatch.setattr(ladder, "REFIT_RATIO", FIRES)
    small = _climb(_budget(SMALL, 1e-9))
    prior = continuation.unpack(continuation.pack(small.states))
    calls = _spy(monkeypatch)
    large = _climb(_budget(LARGE, 1e-9), prior)
    assert large.actions == [[continuation.CONTINUED] * 2, [continuation.REFIT] * 2]
    assert len(calls) == 1 + 2  # the first rung continued, the second fitted twice
    first, second = large.rungs
    stored = [c["first_attempt"] for c in small.rungs[0].result.restarts]
    assert [c["first_attempt"] for c in first.result.restarts] == stored
    assert [c["seed"] for c in first.result.restarts] == [
        converge.restart_seed(0, 2 + r) for r in range(2)
    ]
    for c in first.result.restarts:
        assert c["refit"] and c["iterations"] == LARGE
        assert c["half"]["iterations"] == SMALL  # the stored check, where the small one ended
    assert all(c["refit"] for c in second.result.restarts)
    assert [c["first_attempt"]["seed"] for c in second.result.restarts] == [
        converge.restart_seed(0, r) for r in range(2)
    ]


def test_a_ladder_trials_rows_expose_each_chains_records_and_the_refit(monkeypatch):
    monkeypatch.setattr(ladder, "REFIT_RATIO", FIRES)
    cfg = replace(CFG, steps=8)
    spec = TrialSpec(
        "teacher", dict(OPTIONS), parse_arm("3"), 0, NetShape(2, 4, norm="rms"), cfg, 0, 0,
        ladder=DEPTHS,
    )  # fmt: skip
    record = trial.run_trial(spec, "cpu")
    assert record["status"] == "done", record.get("error")
    record.pop("fit_state")
    record = json.loads(json.dumps(record))  # as the store keeps it
    rows = _trials.rung_rows(spec, record, {1: 10, 2: 20})
    assert len(rows) == 2
    for row in rows:
        n = len(row["restart_train_losses"])
        assert n == 2 and row["refit"] is True
        for key in ("val", "test", "half_val", "half_test", "half_train"):
            values = row[f"restart_{key}_losses"]
            assert len(values) == n and all(v is not None and v > 0 for v in values)
        assert len(row["first_attempt_test_losses"]) == len(row["first_attempt_val_losses"]) == n
    # a row of an older store, whose chains carry none of it
    old = {"status": "done", "metrics": {"restarts": [{"train_loss": 0.1}, {"train_loss": 0.2}]}}
    row = _trials.row(spec, old)
    assert row["restart_val_losses"] == row["restart_half_train_losses"] == [None, None]
    assert row["restart_test_losses"] == row["restart_half_test_losses"] == [None, None]
    assert row["refit"] is False
    assert row["first_attempt_test_losses"] == row["first_attempt_val_losses"] == []
    assert _trials.row(spec, {"status": "done", "metrics": {}})["restart_val_losses"] == []

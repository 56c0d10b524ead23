"""Trials fitted to convergence (`--optimizer lbfgs|lm`): their ids, their place in a sweep, what
a record of one holds, and known answers through the trial path."""

import dataclasses
import json
from dataclasses import replace

import pytest

import blocklab
from blocklab.engine import trial
from blocklab.errors import UserError
from blocklab.experiments import degree_sweep
from blocklab.experiments.degree_sweep import SHAPE, DegreeSweepConfig
from blocklab.fitting import converge, network
from blocklab.models import parse_arm
from blocklab.specs import NetShape, TrainConfig, TrialSpec, ensemble_key

# y = a * x1 * x2, standardized: one monomial of degree 2, which a d=2 network without norm or
# residual holds exactly (its embedding's bias carries the standardization's constant)
MONOMIAL = {"n_in": 2, "rank": 1, "max_exponent": 1, "n_train": 512, "n_val": 64, "n_test": 256}

@pytest.fixture(autouse=True)
def scaling_status(monkeypatch):
    """These tests plant the scaling model's checks and read the status they give: the matched
    answer, which leads wherever arms meet (`test_matched` plants its checks), is off here."""
    from blocklab.experiments.degree_sweep.analysis import matched

    monkeypatch.setattr(matched, "applies", lambda rows: False)



def spec(train: TrainConfig, **kw) -> TrialSpec:
    fields = dict(
        task="poly_target",
        task_options=MONOMIAL,
        arm=parse_arm("2"),
        budget=8,
        shape=NetShape(1, 2, norm="none", residual=False),
        train=train,
        seed=0,
    )
    return TrialSpec(**{**fields, **kw})


def test_an_adam_trial_keeps_its_id_and_a_fit_reads_no_adam_setting():
    adam = spec(TrainConfig())
    assert not {"optimizer", "restarts", "converge_tol", "warm_start"} & set(adam.config()["train"])
    lm = spec(TrainConfig(optimizer="lm", steps=20))
    assert lm.id != adam.id
    # a fit without a warm start reads no rate, batch or schedule: they leave its id alone
    relabelled = spec(TrainConfig(optimizer="lm", steps=20, lr=0.5, batch_size=7))
    assert relabelled.id == lm.id
    warm = spec(TrainConfig(optimizer="lm", steps=20, warm_start=5))
    assert warm.id != spec(TrainConfig(optimizer="lm", steps=20, warm_start=5, lr=0.5)).id


def test_fits_train_alone_and_adam_trials_share_ensembles():
    assert ensemble_key(spec(TrainConfig(optimizer="lbfgs"))) is None
    assert ensemble_key(spec(TrainConfig())) is not None


def test_restart_zero_initializes_as_the_trial_seed_does():
    assert converge.restart_seed(5, 0) == 5
    seeds = {converge.restart_seed(s, r) for s in range(4) for r in range(4)}
    assert len(seeds) == 16  # no two (seed, restart) pairs share an initialization


def test_the_training_set_grows_with_the_network_and_stops_at_its_cap():
    cfg = TrainConfig(optimizer="lm", data_ratio=32, max_examples=1000)
    assert converge.examples(cfg, 10, None) == 320
    assert converge.examples(cfg, 100, None) == 1000
    assert converge.examples(cfg, 10, 100) == 100  # a fixed dataset has what it has


@pytest.mark.parametrize("optimizer", ["lm", "lbfgs"])
def test_a_realizable_target_is_fitted_to_near_zero_through_the_trial_path(optimizer):
    steps = 60 if optimizer == "lm" else 150
    record = trial.run_trial(spec(TrainConfig(optimizer=optimizer, steps=steps, restarts=2)))
    assert record["status"] == "done", record.get("error")
    m = record["metrics"]
    assert m["optimizer"] == optimizer and m["precision"] == "float64"
    assert m["train_loss"] < 1e-8 and m["test_loss"] < 1e-8
    restarts = m["restarts"]
    assert len(restarts) == 2 and restarts[0]["seed"] == 0
    assert m["train_loss"] == min(r["train_loss"] for r in restarts)  # the best is kept
    median = sorted(r["train_loss"] for r in restarts)
    assert m["restart_spread"] == pytest.approx((sum(median) / 2 - median[0]) / median[0])
    assert m["examples"] == 32 * m["params"]["total"]  # data_ratio per parameter, drawn fresh


def test_an_under_iterated_fit_is_not_certified():
    record = trial.run_trial(spec(TrainConfig(optimizer="lm", steps=8)))
    m = record["metrics"]
    assert record["status"] == "done" and m["converged"] is False
    assert m["restart_spread"] is None  # one restart measures no spread
    assert m["plateau_improvement"] > 0.03  # the second four iterations still gained that much
    assert record["curves"]["step"][0] == 0 and record["curves"]["step"][-1] == 8
    # two and two: LM rejects its first steps while its damping grows, so the second stretch
    # gains nothing, which is a stall, not a certificate
    stalled = trial.run_trial(spec(TrainConfig(optimizer="lm", steps=4)))["metrics"]
    assert stalled["plateau_improvement"] == 0.0 and stalled["converged"] is False


def test_a_fit_of_a_classification_task_is_one_line(tmp_path):
    with pytest.raises(UserError, match="fits regression"):
        DegreeSweepConfig(task="mnist1d", train=TrainConfig(optimizer="lm"))
    data = network.task_data("match2", {"n_train": 64}, 0)
    with pytest.raises(UserError, match="use --optimizer adam"):
        converge.check_fits(data, "lm")


def test_a_sweep_of_fits_searches_no_rate_and_referees_each_cell(tmp_path):
    from blocklab.store import Store

    cfg = DegreeSweepConfig(
        task="poly_target",
        task_options=MONOMIAL,
        degrees=("2", "3"),
        baselines=(),
        budgets=(24, 48),
        seeds=2,
        ladder="off",  # fresh fits per budget, each cell refereed
        train=TrainConfig(optimizer="lm", steps=6, restarts=2),
        shape=replace(SHAPE, width=2, norm="none"),
    )
    trials = degree_sweep.run(cfg, Store(tmp_path), progress=False)
    assert trials.lr_choice == {} and not trials.failed
    assert len(trials.rows) == 2 * 2 * 2  # arms x budgets x seeds
    assert all(r["optimizer"] == "lm" and len(r["restart_train_losses"]) == 2 for r in trials.rows)
    # one referee per cell: seed 0, fitted by L-BFGS from the main trial's first initialization
    assert sorted((r["arm"], r["budget"]) for r in trials.referee) == sorted(
        (r["arm"], r["budget"]) for r in trials.rows if r["seed"] == 0
    )
    assert all(r["optimizer"] == "lbfgs" and r["seed"] == 0 for r in trials.referee)
    assert {r["max_steps"] for r in trials.referee} == {6}  # the same limit as the main fits
    # the dearest fits run first (one worker here: the store's order is the run's)
    runs = blocklab.load_runs(tmp_path)
    finished = runs.sort_values("finished_at", kind="stable")["config.budget"]
    assert finished.tolist() == sorted(finished, reverse=True)
    no_referee = dataclasses.replace(cfg, referee=False)
    assert degree_sweep.run(no_referee, Store(tmp_path), progress=False).referee == []


def test_the_warm_start_trains_with_adam_before_the_fit():
    cold = trial.run_trial(spec(TrainConfig(optimizer="lm", steps=2)))
    warm = trial.run_trial(spec(TrainConfig(optimizer="lm", steps=2, warm_start=30, lr=0.05)))
    assert warm["status"] == cold["status"] == "done"
    # thirty Adam steps move the start, so two iterations from there land elsewhere
    assert warm["metrics"]["train_loss"] != cold["metrics"]["train_loss"]


def test_an_under_iterated_sweep_fails_converged_and_prints_no_verdict(tmp_path, capsys):
    from blocklab.cli import main

    options = [f"{k}={v}" for k, v in MONOMIAL.items()]
    args = ["degree-sweep", "--task", "poly_target", "--out", str(tmp_path), "--json"]
    args += [x for o in options for x in ("--task-option", o)]
    args += ["--degrees", "2", "3", "--baselines", "--budgets", "24", "48", "96", "192"]
    args += ["--width", "2", "--norm", "none", "--seeds", "2", "--quiet", "--workers", "1"]
    args += ["--optimizer", "lm", "--steps", "2", "--warm-start", "0", "--n-boot", "10"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c["passed"] for c in out["design_checks"]}
    assert checks["converged"] is False and "plateau" not in checks
    assert "generalization" in checks and out["optimizer"] == "lm"
    assert out["verdict"] is None  # refused: a design check failed
    cell = out["arms"]["d=3"]["budgets"]["48"]
    assert cell["converged_fraction"] < 0.9 and cell["train_mean"] > 0
    assert "restart_spread" in cell

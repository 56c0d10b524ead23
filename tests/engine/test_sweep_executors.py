"""A sweep gives the same stored results on every executor, and survives a worker killed
mid-trial: the trial is not recorded, and a rerun finishes it."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal

import pytest

from _specs import small_trial
from blocklab import specs
from blocklab.engine import executors, sweep
from blocklab.errors import WorkerDied
from blocklab.specs import TrainConfig
from blocklab.store import Store


def _specs(steps: int = 30) -> list[specs.TrialSpec]:
    return [
        small_trial(degree, seed, TrainConfig(steps=steps, batch_size=16, lr=lr, eval_points=3))
        for degree in ("2", "3")
        for seed in (0, 1)
        for lr in (3e-3, 1e-2)
    ]


def _results(records: dict) -> dict:
    return {
        i: (r["status"], r["metrics"]["test_metric"], r["curves"]["val_loss"])
        for i, r in records.items()
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    store = Store(tmp_path_factory.mktemp("local"))
    records = sweep.run(_specs(), store, "t", resources=executors.Resources(), progress=False)
    assert {r["status"] for r in records.values()} == {"done"}
    return _results(records)


@pytest.mark.parametrize(
    ("executor", "workers", "options"),
    [
        pytest.param("local", 2, {}, id="local-pool"),
        pytest.param("ray", 2, {}, id="ray"),
        pytest.param("slurm", 2, {"cluster": "local", "poll": "0.2"}, id="slurm-local"),
    ],
)
def test_executors_store_what_the_local_executor_stores(
    reference, tmp_path, exclusive, executor, workers, options
):
    one_at_a_time = contextlib.nullcontext()
    if executor == "ray":
        pytest.importorskip("ray")
        one_at_a_time = exclusive("ray")  # one local Ray instance on the machine (conftest)
    if executor == "slurm":
        pytest.importorskip("submitit")
        options = {**options, "folder": str(tmp_path / "jobs")}
    store = Store(tmp_path)
    res = executors.Resources(workers=workers, executor=executor, executor_options=options)
    with one_at_a_time:
        records = sweep.run(_specs(), store, "t", resources=res, progress=False)
    assert set(records) == set(reference)  # the same trial ids
    for trial_id, (status, metric, curve) in _results(records).items():
        ref = reference[trial_id]
        assert status == ref[0]
        # every executor runs a trial on one thread (`executor_base.call_in_worker`) by the same
        # kernels: bit for bit in principle, and rel=1e-6 far below what another seed or rate
        # changes
        assert metric == pytest.approx(ref[1], rel=1e-6)
        assert curve == pytest.approx(ref[2], rel=1e-6, nan_ok=True)
    assert len(store.records()) == len(reference)


def test_ensembles_and_single_trials_store_the_same_results(reference, tmp_path):
    records = sweep.run(
        _specs(), Store(tmp_path), "t", resources=executors.Resources(ensemble=1), progress=False
    )
    for trial_id, (status, metric, _) in _results(records).items():
        assert status == reference[trial_id][0]
        assert metric == pytest.approx(reference[trial_id][1], rel=1e-4)
    assert all("ensemble" not in r["metrics"] for r in records.values())


def test_a_worker_killed_mid_trial_leaves_it_rerunnable(reference, tmp_path):
    """Kill a pool worker as soon as the first trial is stored: the sweep stops with the trials
    it finished stored whole, the killed one absent, and a rerun completes all of them with the
    results of an undisturbed sweep."""
    # trials long enough that the 7 left when the first is stored are still running or queued
    # when the kill lands (a dead worker breaks the pool at once), short enough that the rerun
    # and the undisturbed sweep stay cheap
    specs = _specs(steps=60)
    store = Store(tmp_path)
    killed = []

    def kill_a_worker(record):
        if not killed:
            victim = multiprocessing.active_children()[0]
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.pid)

    res = executors.Resources(workers=2, ensemble=1)
    with pytest.raises(WorkerDied):
        sweep.run(specs, store, "t", resources=res, progress=False, on_record=kill_a_worker)
    assert killed
    stored = store.records()
    assert 1 <= len(stored) < len(specs)
    for record in stored:  # every stored trial is whole
        assert record["status"] == "done"
        assert record["metrics"]["test_metric"] is not None
        assert len(record["curves"]["val_loss"]) == 4
    again = sweep.run(specs, store, "t", resources=res, progress=False)
    assert {r["status"] for r in again.values()} == {"done"}
    assert len(store.records()) == len(specs)
    # undisturbed, here rather than on a pool: a trial's results do not depend on where it ran
    alone = executors.Resources(ensemble=1)
    clean = sweep.run(specs, Store(tmp_path / "clean"), "t", resources=alone, progress=False)
    for trial_id, record in again.items():
        assert record["metrics"]["test_metric"] == pytest.approx(
            clean[trial_id]["metrics"]["test_metric"], rel=1e-6
        )

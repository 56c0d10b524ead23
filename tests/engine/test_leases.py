"""Sweeps sharing a store split its trials by leases: a trial leased by a live sweep is left to it
and read once stored, a lease whose sweep is gone (exited here, silent elsewhere) is taken over,
and two identical sweeps started at once train every trial once between them. The lease table's
queries are the store's (`store.leases`); the table keeps its name and columns."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import blocklab
from _specs import small_trial
from blocklab import specs
from blocklab.engine import executors, leases, sweep
from blocklab.specs import TrainConfig
from blocklab.store import Store
from blocklab.store import leases as table

SRC = str(Path(blocklab.__file__).resolve().parents[1])


def _specs(steps: int = 20) -> list[specs.TrialSpec]:
    train = TrainConfig(steps=steps, batch_size=16, lr=1e-2, eval_points=2)
    return [small_trial("2", seed, train) for seed in range(4)]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def lease_as(store: Store, ids, pid: int, host: str, at: float) -> None:
    """Another sweep's leases on `ids`, taken whoever holds them."""
    table.create(store.conn)
    assert table.take(store.conn, list(ids), ("another sweep", pid, host), at, lambda row: False)


def test_a_lease_holds_until_released_and_leaving_releases_all(tmp_path):
    store = Store(tmp_path)
    with leases.Leases(store) as mine, leases.Leases(Store(tmp_path)) as theirs:
        assert mine.take(["a", "b"])
        assert not theirs.take(["b", "c"])  # all or none: c stays free
        assert theirs.take(["c"])
        assert table.count(store.conn) == 3
        mine.release(["b"])
        assert theirs.take(["b"])
        assert not mine.take(["b"])
    assert table.count(store.conn) == 0


def test_a_batch_is_stored_all_or_none(tmp_path):
    store = Store(tmp_path)
    records = [
        {"id": i, "experiment": "t", "status": "done", "seed": 0, "config": {}} for i in "abc"
    ]

    def put_two(record):
        if record["id"] == "c":
            raise KeyboardInterrupt  # stopped in the middle of the batch
        store.put(record)

    with leases.Leases(store) as mine:
        assert mine.take("abc")
        with pytest.raises(KeyboardInterrupt):
            mine.store(put_two, records)
        assert store.records() == [] and not store.conn.in_transaction
        assert not leases.Leases(store).take("a")  # still held
        mine.store(store.put, records)
        assert store.finished("abc") == set("abc")
        assert leases.Leases(store).take("abc")  # released as stored


def test_leases_of_the_dead_and_the_silent_are_taken_over(tmp_path):
    store = Store(tmp_path)
    now, host = time.time(), leases.Leases(store).host
    lease_as(store, ["dead"], dead_pid(), host, now)
    lease_as(store, ["live"], os.getpid(), host, now)
    lease_as(store, ["far"], 1, "another-host", now)
    lease_as(store, ["silent"], 1, "another-host", now - 11)
    taker = leases.Leases(store, stale=10)
    assert taker.take(["dead"]) and taker.take(["silent"])
    assert not taker.take(["live"]) and not taker.take(["far"])
    assert not leases.alive(dead_pid())


def test_a_live_sweep_renews_its_leases(tmp_path):
    store = Store(tmp_path)
    with leases.Leases(store, stale=0.4) as mine:
        assert mine.take(["a"])
        time.sleep(1.0)  # past the staleness, renewed every 0.1 s
        assert not leases.Leases(Store(tmp_path), stale=0.4).take(["a"])


def test_a_sweep_takes_over_what_a_dead_sweep_leased(tmp_path):
    trials, store = _specs(), Store(tmp_path)
    lease_as(store, [s.id for s in trials], dead_pid(), leases.Leases(store).host, time.time())
    start = time.monotonic()
    records = sweep.run(trials, store, "t", progress=False)
    assert {r["status"] for r in records.values()} == {"done"} and len(records) == len(trials)
    assert time.monotonic() - start < 60  # not the ten minutes a silent lease holds
    assert table.count(store.conn) == 0


def test_a_sweep_waits_for_a_silent_lease_to_go_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKLAB_CLAIM_STALE", "2")
    trials, store = _specs(), Store(tmp_path)
    lease_as(store, [trials[0].id], 1, "another-host", time.time())
    start = time.monotonic()
    records = sweep.run(trials, store, "t", progress=False)
    assert time.monotonic() - start >= 2
    assert {r["status"] for r in records.values()} == {"done"}


def test_a_sweep_reads_what_another_live_sweep_stores(tmp_path):
    """Another sweep holds one trial and stores it a moment later: this one does not train it,
    and returns the other's record."""
    trials, store = _specs(), Store(tmp_path)
    held = trials[2]
    lease_as(store, [held.id], os.getpid(), leases.Leases(store).host, time.time())

    def finish_it():
        time.sleep(1.5)
        theirs = Store(tmp_path)
        theirs.put(
            {"id": held.id, "experiment": "t", "status": "done", "seed": held.seed}
            | {"config": held.config(), "metrics": {"by": "the other sweep"}}
        )
        table.release(theirs.conn, "another sweep", [held.id])

    thread = threading.Thread(target=finish_it)
    thread.start()
    res = executors.Resources(ensemble=1)
    records = sweep.run(trials, store, "t", resources=res, progress=False)
    thread.join()
    assert records[held.id]["metrics"] == {"by": "the other sweep"}
    assert {r["status"] for r in records.values()} == {"done"}


# runs the command line, logging every trial it trains, and ends once its trials are stored (the
# race is over then: each command's analysis is its own, `_stops`); the sweeps start together once
# imported (a loaded machine can start one a second or more after the other, which then trains
# them all)
TRAIN_LOGGED = """
import os, sys, time
from pathlib import Path
from _stops import trials_only
from blocklab.engine import sweep
from blocklab.cli import main
train = sweep.run_group
def logged(specs, device="cpu"):
    with open(os.environ["TRAINED_LOG"], "a") as log:
        log.writelines(s.id + "\\n" for s in specs)
    return train(specs, device)
sweep.run_group = logged
log = Path(os.environ["TRAINED_LOG"])
log.with_suffix(".ready").touch()
deadline = time.monotonic() + 60
while len(list(log.parent.glob("*.ready"))) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
with trials_only():
    sys.exit(main(sys.argv[1:]))
"""


def test_two_identical_sweeps_at_once_train_each_trial_once(tmp_path):
    out = tmp_path / "run"
    command = [
        *(sys.executable, "-c", TRAIN_LOGGED, "degree-sweep", "--out", str(out), "--quiet"),
        *("--degrees", "2", "3", "--baselines", "--budgets", "292", "--seeds", "3"),
        *("--lr-grid", "0.01", "0.03", "--lr-extend", "0", "--steps", "50"),
        *("--workers", "1", "--ensemble", "2", "--optimizer", "adam"),
    ]
    path = os.pathsep.join(
        [SRC, str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    )
    procs = [
        subprocess.Popen(
            command,
            env={**os.environ, "PYTHONPATH": path, "TRAINED_LOG": str(tmp_path / f"{n}.log")},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    errors = [proc.communicate(timeout=600)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], errors
    trained = [(tmp_path / f"{n}.log").read_text().split() for n in range(2)]
    rows = Store(out).records()
    # 2 arms at one budget: 2 rates searched, then 3 seeds at the chosen rate, seed 0 searched
    assert len(rows) == 8 and {r["status"] for r in rows} == {"done"}
    assert sorted(trained[0] + trained[1]) == sorted(r["id"] for r in rows)
    assert all(trained)  # both took part


def test_a_stop_counts_what_the_whole_command_stored(tmp_path, monkeypatch):
    """A command runs several sweeps on one store (a rate search, its extension, the seeds): a
    stop in a later one reports every trial the command stored, not the later sweep's own."""
    from blocklab.errors import Interrupted

    store, (first, *rest) = Store(tmp_path), _specs(steps=4)
    one = executors.Resources(workers=1, ensemble=1)
    sweep.run([first], store, "t", resources=one, progress=False)

    def stop(specs, device="cpu"):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run_group", stop)
    with pytest.raises(Interrupted) as caught:
        sweep.run(rest, store, "t", resources=one, progress=False)
    assert str(caught.value) == f"interrupted; 1 trial stored in {tmp_path} by this command"
    assert (caught.value.kept.stored, caught.value.kept.mine) == (1, 1)

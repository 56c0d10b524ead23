"""The SQLite trial store: round trips, finished trials, prefixes, sharing, and an old store's
tables read and written through the store's modules."""

import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from blocklab.errors import UserError
from blocklab.store import DB_NAME, Store, fit_states, leases

SRC = str(Path(__file__).resolve().parents[2] / "src")


def record(trial_id, status="done", seed=0, **extra):
    return {
        "id": trial_id,
        "experiment": "degree-sweep",
        "status": status,
        "seed": seed,
        "config": {"arm": "d=3", "budget": 12288, "train": {"steps": 50, "lr": 0.01}},
        "metrics": {"test_metric": 0.25, "test_loss": math.nan, "steps_to_threshold": None},
        "curves": {"step": [0, 25, 50], "val_loss": [1.0, math.inf, 0.2]},
        "provenance": {"torch": "2.x"},
        "finished_at": 1000.0 + seed,
        **extra,
    }


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    yield s
    s.close()


def test_round_trip(store, tmp_path):
    store.put(record("abc123"))
    got = store.get("abc123")
    assert store.path == tmp_path / DB_NAME
    assert got["config"] == record("abc123")["config"]
    assert got["metrics"] == {"test_metric": 0.25, "test_loss": None, "steps_to_threshold": None}
    assert got["curves"] == {"step": [0, 25, 50], "val_loss": [1.0, None, 0.2]}
    assert (got["status"], got["seed"], got["experiment"]) == ("done", 0, "degree-sweep")
    assert got["provenance"] == {"torch": "2.x"} and got["error"] is None
    assert store.get("nope") is None


def test_put_replaces(store):
    store.put(record("t1", status="failed", error="boom"))
    store.put(record("t1", status="done"))
    assert [r["status"] for r in store.records()] == ["done"]


def test_finished_skips_failed(store):
    for tid, status in [("t1", "done"), ("t2", "diverged"), ("t3", "failed")]:
        store.put(record(tid, status=status))
    assert store.finished(["t1", "t2", "t3", "t4"]) == {"t1", "t2"}
    assert store.finished([]) == set()


def test_wal_mode(store):
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_get_by_prefix(store):
    for tid in ("abc1", "abc2", "xyz9"):
        store.put(record(tid))
    assert store.get("xy")["id"] == "xyz9"
    assert store.get("abc2")["id"] == "abc2"
    with pytest.raises(UserError, match="ambiguous"):
        store.get("abc")


def test_records_keep_requested_order(store):
    for i, tid in enumerate(("a", "b", "c", "d")):
        store.put(record(tid, seed=i))
    got = store.records(ids=["c", "a", "missing", "d"])
    assert [r["id"] for r in got] == ["c", "a", "d"]
    assert [r["id"] for r in store.records()] == ["a", "b", "c", "d"]  # by finish time
    assert len(store.records(experiment="degree-sweep")) == 4
    assert store.records(experiment="other") == []


def test_store_under_a_file_fails(tmp_path):
    (tmp_path / "file.txt").write_text("not a directory")
    with pytest.raises(UserError):
        Store(tmp_path / "file.txt" / "sub")


def test_store_on_a_non_database_file_fails(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("this is not an SQLite database, " * 100)
    with pytest.raises(UserError):
        Store(path)


def test_two_stores_share_the_file(tmp_path):
    path = tmp_path / "runs" / "trials.sqlite"
    first, second = Store(path), Store(path)
    try:
        first.put(record("shared"))
        assert second.get("shared")["id"] == "shared"
        assert second.finished(["shared"]) == {"shared"}
        reopened = Store(path)
        assert [r["id"] for r in reopened.records()] == ["shared"]
        reopened.close()
    finally:
        first.close()
        second.close()


def test_get_prefers_an_exact_id_and_reads_prefixes_literally(tmp_path):
    store = Store(tmp_path)
    for trial_id in ("abc", "abcd", "a_cx"):
        store.put({"id": trial_id, "experiment": "e", "status": "done", "seed": 0, "config": {}})
    assert store.get("abc")["id"] == "abc"
    assert store.get("a_c")["id"] == "a_cx"  # "_" is not a wildcard
    assert store.get("zzz") is None


# forks 8 processes per round from a parent that imported the store alone: a test worker holds
# torch, whose pages make every fork slow, and slow starts would let the opens drift apart
RACE = """
import multiprocessing, sys
from pathlib import Path
from blocklab.store import Store

def open_and_close(path, barrier):
    barrier.wait()  # every process opens the new store at the same moment
    Store(path).close()

if __name__ == "__main__":
    context = multiprocessing.get_context("fork")
    for round_ in range(30):
        barrier = context.Barrier(8)
        path = Path(sys.argv[1]) / str(round_)
        procs = [context.Process(target=open_and_close, args=(path, barrier)) for _ in range(8)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=60)
        codes = [proc.exitcode for proc in procs]
        if codes != [0] * 8:
            sys.exit(f"round {round_}: exit codes {codes}")
    if "torch" in sys.modules:
        sys.exit("the store imported torch: forks would be slow")
"""


def test_processes_opening_a_new_store_at_once_all_succeed(tmp_path):
    """The switch to WAL on a new file races between processes; none may fail with 'locked'
    (without the retry this test failed in 3 runs of 3)."""
    script = tmp_path / "race.py"
    script.write_text(RACE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def _wal_files(path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith(("-wal", "-shm")))


def test_reading_leaves_no_wal_files_and_sees_a_writers_commits(tmp_path, capsys):
    import blocklab
    from blocklab.cli import main

    writer = Store(tmp_path)
    writer.put(record("a", config={"train": {"lr": 0.01}}))
    writer.close()
    assert _wal_files(tmp_path) == []
    assert blocklab.load_runs(tmp_path)["id"].tolist() == ["a"]
    assert blocklab.load_curves(tmp_path)["id"].tolist() == ["a", "a", "a"]
    assert main(["runs", "list", "--out", str(tmp_path)]) == 0
    with Store(tmp_path, read_only=True) as reader:
        assert [r["id"] for r in reader.records()] == ["a"]
    assert _wal_files(tmp_path) == []
    # a writer beside a reader: the reader sees each commit, and the last to close removes the
    # files (a reader that came after a writer holds them as they were: it never removes them)
    with Store(tmp_path, read_only=True) as reader:
        writer = Store(tmp_path)
        writer.put(record("b", seed=1))
        assert [r["id"] for r in reader.records()] == ["a", "b"]
        writer.close()
    assert _wal_files(tmp_path) == []
    with Store(tmp_path) as writer, Store(tmp_path, read_only=True) as reader:
        writer.put(record("c", seed=2))
        assert [r["id"] for r in reader.records()] == ["a", "b", "c"]
    assert _wal_files(tmp_path) == []
    capsys.readouterr()


# a store as blocklab wrote it before its tables' SQL moved into `blocklab.store`: every table, in
# the words that made it, with one row each
OLD_STORE = """
CREATE TABLE trials (
    id TEXT PRIMARY KEY, experiment TEXT NOT NULL, status TEXT NOT NULL, seed INTEGER NOT NULL,
    config TEXT NOT NULL, metrics TEXT NOT NULL, curves TEXT NOT NULL, provenance TEXT NOT NULL,
    error TEXT, finished_at REAL NOT NULL
);
CREATE INDEX trials_experiment ON trials (experiment);
CREATE TABLE claims (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, pid INTEGER NOT NULL, host TEXT NOT NULL,
    claimed_at REAL NOT NULL
);
CREATE TABLE fit_states (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, steps INTEGER NOT NULL, tol REAL NOT NULL,
    state BLOB NOT NULL
);
INSERT INTO trials VALUES ('old', 'degree-sweep', 'done', 0, '{}', '{}', '{}',
    '{"code": {"fingerprint": "f00d"}}', NULL, 1.0);
INSERT INTO claims VALUES ('held', 'another sweep', 1, 'another-host', 2.0);
INSERT INTO fit_states VALUES ('old', 'k', 16, 0.001, X'0102');
"""


def _old_store(path: Path, script: str = OLD_STORE) -> None:
    with sqlite3.connect(path / DB_NAME) as conn:
        conn.executescript(script)
    conn.close()


def test_an_old_store_opens_and_its_tables_answer_through_the_store(tmp_path):
    """Each table's queries, the store's own modules', read and write an old store's rows."""
    _old_store(tmp_path)
    with Store(tmp_path) as store:
        assert [r["id"] for r in store.records()] == ["old"]
        assert fit_states.finished(store, ["k", "other"]) == [
            ("k", "old", 16, 0.001, b"\x01\x02", "f00d")
        ]
        leases.create(store.conn)  # a table already there is kept as it is
        assert leases.count(store.conn) == 1
        holder, live = ("me", os.getpid(), "here"), lambda row: row[0] == "another sweep"
        assert not leases.take(store.conn, ["held", "free"], holder, 3.0, live)
        assert leases.take(store.conn, ["free"], holder, 3.0, live)
        leases.release_all(store.conn, "me")
        assert leases.count(store.conn) == 1
        fit_states.put(store, "new", "k", 32, 0.001, b"\x03")
        store.put(record("new"))
        assert {row[1] for row in fit_states.finished(store, ["k"])} == {"old", "new"}
    with Store(tmp_path, read_only=True) as store:
        assert {r["id"] for r in store.records()} == {"old", "new"}


def test_the_old_store_check_fails_on_a_renamed_table(tmp_path):
    """The check above, on an old store whose lease table went by another name: the lease it
    holds is not seen, and a sweep would take the trial another sweep runs."""
    _old_store(tmp_path, OLD_STORE.replace("claims", "held_trials"))
    with Store(tmp_path) as store:
        leases.create(store.conn)
        assert leases.take(store.conn, ["held"], ("me", 0, "here"), 3.0, lambda row: True)


def test_fit_states_before_any_are_stored_are_none(store):
    assert fit_states.finished(store, ["k"]) == []
    store.put(record("failed", status="failed"))
    fit_states.put(store, "failed", "k", 16, 0.001, b"")
    assert fit_states.finished(store, ["k"]) == []  # a failed trial's states continue nothing


def test_expect_tells_its_listeners_the_ids_a_sweep_will_have(store):
    heard = []
    store.on_expect.append(heard.append)
    store.expect(iter(["a", "b"]))
    assert heard == [["a", "b"]]


def test_what_a_stop_keeps_is_read_from_the_store(tmp_path):
    """The finished trials the store holds, whoever stored them, and those of them this store
    put: a failed trial is not kept, and a put a stop rolled back is not there."""
    from blocklab.errors import Kept

    with Store(tmp_path) as earlier:
        assert str(earlier.kept()) == f"no trials stored in {tmp_path}"
        earlier.put(record("old"))
        assert str(earlier.kept()) == f"1 trial stored in {tmp_path} by this command"
    store = Store(tmp_path / DB_NAME)  # named by its file: the words name the directory
    assert str(store.kept()) == f"1 trial stored in {tmp_path} (none by this command)"
    store.put(record("new"))
    store.put(record("raised", status="failed", error="boom"))
    store.conn.execute("BEGIN IMMEDIATE")
    store.put(record("rolled back"))
    store.conn.execute("ROLLBACK")
    assert store.kept() == Kept(stored=2, mine=1, where=str(tmp_path))
    assert str(store.kept()) == f"2 trials stored in {tmp_path} (1 by this command)"
    store.put(record("more"))
    assert str(store.kept()) == f"3 trials stored in {tmp_path} (2 by this command)"
    store.close()

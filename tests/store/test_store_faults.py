"""The store under faults: writers at once lose nothing, a killed writer leaves no half record,
and a failed run of a trial never replaces its finished result."""

import multiprocessing
import time

from blocklab.store import Store

WRITERS, PER_WRITER, SHARED = 4, 50, 5


def record(trial_id: str, writer: int, n: int, status: str = "done", size: int = 8) -> dict:
    """A record whose every field says who wrote it: a mixed-up or partial row cannot pass."""
    return {
        "id": trial_id,
        "experiment": "faults",
        "status": status,
        "seed": n,
        "config": {"writer": writer, "n": n, "id": trial_id},
        "metrics": {"value": n / 4 + writer, "square": n * n},
        "curves": {"step": list(range(size)), "loss": [(n + 1) / (k + 1) for k in range(size)]},
        "provenance": {"writer": writer},
        "finished_at": 1000.0 * (writer + 1) + n,
    }


def same(stored: dict, written: dict) -> bool:
    return all(stored[key] == value for key, value in written.items())


def write_many(path, writer, barrier) -> None:
    barrier.wait()  # all open the store and write at once
    store = Store(path)
    for n in range(PER_WRITER):
        store.put(record(f"w{writer}-{n}", writer, n))
        if n % (PER_WRITER // SHARED) == 0:  # the same trials, finished by every writer
            shared = n // (PER_WRITER // SHARED)
            store.put(record(f"shared-{shared}", writer, shared))
    store.close()


def test_four_writers_at_once_lose_nothing(tmp_path):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(WRITERS)
    procs = [
        context.Process(target=write_many, args=(tmp_path, w, barrier)) for w in range(WRITERS)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=50)
    assert [proc.exitcode for proc in procs] == [0] * WRITERS

    store = Store(tmp_path)
    rows = store.records()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == WRITERS * PER_WRITER + SHARED
    got = {r["id"]: r for r in rows}
    for w in range(WRITERS):
        for n in range(PER_WRITER):
            assert same(got[f"w{w}-{n}"], record(f"w{w}-{n}", w, n))
    for s in range(SHARED):  # whichever writer came last, its whole record
        assert any(same(got[f"shared-{s}"], record(f"shared-{s}", w, s)) for w in range(WRITERS))
    store.close()


def write_forever(path) -> None:
    store = Store(path)
    n = 0
    while True:
        store.put(record(f"t{n}", 0, n, size=5000))  # large rows: the kill likely lands mid-write
        n += 1


def test_a_killed_writer_leaves_no_half_record(tmp_path):
    proc = multiprocessing.get_context("spawn").Process(target=write_forever, args=(tmp_path,))
    proc.start()
    try:
        reader = Store(tmp_path)
        deadline = time.monotonic() + 30
        while len(reader.finished(f"t{n}" for n in range(40))) < 40:
            assert time.monotonic() < deadline and proc.is_alive()
            time.sleep(0.05)
        reader.close()
    finally:
        proc.kill()
        proc.join()

    store = Store(tmp_path)
    assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = store.records()
    assert len(rows) >= 40
    # commits are atomic and in order: t0 .. t(m-1), each whole
    assert sorted(int(r["id"][1:]) for r in rows) == list(range(len(rows)))
    for r in rows:
        assert same(r, record(r["id"], 0, int(r["id"][1:]), size=5000))
    store.put(record("after", 0, 0))  # and it takes writes again
    assert store.get("after")["status"] == "done"
    store.close()


def test_a_failed_run_never_replaces_a_finished_one(tmp_path):
    store = Store(tmp_path)
    done = record("t", 0, 1)
    failed = {**record("t", 1, 2, status="failed"), "metrics": {}, "error": "killed"}
    store.put(done)
    store.put(failed)  # a second run of the same trial failed after the first finished
    assert same(store.get("t"), done) and store.get("t")["error"] is None

    diverged = record("t", 2, 3, status="diverged")
    store.put(diverged)  # a finished result replaces a finished result
    assert same(store.get("t"), diverged)

    store.put({**record("u", 0, 1, status="failed"), "error": "first"})
    store.put({**record("u", 1, 1, status="failed"), "error": "second"})
    assert store.get("u")["error"] == "second"  # a failure replaces a failure
    store.put(record("u", 2, 1))
    assert same(store.get("u"), record("u", 2, 1)) and store.get("u")["error"] is None
    assert store.finished(["t", "u"]) == {"t", "u"}
    store.close()

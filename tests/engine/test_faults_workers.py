"""A sweep's pool workers die with the command that started them, however it dies: killed with
SIGKILL it cannot stop them, so they must notice; a closed terminal (SIGHUP) stops the sweep
like Ctrl-C, keeping what finished. Nothing it started is left running either way."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import blocklab

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")

SRC = str(Path(blocklab.__file__).resolve().parents[1])
# how long a killed parent's workers and resource tracker may take to be gone: the kernel ends
# the workers at once, but on a loaded machine their exit and the tracker's clean-up wait for a core
EXIT_WAIT = 60


def sweep(out: Path, steps: int, seeds: int) -> subprocess.Popen:
    """A degree sweep on a pool of two workers, in a session of its own (a terminal's)."""
    command = [
        *(sys.executable, "-m", "blocklab", "degree-sweep", "--out", str(out)),
        *("--degrees", "2", "3", "--baselines", "--budgets", "292", "--seeds", str(seeds)),
        *("--lr-grid", "0.01", "--lr-extend", "0", "--steps", str(steps), "--n-boot", "10"),
        *("--workers", "2", "--ensemble", "1", "--optimizer", "adam"),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    # its temporary files in the test's directory: a command killed with SIGKILL cannot remove
    # them (the pool's file for a failed start's cause)
    env["TMPDIR"] = str(out.parent)
    log = open(out.with_suffix(".log"), "w")  # noqa: SIM115 - the child holds it
    return subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)


def _stat(pid: int) -> list[str] | None:
    """State, parent pid, ... of a process (after its name, which may hold spaces)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")  # an unreaped zombie runs nothing


def descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        stat = _stat(int(entry.name))
        if stat is not None:
            parents[int(entry.name)] = int(stat[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parents.items() if parent in frontier]
        found += kids
        frontier = kids
    return found


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def stored(out: Path) -> list[tuple[str, str]]:
    path = out / "blocklab.sqlite"
    if not path.exists():
        return []
    conn = sqlite3.connect(path, timeout=60)
    try:
        return conn.execute("SELECT id, status FROM trials").fetchall()
    except sqlite3.OperationalError:  # not made yet
        return []
    finally:
        conn.close()


@pytest.fixture
def reap():
    """Kills, at the end, whatever a failing test left running of what it started."""
    started: list[int] = []
    yield started
    for pid in started:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def cpu_seconds(pid: int) -> float:
    """User and system time a process has used (0 once it is gone)."""
    stat = _stat(pid)
    return 0.0 if stat is None else (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def pool_workers(pid: int) -> list[int]:
    """The pool workers of a command: the children of its children (of its fork server)."""
    found = descendants(pid)
    return [p for p in found if (_stat(p) or ["", ""])[1] != str(pid)]


# CPU time each pool worker has used when it is taken to be in the middle of a trial: a worker
# forked from the server, which imported torch and blocklab, starts with next to none, so most
# of this is training
TRAINING = 0.5


def test_workers_die_with_a_killed_parent(tmp_path, reap):
    proc = sweep(tmp_path / "run", steps=4000, seeds=2)
    reap.append(proc.pid)
    # two workers, the fork server they were forked from and the resource tracker
    wait_for(lambda: len(descendants(proc.pid)) >= 4, 120, "the pool to start")

    def training() -> bool:  # workers in the middle of their first trials (4000 steps each)
        workers = pool_workers(proc.pid)
        return len(workers) >= 2 and all(cpu_seconds(p) >= TRAINING for p in workers)

    wait_for(training, 120, "both workers to be training")
    children = descendants(proc.pid)
    reap.extend(children)
    assert all(running(p) for p in children)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    wait_for(lambda: not any(running(p) for p in children), EXIT_WAIT, f"{children} to exit")


def test_a_closed_terminal_stops_the_sweep_and_keeps_what_finished(tmp_path, reap):
    out = tmp_path / "run"
    # trials of 100 steps: the first is stored soon, and the 15 left take several times as long
    # as the wait for it, so the hangup lands mid-sweep
    proc = sweep(out, steps=100, seeds=8)
    reap.append(proc.pid)
    # a sweep that exits first fails below, at once, rather than after the wait
    wait_for(lambda: len(stored(out)) >= 1 or proc.poll() is not None, 300, "a finished trial")
    assert proc.poll() is None, out.with_suffix(".log").read_text()
    children = descendants(proc.pid)
    reap.extend(children)
    before = len(stored(out))
    os.killpg(proc.pid, signal.SIGHUP)  # a closed terminal signals its whole session
    assert proc.wait(timeout=60) == 130
    log = out.with_suffix(".log").read_text()
    assert "interrupted;" in log and "rerun the same command to resume" in log
    assert "Traceback" not in log and "leak" not in log  # the resource tracker outlived the pool
    rows = stored(out)
    assert before <= len(rows) < 16  # 2 searched and 2 x 8 final trials, 2 of them the same
    assert {status for _, status in rows} == {"done"}
    wait_for(lambda: not any(running(p) for p in children), EXIT_WAIT, f"{children} to exit")

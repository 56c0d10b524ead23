"""The command line as a user meets it: bad input, a full small sweep, resume after a kill."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blocklab.cli import main

# a sweep small enough for a test: 5 arms, 2 learning rates, 2 seeds
TINY = [
    "--optimizer",
    "adam",
    "--task",
    "teacher",
    "--task-option",
    "n_train=512",
    "--task-option",
    "n_val=128",
    "--task-option",
    "n_test=256",
    "--budgets",
    "3072",
    "--width",
    "16",
    "--steps",
    "40",
    "--seeds",
    "2",
    "--lr-grid",
    "3e-3",
    "1e-2",
    "--lr-extend",
    "0",
    "--quiet",
]


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "blocklab.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--degrees", "0"],
        ["--degrees", "x"],
        ["--degrees", "[3,,x]"],
        ["--budgets", "-5"],
        ["--budgets", "10"],  # too small for one layer at width 5
        ["--budgets", "ten"],
        ["--task", "techer"],
        ["--task-option", "n_inn=3"],
        ["--task-option", "n_in"],
        ["--seeds", "0"],
        ["--mode", "height"],
        ["--norm", "batch"],
        ["--lr-grid", "-1"],
        ["--bias", "--degrees", "e"],
        ["--workers", "0"],
        ["--ensemble", "0"],
        ["--executor", "rayy"],
        ["--executor", "ray", "--executor-option", "adress=auto"],
        ["--executor", "slurm", "--executor-option", "time=soon"],
        ["--executor-option", "x"],
        ["--no-such-flag"],
        ["--config", "/nonexistent.toml"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, tmp_path, capsys):
    code = main(["degree-sweep", "--out", str(tmp_path / "out"), "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("blocklab: error:")
    assert "Traceback" not in err


def test_unwritable_out_dir(tmp_path, capsys):
    blocker = tmp_path / "file.txt"
    blocker.write_text("a file, not a directory")
    code = main(["degree-sweep", "--out", str(blocker / "out"), *TINY])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_input_from_the_installed_command(tmp_path):
    """Through a process's exit: a bad config value, an unknown command, a trial not in the
    store (each value's own message is the test above's, in this process)."""
    for args in (
        ["degree-sweep", "--task", "techer"],
        ["nonsense"],
        ["runs", "show", "abc", "--out", str(tmp_path)],
    ):
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory) -> tuple[Path, str]:
    """TINY on one worker with --json, run once for the tests that read it (not one writes to
    its directory): the run directory and what the command printed."""
    out = tmp_path_factory.mktemp("tiny") / "sweep"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["degree-sweep", "--out", str(out), "--json", "--workers", "1", *TINY]) == 0
    return out, printed.getvalue()


def test_sweep_json_report_and_runs(tiny_sweep, tmp_path, capsys):
    out, printed = tiny_sweep
    payload = json.loads(printed)
    arms = {s["arm"] for s in payload["summaries"]}
    assert arms == {"d=2", "d=3", "d=4", "mlp"}
    assert all(s["n"] == 2 for s in payload["summaries"])
    assert len(payload["verdicts"]) == 1 and "t-test" in payload["verdicts"][0]["text"]
    assert set(payload["lr_choice"]) == {f"3072/{a}" for a in arms}
    report = (out / "report.md").read_text()
    assert "paired" in report and "d=4" in report
    for png in ("metric_vs_degree.png", "learning_curves.png", "ranking_vs_theory.png"):
        assert (out / png).stat().st_size > 1000

    # runs: list, show, export
    assert main(["runs", "--out", str(out), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == 4 * (2 + 1)  # per arm: 2 learning rates on seed 0, then seed 1
    assert main(["runs", "show", listed[0]["id"][:8], "--out", str(out)]) == 0
    assert listed[0]["id"] in capsys.readouterr().out
    assert main(["runs", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(listed)
    assert all(" budget=" in line and " lr=" in line and " seed=" in line for line in lines)
    csv_path = tmp_path / "trials.csv"
    assert main(["runs", "export", str(csv_path), "--out", str(out)]) == 0
    assert len(csv_path.read_text().strip().splitlines()) == len(listed) + 1


def _finished(db: Path) -> dict[str, float]:
    if not db.exists():
        return {}
    with sqlite3.connect(db, timeout=30) as conn:
        try:
            rows = conn.execute("SELECT id, finished_at FROM trials WHERE status='done'").fetchall()
        except sqlite3.OperationalError:  # polled between the file's creation and its schema
            return {}
    return dict(rows)


def test_killed_sweep_resumes_without_rerunning_and_matches(tiny_sweep, tmp_path, capsys):
    """Kill -9 mid-sweep, rerun: finished trials are kept untouched and the table is the same
    as the undisturbed sweep's (`tiny_sweep`, the same command). The killed sweep is a command
    of its own; the rerun runs here."""
    args = [*TINY, "--workers", "1", "--json"]
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "blocklab.cli", "degree-sweep", "--out", str(out), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 240
    db = out / "blocklab.sqlite"
    while len(_finished(db)) < 4 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    before = _finished(out / "blocklab.sqlite")
    assert 4 <= len(before) < 15, f"the kill should land mid-sweep; stderr: {err}"

    capsys.readouterr()
    assert main(["degree-sweep", "--out", str(out), *args]) == 0
    printed = capsys.readouterr().out
    after = _finished(out / "blocklab.sqlite")
    assert {k: after[k] for k in before} == before  # not one finished trial ran again
    assert len(after) == 12

    def table(stdout: str):
        payload = json.loads(stdout)
        return payload["summaries"], [v["text"] for v in payload["verdicts"]]

    assert table(printed) == table(tiny_sweep[1])


def start_pool_sweep(out: Path) -> subprocess.Popen:
    """Start a 2-worker sweep in the background and return once 2 trials are stored."""
    cmd = [sys.executable, "-m", "blocklab.cli", "degree-sweep", "--out", str(out), *TINY]
    proc = subprocess.Popen(
        [*cmd, "--steps", "150", "--workers", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # a shell's background job inherits SIGINT ignored; a user at a terminal has it live
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 240
    # a sweep that exited early is left to the caller's checks of its exit code and stderr
    db = out / "blocklab.sqlite"
    while len(_finished(db)) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    return proc


def test_interrupt_keeps_finished_trials(tmp_path):
    out = tmp_path / "int"
    proc = start_pool_sweep(out)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    stored = len(_finished(out / "blocklab.sqlite"))
    assert stored >= 2
    said = f"blocklab: interrupted; {stored} trials stored in {out} by this command; rerun"
    assert err.strip().splitlines()[-1].startswith(said)


def test_a_kill_and_a_closed_terminal_stop_a_command_as_ctrl_c_does(capsys):
    """SIGTERM and SIGHUP raise KeyboardInterrupt in a command, as SIGINT does: what a stop then
    keeps and says is the test above's (Ctrl-C, a pool's sweep) and test_faults_workers' (a
    closed terminal's SIGHUP, through the same handler)."""
    from blocklab.cli.main import _sigterm

    assert main(["theory", "--degrees", "2", "--json"]) == 0
    capsys.readouterr()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        handler = signal.getsignal(sig)
        assert handler is _sigterm
        with pytest.raises(KeyboardInterrupt):
            handler(sig, None)


@pytest.mark.parametrize(
    ("where", "kept"),
    [("blocklab.experiments.degree_sweep.experiment.optimizers", 4),
     ("blocklab.experiments.degree_sweep.report.write", 8)],
    ids=["between-sweeps", "analysis"],
)  # fmt: skip
def test_a_stop_outside_the_trials_says_what_is_kept(tmp_path, capsys, monkeypatch, where, kept):
    """Ctrl-C as the fits are planned (after the rate search stored its 4 trials) or in the
    analysis (all 8 stored): the words of a stop inside a sweep, with what the command stored.
    Run again into that directory, where an earlier command stored them, the stop says the
    store holds them and that this command stored none."""
    import test_api

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(where, stop)
    args = ["degree-sweep", "--out", str(tmp_path), *test_api.FLAGS, "--quiet"]
    assert main(args) == 130
    # all it says: --quiet leaves the trials' lines out (their rate search ran)
    said = f"blocklab: interrupted; {kept} trials stored in {tmp_path} by this command"
    assert capsys.readouterr().err == f"{said}; rerun the same command to resume\n"
    assert len(_finished(tmp_path / "blocklab.sqlite")) == kept
    assert main(args) == 130
    said = f"blocklab: interrupted; {kept} trials stored in {tmp_path} (none by this command)"
    assert capsys.readouterr().err == f"{said}; rerun the same command to resume\n"


def test_a_stop_counts_the_trials_the_store_holds_and_those_this_command_stored(
    tmp_path, capsys, monkeypatch
):
    """A store planted with a trial an earlier command stored, and one it failed: Ctrl-C once
    the rate search stored its first trial says the store holds 2 finished trials, 1 of them
    this command's."""
    import test_api

    from blocklab.engine.progress import Progress
    from blocklab.store import Store

    with Store(tmp_path) as planted:
        for trial, status in (("earlier", "done"), ("raised", "failed")):
            planted.put({"id": trial, "experiment": "degree-sweep", "status": status, "seed": 0,
                         "config": {}, "metrics": {}})  # fmt: skip
    update = Progress.update

    def stop_after_one(self, spec, record):
        update(self, spec, record)
        raise KeyboardInterrupt

    monkeypatch.setattr(Progress, "update", stop_after_one)
    args = ["degree-sweep", "--out", str(tmp_path), *test_api.FLAGS, "--quiet"]
    assert main(args) == 130
    said = f"blocklab: interrupted; 2 trials stored in {tmp_path} (1 by this command)"
    assert capsys.readouterr().err == f"{said}; rerun the same command to resume\n"


ENDING = """
import atexit, threading, time

def mark(what):
    with open({marks!r}, "a") as f:
        f.write(what + "\\n")

atexit.register(mark, "exit handler")
threading.Thread(target=lambda: (time.sleep(0.5), mark("thread"))).start()
"""


def test_the_command_ends_its_process_keeping_what_the_teardown_would_do(tmp_path):
    """`command` skips the interpreter's teardown, not what it does that matters: a thread that
    is not a daemon finishes, then an exit handler runs, and what was printed is written."""
    marks = tmp_path / "marks"
    plugin = tmp_path / "ending.py"
    plugin.write_text(ENDING.format(marks=str(marks)))
    proc = run_cli("theory", "--import", str(plugin), "--degrees", "2", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["rows"]) == 2
    assert marks.read_text().splitlines() == ["thread", "exit handler"]


def test_theory_command(capsys):
    assert main(["theory", "--json", "--degrees", "2", "e", "3"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    hs = {round(r["degree"], 3): r["h"] for r in rows}
    assert hs[2.718] > hs[3.0] > hs[2.0]


def _children(parent: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def _pool_workers(parent: int) -> list[int]:
    """The parent's pool workers: the children of its fork server (`executors.pool_context`), or
    its spawned children (not multiprocessing's resource tracker)."""
    out = []
    for child in _children(parent):
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
        if b"forkserver" in cmdline:
            out += _children(child)
        elif b"spawn_main" in cmdline:
            out.append(child)
    return out


def test_a_killed_worker_is_one_line_and_keeps_finished_trials(tmp_path):
    out = tmp_path / "crash"
    proc = start_pool_sweep(out)
    workers = _pool_workers(proc.pid)
    assert workers, "the sweep should be running in a process pool"
    os.kill(workers[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    kept = _finished(out / "blocklab.sqlite")
    assert proc.returncode == 1, err  # any dead worker breaks the pool, with trials still queued
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "worker process was killed by SIGKILL (killed, or out of memory)" in err, err
    assert len(kept) >= 2


def test_diverged_trials_are_stored_and_the_sweep_goes_on(tmp_path, capsys):
    """A learning rate of 1e3 blows up; the grid's sane rate is chosen and every seed finishes."""
    out = tmp_path / "div"
    args = [*TINY, "--lr-grid", "3e-3", "1e3", "--degrees", "3", "--baselines", "--json"]
    assert main(["degree-sweep", "--out", str(out), "--workers", "1", *args]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["lr_choice"]["3072/d=3"]["lr"] == 3e-3
    assert payload["lr_choice"]["3072/d=3"]["val_metric"]["1000"] is None
    assert payload["summaries"][0]["n"] == 2
    assert main(["runs", "--out", str(out), "--status", "diverged", "--json"]) == 0
    diverged = json.loads(capsys.readouterr().out)
    assert len(diverged) == 1
    assert diverged[0]["metrics"]["diverged_step"] >= 1
    assert diverged[0]["metrics"]["test_metric"] is None

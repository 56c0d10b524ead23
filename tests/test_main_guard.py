"""A script whose workers cannot import it as they should is refused before any worker starts,
with the fix named: read on standard input, or calling blocklab.run outside the main guard.
Before, both ended in "a worker process died (killed, or out of memory)"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CALL = (
    'blocklab.run("degree-sweep", out={out!r}, degrees=("2", "3"), baselines=(), '
    'budgets=(45, 90), seeds=2, steps=4, workers=2, optimizer="adam", n_boot=20)'
)


def _script(tmp_path: Path, guarded: bool) -> str:
    call = CALL.format(out=str(tmp_path / "run"))
    body = f'if __name__ == "__main__":\n    {call}\n' if guarded else f"{call}\n"
    return "import blocklab\n\n" + body


def _python(args, stdin=None, cwd=None):
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_an_unguarded_script_is_refused_naming_the_guard(tmp_path):
    path = tmp_path / "unguarded.py"
    path.write_text(_script(tmp_path, guarded=False))
    done = _python([str(path)])
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and "UserError" in last
    assert "unguarded.py calls blocklab at its top level" in last
    assert 'if __name__ == "__main__":' in last and "WorkerDied" not in done.stderr


def test_a_script_on_standard_input_is_refused_naming_the_cause(tmp_path):
    done = _python(["-"], stdin=_script(tmp_path, guarded=True), cwd=tmp_path)
    last = done.stderr.strip().splitlines()[-1]
    assert "a script read on standard input cannot be imported" in last
    assert "WorkerDied" not in done.stderr


@pytest.mark.slow
def test_a_guarded_script_runs_its_workers(tmp_path):
    path = tmp_path / "guarded.py"
    path.write_text(_script(tmp_path, guarded=True))
    done = _python([str(path)])
    assert done.returncode == 0, done.stderr[-500:]
    assert (tmp_path / "run" / "report.md").exists()

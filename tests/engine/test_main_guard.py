"""A script whose workers cannot import it as they should is refused before any worker starts,
with the fix named: read on standard input, or calling blocklab.run outside the main guard.
Before, both ended in "a worker process died (killed, or out of memory)"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# one rate, no extension, one seed and one budget: the rate search's round of the pool trains
# every trial, one per degree, two for the two workers, and the seeds' round reuses them
CALL = (
    'blocklab.run("degree-sweep", out={out!r}, degrees=("2", "3"), baselines=(), '
    'budgets=(45,), seeds=1, steps=4, workers=2, optimizer="adam", n_boot=20, '
    "lr_grid=(0.03,), lr_extend=0)"
)


def _script(tmp_path: Path, guarded: bool) -> str:
    call = CALL.format(out=str(tmp_path / "run"))
    body = f'if __name__ == "__main__":\n    {call}\n' if guarded else f"{call}\n"
    return "import blocklab\n\n" + body


def _python(args, stdin=None, cwd=None):
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, timeout=600, cwd=cwd
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


# the idiomatic script: its blocklab call inside `def main()`, called under the guard; and a
# function of its own named `run`, called at its top level, which is not blocklab's
MAIN_FUNCTION = """import blocklab


def run(n):
    return n


run(1)


def main():
    {call}


if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_a_main_function_called_under_the_guard_runs_two_workers(tmp_path):
    path = tmp_path / "guarded.py"
    path.write_text(MAIN_FUNCTION.format(call=CALL.format(out=str(tmp_path / "run"))))
    done = _python([str(path)])
    assert done.returncode == 0, done.stderr[-500:]
    assert (tmp_path / "run" / "report.md").exists()


RUN = "blocklab.run('degree-sweep')"
# (script, whether importing it starts a sweep): what Python runs at import, and what it does not
SCRIPTS = [
    (f"import blocklab\n{RUN}\n", True),
    (f"import blocklab\nif __name__ == '__main__':\n    {RUN}\n", False),
    (f"import blocklab\nif __name__ != '__main__':\n    pass\nelse:\n    {RUN}\n", False),
    (f"import blocklab\nif __name__ != '__main__':\n    {RUN}\n", True),
    (f"import blocklab\ndef main():\n    {RUN}\n", False),
    (f"import blocklab\ndef main():\n    {RUN}\nmain()\n", True),  # called at import
    (f"import blocklab\nasync def main():\n    {RUN}\n", False),
    (f"import blocklab\nf = lambda: {RUN}\n", False),
    (f"import blocklab\nclass Sweep:\n    result = {RUN}\n", True),  # a class body runs
    (f"import blocklab\nclass Sweep:\n    def go(self):\n        {RUN}\n", False),
    (f"import blocklab\ndef main(result={RUN}):\n    pass\n", True),  # a default runs
    ("import blocklab\n@blocklab.run\ndef main():\n    pass\n", True),  # a decorator runs
    (f"import blocklab\ntry:\n    {RUN}\nexcept ValueError:\n    pass\n", True),
    (f"import blocklab\nfor i in range(2):\n    {RUN}\n", True),
    ("import blocklab as bl\nbl.run('demo')\n", True),
    ("import blocklab.api\nblocklab.api.run('demo')\n", True),
    ("from blocklab import api\napi.run('demo')\n", True),
    ("from blocklab import run\nrun('demo')\n", True),
    ("from blocklab.api import run as go\ngo('demo')\n", True),
    # the user's own `run` is not blocklab's
    ("def run(x):\n    return x\nrun(3)\n", False),
    ("from blocklab import run\ndef run(x):\n    return x\nrun(3)\n", False),
    ("from mylib import run\nrun(3)\n", False),
    ("import blocklab\nblocklab.load_runs('runs/x')\n", False),
    ("import subprocess\nsubprocess.run(['ls'])\n", False),
]


@pytest.mark.parametrize(("source", "starts"), SCRIPTS)
def test_only_what_an_import_runs_counts_as_a_top_level_call(source, starts):
    import ast

    from blocklab.engine.processes import starts_a_sweep

    assert starts_a_sweep(ast.parse(source)) is starts

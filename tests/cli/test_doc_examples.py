"""Every example the documentation gives (README.md and the guide's pages: each `blocklab`
command of a shell block, each Python block that calls `run(`) has a measured time in the
timings file, or states beside it the timed command that stands for it, with that command's
time as its entry holds it (`blocklab.cli.examples`). The readers are tested on pages made
here, so that they can fail. Nothing here runs an experiment."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from blocklab.cli import examples, timings

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = timings.entries()
FOUND = examples.find()


def test_every_example_of_the_docs_is_timed_or_names_its_stand_in():
    assert len({ex.page for ex in FOUND}) >= 10, "the pages' examples were not found"
    problems = examples.untimed(FOUND, ENTRIES)
    assert not problems, "\n".join(problems)


def test_every_example_entry_was_timed_with_the_config_it_runs_now():
    problems = examples.stale(ENTRIES, FOUND)
    assert not problems, "\n".join(problems)


def test_every_example_entry_stands_for_an_example():
    problems = examples.unused(FOUND, ENTRIES)
    assert not problems, "\n".join(problems)


def test_the_pages_read_are_the_readme_and_the_guide():
    pages = {str(p.relative_to(ROOT)) for p in examples.pages()}
    assert {"README.md", "docs/extending.md", "docs/scale.md", "docs/guide/degree.md"} <= pages
    assert not any(p.startswith("docs/results/") for p in pages)  # what ran, not examples
    shown = {ex.key for ex in FOUND}
    assert "blocklab demo" in shown  # the README's `.venv/bin/blocklab demo`, after `&&`
    python = [ex for ex in FOUND if ex.code is not None]
    assert {ex.page for ex in python} == {"README.md", "docs/guide/python-api.md"}, python


PAGE = """\
# A page

```bash
blocklab collapse --out runs/c --quiet
blocklab degree-sweep --degrees=2 3 \\
    --out runs/mine     # a comment
blocklab mad --full     # hours; timed: blocklab mad --full --seeds 1 --out x (1 min 4 s)
blocklab runs list --out runs/demo
blocklab depth-width --full --executor slurm
#   timed: blocklab depth-width (19 min 48 s)
```

```text
blocklab demo
```

```python
from blocklab import run

if __name__ == "__main__":
    result = run("collapse", out="runs/x", steps=20)
```

```python
def run(cfg, store):  # defines a run, calls none
    return None
```
"""


def test_a_page_is_read_into_keys_and_links():
    found = examples.read(PAGE, "page.md")
    assert [(ex.line, ex.key) for ex in found if ex.code is None] == [
        (4, "blocklab collapse"),  # where it writes and whether it shows progress: no key
        (5, "blocklab degree-sweep --degrees 2 3"),
        (7, "blocklab mad --full"),
        (8, "blocklab runs list --out runs/demo"),  # not an experiment: --out is what it reads
        (9, "blocklab depth-width --full --executor slurm"),
    ]
    links = {ex.key: (ex.link, ex.stated) for ex in found if ex.link}
    assert links == {
        "blocklab mad --full": ("blocklab mad --full --seeds 1", "1 min 4 s"),
        "blocklab depth-width --full --executor slurm": ("blocklab depth-width", "19 min 48 s"),
    }
    [python] = [ex for ex in found if ex.code is not None]
    assert python.line == 18 and "run('collapse', out='runs/x', steps=20)" in python.key
    assert examples.command_key("mad", "sweep_width") == "blocklab mad --sweep-width"
    assert examples.command_key("sanford qsa") == "blocklab sanford qsa"


def _entry(example: str, seconds: float = 64.0) -> dict:
    return {"example": example, "argv": ["blocklab"], "seconds": seconds}


def test_an_untimed_example_a_missing_stand_in_and_a_wrong_time_fail():
    found = examples.read(PAGE, "page.md")
    timed = [_entry(ex.key) for ex in found if not ex.link]
    timed.append(_entry("blocklab mad --full --seeds 1"))
    timed.append({"command": "depth-width", "form": "", "seconds": 1188.0})
    assert examples.untimed(found, timed) == []
    problems = examples.untimed(found, timed[1:])  # the collapse example has no time now
    assert len(problems) == 1 and problems[0].startswith("page.md:4: `blocklab collapse` has no")
    assert "--examples --only" in problems[0]
    gone = [e for e in timed if e.get("example") != "blocklab mad --full --seeds 1"]
    [problem] = examples.untimed(found, gone)
    assert problem == (
        "page.md:7: links to `blocklab mad --full --seeds 1`, which no entry of timings.json holds"
    )
    slower = [{**e, "seconds": 65.0} if e.get("example", "").endswith("1") else e for e in timed]
    [problem] = examples.untimed(found, slower)
    assert problem.startswith("page.md:7: states `blocklab mad --full --seeds 1` took 1 min 4 s")
    assert problem.endswith("its entry: 1 min 5 s")
    orphan = _entry("blocklab collapse --steps 3")
    assert examples.unused(found, timed) == []
    [problem] = examples.unused(found, [*timed, orphan])
    assert problem == (
        "timings.json holds `blocklab collapse --steps 3`, which no page shows or names: remove it"
    )


def test_a_python_example_is_keyed_by_its_code():
    [python] = [ex for ex in examples.read(PAGE, "page.md") if ex.code is not None]
    untimed = examples.untimed([python], [])
    assert len(untimed) == 1 and untimed[0].startswith("page.md:18: `from blocklab import run ...`")
    assert examples.untimed([python], [_entry(python.key)]) == []


def test_an_example_entry_with_another_config_is_stale():
    [python] = [ex for ex in examples.read(PAGE, "page.md") if ex.code is not None]
    now = examples.fingerprint(python)
    assert now is not None
    fresh = {**_entry(python.key), "config_fingerprint": now}
    assert examples.stale([fresh], [python]) == []
    [problem] = examples.stale([{**fresh, "config_fingerprint": "0" * 16}], [python])
    assert "was timed with another config" in problem and "--examples --only" in problem
    command = examples.Example("p.md", 1, "blocklab check", argv=("check",))
    assert examples.fingerprint(command) is None  # it runs no experiment


def test_a_command_example_resolves_its_flags_and_files():
    def at(*argv: str) -> str | None:
        return examples.fingerprint(examples.Example("p.md", 1, "", argv=argv))

    quick = timings.fingerprint_now("collapse")
    assert at("collapse") == at("collapse", "--out", "x", "--quiet") == quick
    assert at("collapse", "--steps", "7") != quick
    assert at("mad", "--sweep-width") == timings.fingerprint_now("mad", "sweep_width")
    toml = at("degree-sweep", "--config", "examples/mnist1d_logistic.toml")
    assert toml not in (None, at("degree-sweep"))


def _script():
    path = ROOT / "benchmarks" / "command_times.py"
    spec = importlib.util.spec_from_file_location("command_times", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(where: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(where), *args], check=True, capture_output=True)


def test_the_script_refuses_a_checkout_with_uncommitted_source(tmp_path):
    script = _script()
    (tmp_path / "src" / "blocklab").mkdir(parents=True)
    (tmp_path / "src" / "blocklab" / "timings.json").write_text("{}\n")
    (tmp_path / "src" / "a.py").write_text("A = 1\n")
    (tmp_path / "notes.md").write_text("notes\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    (tmp_path / "src" / "blocklab" / "timings.json").write_text('{"entries": []}\n')
    (tmp_path / "notes.md").write_text("more notes\n")
    (tmp_path / "src" / "new.py").write_text("B = 2\n")  # untracked: not the commit's source
    assert script.uncommitted(tmp_path) == []  # the file it writes, and what is not source
    (tmp_path / "src" / "a.py").write_text("A = 2\n")
    assert script.uncommitted(tmp_path) == ["src/a.py"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "command_times.py"), "--examples"]
        + ["--checkout", str(tmp_path), "--python", sys.executable],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "uncommitted changes (src/a.py)" in done.stderr


def test_the_script_lists_the_examples_it_would_time():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "command_times.py"), "--dry-run"]
        + ["--examples", "--only", "^blocklab check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out and all(": blocklab check" in line for line in out), out
    keys = {ex.key for ex in FOUND if ex.key.startswith("blocklab check") and not ex.link}
    assert len(out) == len(keys)

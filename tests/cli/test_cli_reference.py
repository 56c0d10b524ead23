"""docs/reference/cli.md is what `python -m blocklab.cli.docs` writes from the parser: the committed
file matches it, every command has its section, the text is the same on every machine, and
`--check` fails on a copy that differs."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from blocklab.cli import build_parser, docs

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference" / "cli.md"
AGAIN = "run `python -m blocklab.cli.docs` to regenerate it"


def _paths(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """Every command's words, walked here on its own rather than through `docs.commands`."""
    yield words
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _paths(sub, (*words, name))


def test_the_committed_reference_is_current():
    assert docs.default_path() == REFERENCE
    assert REFERENCE.is_file(), f"docs/reference/cli.md is missing: {AGAIN}"
    assert REFERENCE.read_text(encoding="utf-8") == docs.render(), (
        f"docs/reference/cli.md differs from the parser: {AGAIN}"
    )


def test_every_command_has_a_section_and_an_entry_in_the_contents():
    text = docs.render()
    heads = {line[3:] for line in text.splitlines() if line.startswith("## ")}
    paths = list(_paths(build_parser()))
    assert len(paths) > 15 and ("sanford", "qsa") in paths and ("seprank", "measure") in paths
    for words in paths:
        name = " ".join(("blocklab", *words))
        assert name in heads, f"no section for `{name}`: {AGAIN}"
        assert f"[{name}](#{docs.anchor(words)})" in text, f"`{name}` is not in the contents"


def test_every_option_has_a_row():
    text = docs.render()
    for words in _paths(build_parser()):
        parser = build_parser()
        for word in words:
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            parser = sub.choices[word]
        section = text.split(f"\n## {' '.join(('blocklab', *words))}\n", 1)[1].split("\n## ")[0]
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in section, (words, flag)


def test_the_reference_depends_on_nothing_of_the_machine(monkeypatch):
    """`--workers` defaults to the core count or $BLOCKLAB_WORKERS: the reference states the
    rule, never a number."""
    monkeypatch.delenv("BLOCKLAB_WORKERS", raising=False)
    here = docs.render()
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setenv("COLUMNS", "37")
    assert build_parser().parse_args(["demo"]).workers == 8  # the patch reached the default
    assert docs.render() == here
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert docs.render() == here
    monkeypatch.setenv("BLOCKLAB_WORKERS", "5")
    assert build_parser().parse_args(["demo"]).workers == 5
    assert docs.render() == here
    rule = "one per CPU core, at most 8, or $BLOCKLAB_WORKERS where set"
    assert f"| `--workers` | `WORKERS` | `{rule}` | processes |" in here


def test_cells_escape_the_pipe_and_placeholders_expand():
    parser = argparse.ArgumentParser(prog="blocklab toy")
    parser.add_argument("--mode", default="a|b", help="one of a|b (%(default)s, 100%%)")
    parser.add_argument("--n", type=int, default=3, help="count (default: three)")
    rows = [docs._row(parser, a) for a in parser._actions[1:]]
    assert rows[0] == "| `--mode` | `MODE` | `a\\|b` | one of a\\|b (a\\|b, 100%) |"
    assert rows[1] == "| `--n` | `N` | `three` | count |"


def test_check_fails_on_a_changed_copy(tmp_path, capsys):
    copy = tmp_path / "cli.md"
    copy.write_text(docs.render(), encoding="utf-8")
    assert docs.main(["--check", str(copy)]) == 0
    copy.write_text(docs.render().replace("| `--workers` |", "| `--worker` |"), encoding="utf-8")
    assert docs.main(["--check", str(copy)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "python -m blocklab.cli.docs" in err, err
    assert docs.main(["--check", str(tmp_path / "missing.md")]) == 1
    assert "is missing" in capsys.readouterr().err
    assert docs.main([str(copy)]) == 0  # writing it again makes it current
    assert docs.main(["--check", str(copy)]) == 0


@pytest.mark.parametrize("changed", [False, True])
def test_check_as_a_command(tmp_path, changed):
    copy = tmp_path / "cli.md"
    copy.write_text(docs.render() + ("\nedited by hand\n" if changed else ""), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "blocklab.cli.docs", "--check", str(copy)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == int(changed), proc.stderr
    assert ("blocklab.cli.docs" in proc.stderr) == changed

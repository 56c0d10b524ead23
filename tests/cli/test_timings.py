"""The timings file (`blocklab/timings.json`, `blocklab.cli.timings`) is the one owner of the
times `--help` states: every entry names a command and form that exist and the config they
resolve to now, a measured time stands in the results log its entry cites (or was written by the
timing script), and `--help` states each entry's time and machine and no time where there is
none. Nothing here runs an experiment."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from blocklab.cli import examples, main, timings
from blocklab.experiments import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = timings.entries()


def _help(capsys, *words: str) -> str:
    with pytest.raises(SystemExit) as stop:
        main([*words, "--help"])
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_every_entry_names_a_command_and_the_config_it_runs_now():
    assert ENTRIES, "the package's timings file holds no entry"
    problems = timings.problems(ENTRIES)
    assert not problems, "\n".join(problems)


def _entry(words: str = "seprank degree") -> dict:
    """An entry for `words` at its defaults as the script writes one, timed with today's config."""
    return {
        "command": words,
        "form": "",
        "argv": ["blocklab", *words.split(), "--out", "RUN_DIR", "--quiet"],
        "seconds": 20.0,
        "config_fingerprint": timings.fingerprint_now(words),
        "machine": {"cpu": "AMD EPYC", "cores": 2, "flags": ["avx2"]},
        "commit": "abc1234",
        "date": "2026-01-02",
        "source": timings.SCRIPT,
    }


def test_a_changed_default_fails_and_names_the_script(monkeypatch):
    entry = _entry()
    assert timings.problems([entry]) == []
    experiment = EXPERIMENTS.get("seprank_degree")
    quick = experiment.Config()
    monkeypatch.setattr(
        experiment,
        "defaults",
        classmethod(lambda cls, words="", form=None: dataclasses.replace(quick, seeds=4)),
    )
    [problem] = timings.problems([entry])
    assert "'seprank degree'" in problem and timings.SCRIPT in problem


def test_entries_of_no_command_or_form_and_twins_are_named():
    entry = _entry()
    gone = {**entry, "command": "seprank nothing"}
    no_form = {**entry, "form": "enormous"}
    problems = timings.problems([gone, no_form, entry, entry, {"command": "x"}])
    assert any("'seprank nothing' is no experiment command" in p for p in problems)
    assert any("has no form 'enormous'" in p for p in problems)
    assert any("has two entries" in p for p in problems)
    assert any("lacks" in p for p in problems)
    example = {**entry, "example": "blocklab check", "config_fingerprint": None}
    del example["command"], example["form"]
    assert timings.problems([example]) == []
    [twice] = timings.problems([example, example])
    assert twice == "example 'blocklab check' has two entries"
    assert (
        "lacks seconds"
        in timings.problems([{k: v for k, v in example.items() if k != "seconds"}])[0]
    )


def test_a_time_measured_on_uncommitted_source_is_refused():
    """Its commit is not the code it timed: the script no longer writes such an entry, and the
    file holds none."""
    entry = _entry()
    assert timings.problems([{**entry, "uncommitted_source": False}]) == []
    [problem] = timings.problems([{**entry, "uncommitted_source": True}])
    assert "'seprank degree' was timed on uncommitted source" in problem
    assert timings.SCRIPT in problem
    example = {"example": "blocklab check", "uncommitted_source": True}
    assert "'blocklab check' was timed on uncommitted source" in timings.problems([example])[0]


def test_each_time_is_measured_where_its_entry_says():
    """A time the script wrote carries its command line; one kept from a results log stands in
    that log with its commit."""
    for e in ENTRIES:
        assert e["seconds"] > 0 and e["machine"]["cores"] >= 1, e
        if "example" in e:  # the example as written, or a Python block run as a script
            ran = e["argv"][1:]
            shell = e["argv"][:1] == ["blocklab"] and examples.key(ran) == e["example"]
            assert shell or e["argv"] == ["python", "example.py"], e
        else:
            assert e["argv"][:1] == ["blocklab"] and " ".join(e["argv"]).startswith(
                f"blocklab {e['command']}"
            ), e
        source = e["source"]
        if source == timings.SCRIPT:
            assert e["machine"]["cpu"] and e["machine"]["flags"], e  # lscpu's, as recorded
            assert "load_mean" in e["machine"] or "example" not in e, e  # the load while it ran
            continue
        log = ROOT / source.split(":", 1)[0]
        assert log.parent == ROOT / "docs" / "results" and log.exists(), source
        text = log.read_text()
        assert timings.wall(e["seconds"]) in text and e["commit"] in text, e["command"]


def test_help_states_each_entry_and_no_time_without_one(capsys):
    timed = {e["command"] for e in ENTRIES if "command" in e and not e["form"]}
    for name in EXPERIMENTS.names():
        for command in EXPERIMENTS.get(name).commands:
            text = _help(capsys, *command.words.split())
            entry = timings.find(command.words)
            if command.words in timed:
                assert f"took {timings.took(entry)}." in text, command.words
            else:
                assert "No time measured for" in text and " took " not in text, command.words


def test_the_sentence_names_the_machine():
    e = {"seconds": 73.4, "commit": "abc1234", "date": "2026-01-02"}
    e["machine"] = {"cpu": "AMD EPYC", "cores": 2, "flags": ["avx2", "avx512f"]}
    assert (
        timings.took(e)
        == "1 min 13 s on 2 cores of an AMD EPYC with AVX-512 (commit abc1234, 2026-01-02)"
    )
    e["machine"] = {"cpu": "", "cores": 2, "flags": []}
    assert timings.took(e).startswith("1 min 13 s on 2 CPU cores (")
    e["others_cpu_seconds"] = 73.4  # other work took half of the 2 cores while it ran
    assert timings.took(e).endswith(", other work taking 50% of the cores)")


def test_the_file_ships_in_the_package():
    assert timings.PATH.parent.name == "blocklab" and timings.PATH.exists()
    assert json.loads(timings.PATH.read_text())["entries"] == ENTRIES
    assert '"timings.json"' in (ROOT / "pyproject.toml").read_text()


def test_the_script_lists_what_it_would_time():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "command_times.py"), "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    commands = [c.words for n in EXPERIMENTS.names() for c in EXPERIMENTS.get(n).commands]
    assert out == [f"blocklab {w}" for w in commands]

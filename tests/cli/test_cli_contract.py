"""The command line's public contract, pinned: every subcommand keeps its flags, and every
result-printing command's `--json` keeps its keys (top level, and one level down where a value
is an object or a list of objects). Outside checks call these; `cli_contract.json` holds what the
commands gave when the contract was recorded. A command may gain flags and keys; none it had may
go or change its name."""

from __future__ import annotations

import argparse
import json
from html import escape
from pathlib import Path

import pytest

from _pages import Page, markdown_tables
from blocklab.cli import build_parser, main
from blocklab.store import Store

CONTRACT = json.loads((Path(__file__).resolve().parents[1] / "cli_contract.json").read_text())

# values whose keys are data (an arm's label, a learning rate), not names of the contract
DATA_KEYED = {"arms", "lr_choice", "metrics", "values", "config", "provenance", "scores"}

QUIET = ["--quiet", "--workers", "1"]
TRAIN = ["--steps", "10", "--batch-size", "32", "--eval-points", "2"]
SWEEP = ["--optimizer", "adam", "--task", "teacher", "--task-option", "n_train=256"]
SWEEP += ["--task-option", "n_val=64"]
SWEEP += ["--task-option", "n_test=128", "--budgets", "3072", "--width", "16", "--steps", "20"]
SWEEP += ["--seeds", "2", "--lr-grid", "3e-3", "1e-2", "--lr-extend", "0", *QUIET]

# the quick form of every result-printing command at a size a test can afford; `{out}` is a
# run directory shared by the commands of one test
COMMANDS = {
    "degree-sweep": ["degree-sweep", "--out", "{out}", *SWEEP],
    "demo": ["demo", "--out", "{out}", *SWEEP],  # the same trials, resumed from the store
    "runs": ["runs", "--out", "{out}"],
    "theory": ["theory", "--degrees", "2", "e", "3"],
    "advise": ["advise", "--params", "1.3B", "--depth", "10"],
    "bench": ["bench", "--widths", "8", "--members", "2", "--seconds", "0.02", "--repeats", "1"]
    + ["--lm-widths", "8", "--lm-batch-size", "2", "--threads", "1", "--fit-depths"]
    + ["--split-depths", "1", "--fit-width", "2"],
    "check": ["check", "--only", "mlp", "teacher", "seprank"],
    "sanford qsa": ["sanford", "qsa", "--qs", "1", "--dims", "2", "--seeds", "2", "--seq-len", "6"]
    + ["--n-train", "128", "--out", "{out}", *TRAIN, *QUIET],
    "sanford match": ["sanford", "match", "--tasks", "match2", "--widths", "6", "--seeds", "2"]
    + ["--n-train", "128", "--out", "{out}", *TRAIN, *QUIET],
    "needle": ["needle", "--seq-lens", "4", "--tau1s", "3", "--draws", "4", "--samples", "8"]
    + ["--trained-seq-lens", "8", "--seeds", "2", "--out", "{out}", *TRAIN, *QUIET],
    "seprank measure": ["seprank", "measure", "--depth", "1", "--templates", "16", "--exact"]
    + ["--eps", "0.001"],
    "seprank depth-width": ["seprank", "depth-width", "--widths", "2", "--depths", "1", "2"]
    + ["--templates", "16", "--seeds", "2", "--out", "{out}", "--quiet"],
    "seprank degree": ["seprank", "degree", "--degrees", "2", "e", "3", "--width", "2"]
    + ["--templates", "20", "--seeds", "2", "--out", "{out}", "--quiet"],
    "collapse": ["collapse", "--depth", "2", "--width", "8", "--seq-len", "8", "--n-train", "128"]
    + ["--seeds", "2", "--variants", "pure", "skip", "--out", "{out}", *TRAIN, *QUIET],
    "mad": ["mad", "--tasks", "icr", "mqar", "--blocks", "softmax_attention", "linear_attention"]
    + ["--levels", "2", "--seeds", "2", "--n-train", "128", "--budget", "3000", "--lr-grid"]
    + ["3e-3", "--out", "{out}", *TRAIN, *QUIET],
    "depth-width": ["depth-width", "--depths", "1", "2", "--budgets", "800", "3000", "--seeds"]
    + ["2", "--vocab", "300", "--seq-len", "8", "--n-train", "128", "--max-chars", "50000"]
    + ["--out", "{out}", "--steps", "4", "--batch-size", "16", "--eval-points", "2", *QUIET],
}


def key_sets(payload) -> dict[str, list[str]]:
    """{"": the top-level keys, KEY: the keys of that value (an object, or the union over a list
    of objects)}; a list at the top is read as its objects."""

    def keys(value) -> list[str] | None:
        if isinstance(value, dict):
            return sorted(value)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return sorted({k for v in value for k in v})
        return None

    top = keys(payload)
    objects = payload if isinstance(payload, list) else [payload]
    out = {"": top}
    for key in top or []:
        if key in DATA_KEYED:
            continue
        found = [keys(o[key]) for o in objects if key in o]
        found = [k for k in found if k is not None]
        if found:
            out[key] = sorted({k for ks in found for k in ks})
    return out


def run_json(capsys, argv: list[str]):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def flags(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """{'sanford qsa': ['--config', ...]}: the option strings of every (nested) subcommand."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(flags(sub, (*path, name)))
    if path:
        out[" ".join(path)] = sorted(s for a in parser._actions for s in a.option_strings)
    return out


def missing(recorded: dict[str, list[str]], now: dict[str, list[str]]) -> dict[str, list[str]]:
    """What `recorded` holds that `now` lacks, per command or key path."""
    gone = {k: sorted(set(v) - set(now.get(k) or [])) for k, v in recorded.items()}
    return {k: v for k, v in gone.items() if v or k not in now}


def test_every_subcommand_keeps_its_flags():
    assert missing(CONTRACT["flags"], flags(build_parser())) == {}


def test_missing_names_what_went():
    assert missing({"a": ["--x", "--y"], "b": []}, {"a": ["--x", "--z"]}) == {"a": ["--y"], "b": []}
    assert missing({"a": ["--x"]}, {"a": ["--x", "--new"]}) == {}


def argv_for(name: str, out: Path) -> list[str]:
    return [a.replace("{out}", str(out)) for a in COMMANDS[name]]


@pytest.mark.slow
@pytest.mark.usefixtures("small_matmul_ceiling")  # bench's (see conftest)
@pytest.mark.parametrize("name", [n for n in COMMANDS if n not in ("degree-sweep", "demo", "runs")])
def test_json_keys_are_unchanged(name, tmp_path, capsys):
    payload = run_json(capsys, argv_for(name, tmp_path))
    assert missing(CONTRACT["json"][name], key_sets(payload)) == {}
    if "{out}" in COMMANDS[name]:  # every experiment's run writes its page beside report.md
        assert payload["page"] == str(tmp_path / "index.html")
        status = payload["status"]  # one line, first in report.md and on the page
        assert isinstance(status["verdict"], bool) and status["line"].strip()
        assert (tmp_path / "report.md").read_text().splitlines()[2] == f"**{status['line']}**"
        html = (tmp_path / "index.html").read_text()
        assert html.index(escape(status["line"])) < html.index("<table")  # above the run's facts
        records = Store(tmp_path, read_only=True).records()
        curves = sum(len((r.get("curves") or {}).get("step") or []) > 1 for r in records)
        page = (tmp_path / "index.html").read_text()
        assert page.count('<svg class="curve"') == curves  # a trial's curves, where it has them
        assert page.count("<img ") == len(list(tmp_path.glob("*.png")))
        # report.md's tables, each whole on the page (the run's facts first, trials last)
        tables = markdown_tables((tmp_path / "report.md").read_text())
        assert Page(page).tables[1 : 1 + len(tables)] == tables


@pytest.mark.slow
def test_degree_sweep_demo_and_runs_json_keys_are_unchanged(tmp_path, capsys):
    for name in ("degree-sweep", "demo", "runs"):
        assert (
            missing(CONTRACT["json"][name], key_sets(run_json(capsys, argv_for(name, tmp_path))))
            == {}
        )
    trial = run_json(capsys, argv_for("runs", tmp_path))[0]["id"]
    shown = run_json(capsys, ["runs", "show", trial, "--out", str(tmp_path)])
    assert missing(CONTRACT["json"]["runs show"], key_sets(shown)) == {}

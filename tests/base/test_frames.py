"""`blocklab.load_runs`, `blocklab.load_rungs`, `blocklab.load_curves` and `blocklab runs`: a run
directory as DataFrames, files and lines, from records whose values are known and from a depth
ladder's run."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys

import pandas as pd
import pytest

import blocklab
from blocklab.cli import build_parser, main
from blocklab.errors import UserError
from blocklab.frames import export
from blocklab.store import Store


def record(trial_id, status="done", seed=0, lr=0.01, acc=0.25):
    return {
        "id": trial_id,
        "experiment": "mad",
        "status": status,
        "seed": seed,
        "config": {
            "task": "icr",
            "arm": {"label": "softmax_attention", "kwargs": {"causal": True}},
            "degrees": ["2", "e"],
            "train": {"steps": 50, "lr": lr},
        },
        "metrics": {
            "test_metric": acc,
            "test_loss": math.nan,
            "seconds": 3.5,
            "params": {"total": 100, "blocks": 60},
        },  # fmt: skip
        "curves": {
            "step": [0, 25, 50],
            "train_loss": [None, 1.0, 0.5],
            "val_loss": [2.0, math.inf, 0.2],
        },  # fmt: skip
        "provenance": {
            "torch": "2.13.0",
            "code": {"fingerprint": "abc", "modules": ["blocklab.blocks.softmax_attention"]},
        },
        "finished_at": 1000.0 + seed,
    }


@pytest.fixture
def run_dir(tmp_path):
    store = Store(tmp_path)
    store.put(record("t1", seed=1, acc=0.5))
    store.put(record("t2", seed=2, lr=0.003, acc=0.75))
    store.put(record("t3", seed=3, status="diverged", acc=None))
    store.close()
    return tmp_path


def test_load_runs_has_a_row_per_trial_and_a_column_per_field(run_dir):
    runs = blocklab.load_runs(run_dir)
    assert list(runs["id"]) == ["t1", "t2", "t3"]
    row = runs.set_index("id").loc["t2"]
    assert row["lr"] == 0.003 and row["config.train.lr"] == 0.003
    assert row["test_metric"] == 0.75 and row["metrics.params.total"] == 100
    assert row["total_params"] == 100 and row["block_params"] == 60  # the rows' names
    assert row["seconds"] == 3.5 and row["fingerprint"] == "abc"
    assert row["provenance.torch"] == "2.13.0" and row["arm"] == "softmax_attention"
    assert row["config.arm.kwargs.causal"] and json.loads(row["config.degrees"]) == ["2", "e"]
    assert pd.isna(row["metrics.test_loss"])  # NaN is stored as null
    assert not any(c.startswith("curves") for c in runs.columns)
    # a groupby over the flat columns gives what a report summarizes
    means = runs[runs.status == "done"].groupby("arm")["test_metric"].mean()
    assert means["softmax_attention"] == pytest.approx(0.625)


def test_load_curves_is_long(run_dir):
    curves = blocklab.load_curves(run_dir)
    assert list(curves.columns) == ["id", "step", "split", "metric", "value"]
    t1 = curves[curves.id == "t1"]
    assert len(t1) == 6 and set(t1.split) == {"train", "val"} and set(t1.metric) == {"loss"}
    val = t1[t1.split == "val"].sort_values("step")
    assert list(val.step) == [0, 25, 50] and val.value.iloc[0] == 2.0
    assert pd.isna(val.value.iloc[1])  # an infinite loss, stored as null


def test_export_by_extension(run_dir, tmp_path, capsys):
    out = tmp_path / "trials.csv"
    assert main(["runs", "export", str(out), "--out", str(run_dir), "--status", "done"]) == 0
    back = pd.read_csv(out)
    assert list(back["id"]) == ["t1", "t2"] and list(back["lr"]) == [0.01, 0.003]
    with pytest.raises(UserError, match=r"\.csv or \.parquet"):
        export(blocklab.load_runs(run_dir), tmp_path / "trials.xlsx")


def test_parquet_round_trips(run_dir, tmp_path):
    pytest.importorskip("pyarrow")  # the test extra installs it
    path = tmp_path / "trials.parquet"
    export(blocklab.load_runs(run_dir), path)
    assert list(pd.read_parquet(path)["id"]) == ["t1", "t2", "t3"]


def test_parquet_without_pyarrow_names_its_extra(run_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    with pytest.raises(UserError, match=r"blocklab\[parquet\]"):
        export(blocklab.load_runs(run_dir), tmp_path / "trials.parquet")
    assert not (tmp_path / "trials.parquet").exists()


def test_missing_store_is_one_line(tmp_path, capsys):
    with pytest.raises(UserError, match="no store"):
        blocklab.load_runs(tmp_path / "nothing")
    assert main(["runs", "export", str(tmp_path / "t.parquet"), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_an_empty_store_gives_an_empty_frame(tmp_path):
    Store(tmp_path).close()
    assert blocklab.load_runs(tmp_path).empty and blocklab.load_curves(tmp_path).empty


def test_dir_lists_the_lazy_loaders_without_loading_them():
    assert {"load_runs", "load_rungs", "load_curves", "__version__"} <= set(dir(blocklab))
    assert all(hasattr(blocklab, name) for name in dir(blocklab))
    code = "import blocklab, sys; dir(blocklab); print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_empty_store_gives_an_empty_rung_frame(tmp_path):
    Store(tmp_path).close()
    rungs = blocklab.load_rungs(tmp_path)
    assert rungs.empty and list(rungs.columns[:4]) == ["id", "rung", "depth", "exact_start"]


# --- a row per rung of a depth ladder --------------------------------------------------------


def test_a_trial_without_a_ladder_is_one_rung(run_dir):
    runs, rungs = blocklab.load_runs(run_dir), blocklab.load_rungs(run_dir)
    assert list(rungs.columns[:4]) == ["id", "rung", "depth", "exact_start"]
    assert list(rungs.id) == list(runs.id) and list(rungs.rung) == [0, 0, 0]
    assert rungs.exact_start.isna().all() and rungs.depth.isna().all()  # no depth in the config
    assert list(rungs.test_metric[:2]) == list(runs.test_metric[:2]) == [0.5, 0.75]


@pytest.mark.slow
def test_load_rungs_gives_each_rung_its_row_as_the_ladder_stored_it(ladder_run):
    out, payload = ladder_run.out, ladder_run.printed  # depths 1 and 2, two arms, three seeds
    records = Store(out, read_only=True).records()
    runs, rungs = blocklab.load_runs(out), blocklab.load_rungs(out)
    assert len(runs) == len(records) == 2 * 3  # a trial per (arm, seed), its ladder inside
    assert "metrics.ladder" in runs.columns and "metrics.ladder" not in rungs.columns
    assert len(rungs) == sum(len(r["metrics"]["ladder"]) for r in records) == 2 * 3 * 2
    for rec in records:
        mine = rungs[rungs.id == rec["id"]].sort_values("rung")
        stored = rec["metrics"]["ladder"]
        assert list(mine.rung) == [0, 1]
        assert list(mine.depth) == list(mine["config.depth"]) == [s["depth"] for s in stored]
        assert [s["depth"] for s in stored] == [1, 2]
        for key in ("test_loss", "train_loss"):
            assert list(mine[f"metrics.{key}"]) == [s["metrics"][key] for s in stored], key
        assert list(mine.status) == [s["status"] for s in stored]
        assert list(mine.exact_start) == [s["exact_start"] for s in stored]
        counts = [s["metrics"]["params"]["blocks"] for s in stored]
        assert list(mine.block_params) == counts and counts[0] < counts[1]
        # the top rung is the trial as load_runs has it
        top = runs.set_index("id").loc[rec["id"]]
        assert mine.iloc[-1]["test_metric"] == top["test_metric"]
        assert mine.iloc[-1]["block_params"] == top["block_params"]
    # the report reads the same rows per rung: each (arm, depth) cell's values are these
    assert {(c["arm"], c["depth"]) for c in payload["summaries"]} == set(
        zip(rungs.arm, rungs.depth, strict=True)
    )
    for cell in payload["summaries"]:
        at = rungs[(rungs.arm == cell["arm"]) & (rungs.depth == cell["depth"])]
        assert sorted(at.test_metric) == sorted(cell["values"]), cell["arm"]
        assert set(at.block_params) == {cell["block_params"]}


# --- blocklab runs: the list's columns, every option's help -----------------------------------


def test_runs_list_names_its_columns(run_dir, capsys):
    assert main(["runs", "list", "--out", str(run_dir)]) == 0
    captured = capsys.readouterr()
    header, rows = captured.err.splitlines()[0], captured.out.splitlines()
    assert header.split() == ["id", "experiment", "status", "fingerprint", "code", "trial"]
    assert [row.split()[0] for row in rows] == ["t1", "t2", "t3"]  # stdout: the rows alone
    for row, status in zip(rows, ["done", "done", "diverged"], strict=True):
        # each value starts under its column's name ("abc" is no code here now: stale)
        shown = {"experiment": "mad", "status": status, "fingerprint": "abc", "code": "stale"}
        for name, value in shown.items():
            assert row[header.index(name) :].split()[0] == value, (name, row)
        assert row[header.index("trial") :].startswith("icr softmax_attention ")


def missing_help(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> list[str]:
    """'WORDS: OPTION' for every argument of `parser`, and of each subcommand under it, whose
    help text is missing, blank or suppressed."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += missing_help(sub, (*words, name))
        elif not isinstance(action, argparse._HelpAction):
            text = action.help
            if not text or not text.strip() or text == argparse.SUPPRESS:
                name = "/".join(action.option_strings) or action.dest
                found.append(f"{' '.join(words)}: {name}")
    return found


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def test_every_runs_option_has_help():
    runs = subcommand(build_parser(), "runs")
    options = [a for a in runs._actions if not isinstance(a, argparse._HelpAction)]
    assert {"action", "id", "--out", "--experiment", "--status", "--json"} <= {
        a.option_strings[0] if a.option_strings else a.dest for a in options
    }
    assert missing_help(runs, ("runs",)) == []


def test_the_help_walk_reports_an_option_without_help():
    parser = argparse.ArgumentParser()
    parser.add_argument("--told", help="what it does")
    parser.add_argument("--bare")
    sub = parser.add_subparsers().add_parser("deep")
    sub.add_argument("where")
    sub.add_argument("--hidden", help=argparse.SUPPRESS)
    sub.add_argument("--blank", help=" ")
    missing = ["x: --bare", "x deep: where", "x deep: --hidden", "x deep: --blank"]
    assert missing_help(parser, ("x",)) == missing


def test_runs_list_tells_the_trials_of_one_cell_apart():
    """Two teachers (and a rounding) of one arm, budget and seed are two rows that differ."""
    from blocklab.cli.runs import _describe

    base = {"task": "teacher", "arm": {"label": "d=4"}, "budget": 288, "depth": 8, "width": 3}
    said = [
        _describe({"config": {**base, "data_seed": t, "rounding": r}, "metrics": {}, "seed": 0})
        for t, r in ((0, 0), (1, 0), (1, 2))
    ]
    assert said == [
        "teacher d=4 budget=288 depth=8 width=3 teacher=0 seed=0",
        "teacher d=4 budget=288 depth=8 width=3 teacher=1 seed=0",
        "teacher d=4 budget=288 depth=8 width=3 teacher=1 rounding=2 seed=0",
    ]

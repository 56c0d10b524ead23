"""`blocklab.load_runs`, `blocklab.load_curves` and `blocklab runs export`: a run directory as
DataFrames and files, from records whose values are known."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pandas as pd
import pytest

import blocklab
from blocklab.cli import main
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
        "provenance": {"torch": "2.13.0", "code": {"fingerprint": "abc", "modules": ["m"]}},
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
    assert {"load_runs", "load_curves", "__version__"} <= set(dir(blocklab))
    assert all(hasattr(blocklab, name) for name in dir(blocklab))
    code = "import blocklab, sys; dir(blocklab); print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

"""`--tracker tensorboard` and `--tracker mlflow`: what a run logs is read back (TensorBoard's
event files, the MLflow store) and compared with the run directory's store and files."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from _stops import TrialsStored, trials_only
from blocklab import trackers
from blocklab.cli import main
from blocklab.store import FINISHED, Store


@pytest.fixture(autouse=True, scope="module")
def _trackers_installed():
    """Both are in the test extra; imported as this file's tests start, not as every worker
    collects the suite (a second of importing each)."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")


SWEEP = ["degree-sweep", "--optimizer", "adam", "--task", "teacher", "--task-option", "n_train=256"]
SWEEP += ["--task-option", "n_val=64", "--task-option", "n_test=128", "--budgets", "3072"]
SWEEP += ["--width", "16", "--steps", "20", "--seeds", "2", "--lr-grid", "1e-2"]
SWEEP += ["--degrees", "2", "3", "--baselines", "--quiet", "--workers", "1"]
BOTH = ["--tracker", "tensorboard", "--tracker", "mlflow"]


def finished(run_dir):
    return {r["id"]: r for r in Store(run_dir, read_only=True).records() if r["status"] in FINISHED}


def expected_curves(record):
    return {
        k: [(s, v) for s, v in zip(record["curves"]["step"], vals, strict=True) if v is not None]
        for k, vals in record["curves"].items()
        if k != "step"
    }


def events(path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    found.Reload()
    return found


def hparams(found):
    from tensorboard.plugins.hparams import plugin_data_pb2

    data = plugin_data_pb2.HParamsPluginData()
    data.ParseFromString(found.summary_metadata["_hparams_/session_start_info"].plugin_data.content)
    return data.session_start_info.hparams


def mlflow_runs(run_dir):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / trackers.MLFLOW_DB}")
    experiment = client.get_experiment_by_name("degree_sweep")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    by_role = {"trial": [], "sweep": []}
    for r in runs:
        by_role[r.data.tags["blocklab.role"]].append(r)
    return client, by_role


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tracked") / "run"
    # the first half of the trials without a tracker: a later run with one logs them too (and
    # reports them all: the first run's report is not read)
    with trials_only(), pytest.raises(TrialsStored):
        main([*SWEEP, "--degrees", "2", "--out", str(out)])
    assert main([*SWEEP, *BOTH, "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_tensorboard_holds_each_trial_curves_config_and_metrics(run_dir):
    records = finished(run_dir)
    folders = {
        (p / trackers.TRIAL_ID_FILE).read_text().strip(): p
        for p in (run_dir / "tensorboard" / "trials").iterdir()
    }
    assert sorted(folders) == sorted(records)
    for trial_id, record in records.items():
        assert folders[trial_id].name == trackers.run_name(record)  # d=2 B=3072 lr=0.01 seed=0
        found = events(folders[trial_id])
        for key, points in expected_curves(record).items():
            split, _, metric = key.partition("_")
            got = [(e.step, e.value) for e in found.Scalars(f"{split}/{metric}")]
            assert [s for s, _ in got] == [s for s, _ in points]
            assert [v for _, v in got] == pytest.approx([v for _, v in points], rel=1e-6)
        [final] = found.Scalars("final/test_metric")
        assert final.value == pytest.approx(record["metrics"]["test_metric"], rel=1e-6)
        [config] = found.Tensors("config/text_summary")
        text = config.tensor_proto.string_val[0].decode()
        assert json.loads(text) == record["config"]
        assert "_hparams_/session_start_info" in found.summary_metadata
        assert hparams(found)["trial_id"].string_value == trial_id


@pytest.mark.slow
def test_tensorboard_holds_the_summary(run_dir):
    [summary] = list((run_dir / "tensorboard" / "summary").iterdir())
    found = events(summary)
    assert sorted(found.Tags()["images"]) == sorted(p.stem for p in run_dir.glob("*.png"))
    [report] = found.Tensors("report/text_summary")
    assert report.tensor_proto.string_val[0].decode() == (run_dir / "report.md").read_text()
    [table] = found.Tensors("mean over seeds/text_summary")
    assert "d=2" in table.tensor_proto.string_val[0].decode()


@pytest.mark.slow
def test_mlflow_holds_each_trial_once_nested_under_the_sweep(run_dir):
    records = finished(run_dir)
    client, runs = mlflow_runs(run_dir)
    [sweep] = runs["sweep"]
    assert sweep.data.tags["blocklab.command"].startswith("blocklab degree-sweep")
    assert sorted(r.data.tags["blocklab.trial_id"] for r in runs["trial"]) == sorted(records)
    for run in runs["trial"]:
        record = records[run.data.tags["blocklab.trial_id"]]
        assert run.data.tags["mlflow.parentRunId"] == sweep.info.run_id
        assert run.info.run_name == trackers.run_name(record)
        assert float(run.data.params["train.lr"]) == record["config"]["train"]["lr"]
        assert run.data.params["seed"] == str(record["seed"])
        metric = record["metrics"]["test_metric"]
        assert math.isclose(run.data.metrics["test_metric"], metric, rel_tol=1e-9)
        for key, points in expected_curves(record).items():
            history = client.get_metric_history(run.info.run_id, key)
            assert [m.step for m in history] == [s for s, _ in points]
            assert [m.value for m in history] == pytest.approx([v for _, v in points])


@pytest.mark.slow
def test_mlflow_holds_the_summary(run_dir, tmp_path):
    client, runs = mlflow_runs(run_dir)
    [sweep] = runs["sweep"]
    names = {a.path for a in client.list_artifacts(sweep.info.run_id)}
    figures = {p.name for p in run_dir.glob("*.png")}
    assert {"report.md", "index.html", "summary.json", "mean_over_seeds.md"} | figures <= names
    report = client.download_artifacts(sweep.info.run_id, "report.md", str(tmp_path))
    assert Path(report).read_text() == (run_dir / "report.md").read_text()
    assert json.loads(sweep.data.params["degrees"]) == ["2", "3"]


@pytest.mark.slow
def test_a_rerun_logs_no_trial_twice(run_dir):
    before = sorted(p.name for p in (run_dir / "tensorboard" / "trials").iterdir())
    assert main([*SWEEP, *BOTH, "--out", str(run_dir)]) == 0
    assert sorted(p.name for p in (run_dir / "tensorboard" / "trials").iterdir()) == before
    _, runs = mlflow_runs(run_dir)
    assert len(runs["trial"]) == len(before) and len(runs["sweep"]) == 2
    assert len(list((run_dir / "tensorboard" / "summary").iterdir())) == 2


@pytest.mark.parametrize("name", ["tensorboard", "mlflow"])
def test_a_missing_extra_is_one_line_and_nothing_runs(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, name, None)  # as if the extra were not installed
    assert main([*SWEEP, "--tracker", name, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"blocklab[{name}]" in err
    assert not (tmp_path / "run").exists()


def test_an_unknown_tracker_is_one_line(tmp_path, capsys):
    assert main([*SWEEP, "--tracker", "wandb", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_store_tells_its_listeners_of_each_stored_record(tmp_path):
    store = Store(tmp_path)
    heard = []
    store.listeners.append(heard.append)
    record = {"id": "t", "experiment": "x", "status": "done", "seed": 0, "config": {}}
    store.put(record)
    assert heard == [record] and store.records()[0]["id"] == "t"


def test_params_and_metrics_fit_what_trackers_accept():
    record = {"seed": 3, "config": {"train": {"lr": 0.01}, "degrees": [2, 3], "arm": {"x": None}}}
    record["metrics"] = {"test_metric": 0.5, "ok": True, "rank(eps=1e-3)": 4, "name": "d=3"}
    assert trackers.params(record) == {"train.lr": "0.01", "degrees": "[2, 3]", "arm.x": "None",
                                       "seed": "3"}  # fmt: skip
    assert trackers.params(record, text=False)["train.lr"] == 0.01
    assert trackers.final_metrics(record) == {"test_metric": 0.5, "rank_eps_1e-3_": 4.0}


def test_an_interrupted_command_keeps_the_trials_it_logged(tmp_path):
    record = {"id": "t1", "experiment": "x", "status": "done", "seed": 0, "finished_at": 1.0}
    record |= {"config": {"train": {"lr": 0.1}}, "metrics": {"test_metric": 0.5}}
    record["curves"] = {"step": [0, 5], "train_loss": [1.0, None]}
    tracker = trackers.open_tracker("mlflow", tmp_path, "degree_sweep", "blocklab x", {})
    tracker.trial(record)
    tracker.abort()
    client, runs = mlflow_runs(tmp_path)
    [sweep], [trial] = runs["sweep"], runs["trial"]
    assert sweep.info.status == "KILLED" and trial.data.tags["blocklab.trial_id"] == "t1"
    history = client.get_metric_history(trial.info.run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0)]  # the missing point left out


def test_the_summary_is_the_mean_over_seeds_per_configuration():
    def rec(i, lr, seed, value, status="done"):
        config = {"train": {"lr": lr}, "seed": seed}
        record = {"id": f"t{i}", "experiment": "x", "status": status, "seed": seed}
        return record | {"config": config, "metrics": {"test_metric": value}}

    records = [rec(0, 0.1, 0, 1.0), rec(1, 0.1, 1, 3.0), rec(2, 0.3, 0, 5.0)]
    records.append(rec(3, 0.3, 1, 99.0, status="failed"))  # a failed trial is no seed
    header, rows = trackers.seed_summary(records)
    assert header == ["train.lr", "mean", "std", "seeds"]
    assert rows == [["0.1", "2", f"{2**0.5:.4g}", "2"], ["0.3", "5", "-", "1"]]


def test_a_run_is_named_from_its_record():
    def rec(config, seed=1):
        return {"id": "4dd996ecad066430", "experiment": "degree-sweep", "seed": seed,
                "config": config}  # fmt: skip

    adam = {"arm": {"label": "d=3"}, "budget": 292, "train": {"lr": 0.03}, "data_seed": 0}
    assert trackers.run_name(rec(adam)) == "d=3 B=292 lr=0.03 seed=1"
    fit = {**adam, "train": {"optimizer": "lm", "lr": 0.003}, "data_seed": 2}
    assert trackers.run_name(rec(fit)) == "d=3 B=292 lm data=2 seed=1"
    point = {"block": "d=2", "depth": 3, "width": 4, "positions": 2}
    assert trackers.run_name(rec(point, seed=0)) == "d=2 L=3 w=4 seed=0"
    tasks = {"tasks": ["mqar", "icr"]}
    named = trackers.run_name(rec({**adam, "task": "icr"}), tasks)
    assert named == "icr d=3 B=292 lr=0.03 seed=1"
    assert trackers.run_name(rec({})) == "degree-sweep seed=1"


def test_two_trials_one_name_get_their_short_ids_and_keep_them(tmp_path):
    def rec(trial_id, task):
        config = {"task": task, "arm": {"label": "a/b"}, "budget": 8, "train": {"lr": 0.1}}
        return {"id": trial_id, "experiment": "x", "status": "done", "seed": 0,
                "finished_at": 1.0, "config": config, "metrics": {"test_metric": 0.5},
                "curves": {"step": [0], "train_loss": [1.0]}}  # fmt: skip

    first, second = rec("1111111111111111", "icr"), rec("2222222222222222", "mqar")
    for name in ("tensorboard", "mlflow"):
        tracker = trackers.open_tracker(name, tmp_path, "degree_sweep", "blocklab x", {})
        tracker.trial(first)
        tracker.trial(second)
        assert tracker.names == {
            "a_b B=8 lr=0.1 seed=0": first["id"],  # a name is a folder's name too
            "a_b B=8 lr=0.1 seed=0 (22222222)": second["id"],
        }
        tracker.abort()
        again = trackers.open_tracker(name, tmp_path, "degree_sweep", "blocklab x", {})
        assert again.logged == {first["id"], second["id"]}
        # a later command's names are the same: no name changes hands between commands
        assert set(again.names.values()) == again.logged
        third = rec("3333333333333333", "needle")
        assert again.unique_name(third) == "a_b B=8 lr=0.1 seed=0 (33333333)"
        again.abort()
    folders = sorted(p.name for p in (tmp_path / "tensorboard" / "trials").iterdir())
    assert folders == ["a_b B=8 lr=0.1 seed=0", "a_b B=8 lr=0.1 seed=0 (22222222)"]
    _, runs = mlflow_runs(tmp_path)
    assert sorted(r.info.run_name for r in runs["trial"]) == folders

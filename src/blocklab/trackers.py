"""Experiment trackers: a run's trials and summary, logged where a group already looks.

`--tracker tensorboard` writes TensorBoard event files under `RUN_DIR/tensorboard/` (the
`tensorboard` extra): one run per trial (`trials/<name>`, named by `run_name`: its curves as
scalars against the step, its config and id as hyperparameters, its config as text, its final
metrics), and one per command (`summary/<time>`:
report.md as text, the figures as images, the mean over seeds per configuration). `--tracker
mlflow` writes an MLflow store, `RUN_DIR/mlflow.db` (SQLite) with artifacts in
`RUN_DIR/mlartifacts/` (the `mlflow` extra): an MLflow experiment named after blocklab's, a
parent run per command (the config as parameters, the command as a tag, report.md, index.html,
the figures and the summary as artifacts) and a nested run per trial, named by `run_name` (config
as parameters, curves as metric histories, final metrics, the trial id as the tag
`blocklab.trial_id`).

Both work offline on local files. A trial is logged once it is stored (live, as the sweep
runs) and only once: a rerun logs the finished trials the tracker has not seen (those stored by
an earlier command without the tracker, say), then the summary. A failed trial is not logged; a
rerun retries it.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import logging
import math
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from blocklab import frames
from blocklab.errors import UserError
from blocklab.formatting import markdown_table, plain
from blocklab.rundir import RunDir
from blocklab.store import FINISHED

TRACKERS = {"tensorboard": "tensorboard", "mlflow": "mlflow"}  # name -> the extra it needs
MLFLOW_DB = "mlflow.db"
MLFLOW_ARTIFACTS = "mlartifacts"
TENSORBOARD_DIR = "tensorboard"
MAX_PARAM = 500  # characters of a parameter's value kept (MLflow allows more; a list is long)
TRIAL_ID_FILE = "blocklab.trial_id"  # beside a TensorBoard trial's events: whose they are


def require(name: str) -> None:
    """A one-line error naming the extra when tracker `name` cannot run here."""
    if name not in TRACKERS:
        raise UserError(f"unknown tracker {name!r} (choose from {', '.join(TRACKERS)})")
    if importlib.util.find_spec(TRACKERS[name]) is None:
        raise UserError(
            f"--tracker {name} needs the {name} extra: pip install 'blocklab[{TRACKERS[name]}]'"
        )


def open_tracker(name: str, run_dir: str | Path, experiment: str, command: str, config: dict):
    """The tracker `name` logging into `run_dir`; one line when its extra is missing."""
    require(name)
    cls = {"tensorboard": TensorBoard, "mlflow": MLflow}[name]
    return cls(Path(run_dir), experiment, command, config)


def params(record: dict[str, Any], *, text: bool = True) -> dict[str, Any]:
    """A trial's config (and seed) as flat parameters, "train.lr" -> "0.003"; with text=False
    numbers and booleans stay as they are (TensorBoard's hyperparameters sort them)."""
    row = frames.run_row(record)
    out = {k.removeprefix("config."): v for k, v in row.items() if k.startswith("config.")}
    out["seed"] = record["seed"]
    keep = (int, float, bool) if not text else ()
    return {k: v if isinstance(v, keep) else str(v)[:MAX_PARAM] for k, v in out.items()}


def run_name(record: dict[str, Any], config: dict[str, Any] | None = None) -> str:
    """A trial's name in a tracker's list of runs, read from its record: `d=3 B=292 lr=0.03
    seed=1` (arm, budget, learning rate or second-order optimizer, data seed when set, seed);
    a measured point shows its block's shape instead of a budget, and the task leads where the
    command's `config` covers several. Not unique by itself (`Tracker.unique_name`); a name is
    a TensorBoard folder too, so characters no file name may hold become "_"."""
    c = record.get("config") or {}
    arm, train = c.get("arm"), c.get("train")
    label = arm.get("label") if isinstance(arm, dict) else None
    train = train if isinstance(train, dict) else {}
    parts = []
    if len((config or {}).get("tasks") or ()) > 1 and c.get("task"):
        parts.append(str(c["task"]))
    parts.append(str(label or c.get("block") or record.get("experiment") or "trial"))
    if c.get("budget"):
        parts.append(f"B={c['budget']}")
    else:  # a measured point or a flattened baseline: no budget of layers to name
        parts += [f"{key}={c[field]}" for field, key in (("depth", "L"), ("width", "w"))
                  if c.get(field) is not None]  # fmt: skip
    lr = train.get("lr")
    if train.get("optimizer") not in (None, "adam"):  # a fit reads no rate
        parts.append(str(train["optimizer"]))
    elif lr is not None:
        parts.append(f"lr={lr:g}" if isinstance(lr, int | float) else f"lr={lr}")
    if c.get("data_seed"):
        parts.append(f"data={c['data_seed']}")
    parts.append(f"seed={record.get('seed')}")
    return re.sub(r'[<>:"/\\|?*\x00-\x1f]', "_", " ".join(parts))


def final_metrics(record: dict[str, Any]) -> dict[str, float]:
    """The numbers among a trial's metrics, under names a tracker accepts."""
    out = {}
    for k, v in (record.get("metrics") or {}).items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue
        out[re.sub(r"[^\w\-. /]", "_", k)] = float(v)
    return out


def curves(record: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """A trial's learning curves, "val_loss" -> [(step, value)], non-finite points left out."""
    return {
        key: [(int(s), float(v)) for s, v in points if v is not None and math.isfinite(v)]
        for key, points in frames.curve_points(record).items()
    }


def seed_summary(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(header, rows): mean, std and count of the test metric over seeds per configuration (the
    config fields that vary between the trials, seeds aside); no rows where no trial has one."""
    table = frames.frame([r for r in records if r["status"] in FINISHED])
    if "test_metric" not in table or table["test_metric"].isna().all():
        return [], []
    keys = frames.varying(records) or ["experiment"]
    stats = table.groupby(keys, dropna=False)["test_metric"].agg(["mean", "std", "count"])
    header = [k.removeprefix("config.") for k in keys] + ["mean", "std", "seeds"]
    rows = []
    for key, row in stats.iterrows():
        spread = "-" if row["count"] < 2 else f"{row['std']:.4g}"  # one seed has no spread
        values = key if isinstance(key, tuple) else (key,)
        rows.append([*map(str, values), f"{row['mean']:.4g}", spread, str(int(row["count"]))])
    return header, rows


class Tracker(ABC):
    """What every tracker does: log each finished trial once (`trial`, a store listener) and,
    when the command is done, the trials not yet logged and the summary (`finish`)."""

    def __init__(self, run_dir: Path, experiment: str, command: str, config: dict) -> None:
        self.run_dir, self.experiment, self.command = run_dir, experiment, command
        self.config = config
        self.started = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        before = self.logged_runs()
        self.logged: set[str] = set(before)
        self.names: dict[str, str] = {name: trial for trial, name in before.items()}

    @abstractmethod
    def logged_runs(self) -> dict[str, str]:
        """The trials this tracker logged before (in earlier commands): id -> run name."""

    def unique_name(self, record: dict[str, Any]) -> str:
        """The trial's `run_name`, or where another trial has that name already (they differ in
        what the name leaves out: a task's options, a shape) the name and the trial's short id."""
        name = run_name(record, self.config)
        if self.names.setdefault(name, record["id"]) != record["id"]:
            name = f"{name} ({record['id'][:8]})"
            self.names[name] = record["id"]
        return name

    @abstractmethod
    def log_trial(self, record: dict[str, Any]) -> None:
        """Log one finished trial: its config, curves and final metrics."""

    @abstractmethod
    def log_summary(self, records: list[dict[str, Any]], report: Path, summary: dict) -> None:
        """Log what the command concluded: the report (report.md) and its JSON summary, its
        figures, the means over seeds."""

    def trial(self, record: dict[str, Any]) -> None:
        if record["status"] in FINISHED and record["id"] not in self.logged:
            self.log_trial(record)
            self.logged.add(record["id"])

    def finish(self, records: list[dict[str, Any]], report: Path, summary: dict) -> None:
        """Log the finished trials not logged yet, then the summary: `report` is the report.md
        the report module wrote and `summary` its JSON (a command stopped before it calls
        `abort` instead)."""
        for record in records:
            self.trial(record)
        self.log_summary(records, report, summary)

    @abstractmethod
    def abort(self) -> None:
        """The command stopped before its report (interrupted, a worker lost): mark what is
        open as stopped; the trials logged so far stay."""

    def figures(self) -> list[Path]:
        return sorted(self.run_dir.glob("*.png"))


class TensorBoard(Tracker):
    def abort(self) -> None:
        pass  # each trial's event file is closed as it is written: nothing is left open

    def logged_runs(self) -> dict[str, str]:
        trials = self.run_dir / TENSORBOARD_DIR / "trials"
        runs = {}
        for folder in sorted(trials.glob("*")):
            if any(folder.glob("events.out.tfevents.*")):
                # a folder without an id file is named by the id itself
                owner = folder / TRIAL_ID_FILE
                runs[owner.read_text().strip() if owner.is_file() else folder.name] = folder.name
        return runs

    def folder(self, record: dict[str, Any]) -> Path:
        """The trial's own folder under trials/, named for TensorBoard's list of runs: a folder
        another trial holds (one another command beside this one logged) is left to it, and this
        trial's short id is added."""
        trials = self.run_dir / TENSORBOARD_DIR / "trials"
        name = self.unique_name(record)
        for candidate in (name, f"{name} ({record['id'][:8]})"):
            where = trials / candidate
            where.mkdir(parents=True, exist_ok=True)
            owner = where / TRIAL_ID_FILE
            if not owner.is_file():
                owner.write_text(record["id"] + "\n")
            if owner.read_text().strip() == record["id"]:
                return where
        return trials / record["id"]

    def log_trial(self, record: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        with SummaryWriter(log_dir=str(self.folder(record))) as w:
            found = curves(record)
            for key, points in found.items():
                split, _, metric = key.partition("_")
                for step, value in points:
                    w.add_scalar(f"{split}/{metric or split}", value, step)
            config = json.dumps(record["config"], indent=2, sort_keys=True)
            w.add_text("config", "    " + config.replace("\n", "\n    "))
            last = max((p[-1][0] for p in found.values() if p), default=0)
            metrics = {f"final/{k}": v for k, v in final_metrics(record).items()}
            hparams = {**params(record, text=False), "trial_id": record["id"]}
            w.add_hparams(hparams, metrics, run_name=".", global_step=last)

    def log_summary(self, records: list[dict[str, Any]], report: Path, summary: dict) -> None:
        import matplotlib.image
        from torch.utils.tensorboard import SummaryWriter

        where = self.run_dir / TENSORBOARD_DIR / "summary" / self.started
        with SummaryWriter(log_dir=str(where)) as w:
            w.add_text("command", f"`{self.command}`")
            w.add_text("report", report.read_text())
            header, rows = seed_summary(records)
            if rows:
                w.add_text("mean over seeds", "\n".join(markdown_table(header, rows)))
            for path in self.figures():
                w.add_image(path.stem, matplotlib.image.imread(path)[..., :3], dataformats="HWC")


class MLflow(Tracker):
    def __init__(self, run_dir: Path, experiment: str, command: str, config: dict) -> None:
        from mlflow.tracking import MlflowClient

        # MLflow's database set-up prints its migrations at INFO; a run's output stays its own
        for name in ("mlflow", "alembic"):
            logging.getLogger(name).setLevel(logging.WARNING)
        uri = f"sqlite:///{(run_dir / MLFLOW_DB).resolve()}"
        self.client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = (
            found.experiment_id
            if found
            else self.client.create_experiment(
                experiment, artifact_location=(run_dir / MLFLOW_ARTIFACTS).resolve().as_uri()
            )
        )
        super().__init__(run_dir, experiment, command, config)
        parent = self.client.create_run(
            self.experiment_id,
            run_name=f"{experiment} {self.started}",
            tags={"blocklab.command": self.command, "blocklab.role": "sweep"},
        )
        self.parent = parent.info.run_id

    def logged_runs(self) -> dict[str, str]:
        runs, token = {}, None
        while True:
            page = self.client.search_runs(
                [self.experiment_id],
                filter_string="tags.`blocklab.role` = 'trial'",
                max_results=1000,
                page_token=token,
            )
            runs |= {r.data.tags.get("blocklab.trial_id"): r.info.run_name for r in page}
            token = page.token
            if not token:
                runs.pop(None, None)
                return runs

    def log_trial(self, record: dict[str, Any]) -> None:
        from mlflow.entities import Metric, Param

        fingerprint = (record.get("provenance") or {}).get("code", {}).get("fingerprint")
        tags = {
            "blocklab.role": "trial",
            "blocklab.trial_id": record["id"],
            "blocklab.status": record["status"],
            "mlflow.parentRunId": self.parent,
        }
        if fingerprint:
            tags["blocklab.fingerprint"] = fingerprint
        name = self.unique_name(record)
        run = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
        stamp = int(record["finished_at"] * 1000)
        history = [
            Metric(key, value, stamp, step)
            for key, points in curves(record).items()
            for step, value in points
        ]
        last = max((m.step for m in history), default=0)
        history += [Metric(k, v, stamp, last) for k, v in final_metrics(record).items()]
        self._batch(run.info.run_id, history, [Param(k, v) for k, v in params(record).items()])
        self.client.set_terminated(run.info.run_id)

    def abort(self) -> None:
        self.client.set_terminated(self.parent, status="KILLED")

    def _batch(self, run_id: str, metrics: list, found: list) -> None:
        """Log metrics and parameters within MLflow's limits per batch (1000 and 100)."""
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[i : i + 1000])
        for i in range(0, len(found), 100):
            self.client.log_batch(run_id, params=found[i : i + 100])

    def log_summary(self, records: list[dict[str, Any]], report: Path, summary: dict) -> None:
        from mlflow.entities import Param

        flat: dict[str, Any] = {}
        frames.flatten("", self.config, flat)
        found = [Param(k.lstrip("."), str(v)[:MAX_PARAM]) for k, v in flat.items()]
        self._batch(self.parent, [], found)
        self.client.log_dict(self.parent, plain(summary), "summary.json")
        for path in [report, RunDir(self.run_dir).page, *self.figures()]:
            if path.is_file():
                self.client.log_artifact(self.parent, str(path))
        header, rows = seed_summary(records)
        if rows:
            table = "\n".join(markdown_table(header, rows))
            self.client.log_text(self.parent, table + "\n", "mean_over_seeds.md")
        self.client.set_terminated(self.parent)

"""A run directory's trials as pandas DataFrames, for every experiment alike.

`load_runs(path)`: one row per stored trial (trained trials and measured points), every config,
metrics and provenance field its own column under a dotted name ("config.train.lr",
"metrics.test_metric", "provenance.torch"), lists as JSON text, and in front the columns most
analyses start from: id, experiment, status, seed, task, arm, lr, test_metric, block_params (the
budgeted layers), total_params (every parameter), seconds (the trial's wall time, its share of an
ensemble's), fingerprint (the code that made it).
`load_rungs(path)`: one row per fitted depth: a depth ladder's trial (`metrics.ladder`) gives a
row per rung, the rung's own status, metrics and counts under the same columns, with `rung`,
`depth` and `exact_start` in front; any other trial is its own single rung.
`load_curves(path)`: the learning curves in long form, one row per (trial, step, split, metric).
pandas is imported here only, so the command line starts without it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blocklab.errors import UserError
from blocklab.store import Store, locate

# the columns `load_runs` puts first, read from the nested record (missing ones are None)
FRONT = {
    "task": ("config", "task"),
    "arm": ("config", "arm", "label"),
    "lr": ("config", "train", "lr"),
    "test_metric": ("metrics", "test_metric"),
    # a trained trial's counts, stored as `Net.param_counts()`, under the names the rows use
    "block_params": ("metrics", "params", "blocks"),
    "total_params": ("metrics", "params", "total"),
    "seconds": ("metrics", "seconds"),
    "fingerprint": ("provenance", "code", "fingerprint"),
}
FORMATS = {".csv": "csv", ".parquet": "parquet"}


def _store(path: str | Path) -> Store:
    db = locate(path)
    if not db.exists():
        raise UserError(f"no store at {path} (run an experiment with --out {path} first)")
    return Store(db, read_only=True)


def _dig(record: dict[str, Any], keys: tuple[str, ...]) -> Any:
    value: Any = record
    for k in keys:
        value = value.get(k) if isinstance(value, dict) else None
    return value


def column(record: dict[str, Any], name: str) -> Any:
    """A `FRONT` column of one stored record (None where it lacks it): the one place a stored
    name, like the count `params.blocks`, becomes the name rows and tables use."""
    return _dig(record, FRONT[name])


def flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}.{k}", v, out)
    elif isinstance(value, list):
        out[prefix] = json.dumps(value)
    else:
        out[prefix] = value


def varying(records: list[dict[str, Any]]) -> list[str]:
    """The flattened config columns ("config.train.lr") whose values differ between the records,
    seeds aside: what tells their configurations apart."""
    rows = [run_row(r) for r in records]
    cols = [c for c in rows[0] if c.startswith("config.")] if rows else []
    skip = {"config.seed", "config.data_seed"}
    return [c for c in cols if c not in skip and len({json.dumps(r.get(c)) for r in rows}) > 1]


def run_row(record: dict[str, Any]) -> dict[str, Any]:
    """One stored record as a flat row (the curves are `load_curves`')."""
    row = {k: record.get(k) for k in ("id", "experiment", "status", "seed")}
    row |= {name: _dig(record, keys) for name, keys in FRONT.items()}
    row |= {k: record.get(k) for k in ("error", "finished_at")}
    for part in ("config", "metrics", "provenance"):
        flatten(part, record.get(part) or {}, row)
    return row


def frame(records: list[dict[str, Any]]):
    """Stored records as a DataFrame, one row each (`run_row`); no records: the columns alone."""
    import pandas as pd

    if not records:
        return pd.DataFrame(columns=[*run_row({})])
    return pd.DataFrame([run_row(r) for r in records])


def load_runs(path: str | Path, experiment: str | None = None):
    """The trials of a run directory (or store file), one row each: a pandas DataFrame."""
    with _store(path) as store:  # closed at once: the last reader out removes the WAL files
        return frame(store.records(experiment=experiment))


def curve_points(record: dict[str, Any]) -> dict[str, list[tuple[Any, Any]]]:
    """A record's stored curves ({"step": [...], "train_loss": [...], ...}) as
    {"train_loss": [(step, value), ...]}; a non-finite value, stored as null, stays None, and a
    curve whose length is not the steps' is left out."""
    stored = record.get("curves") or {}
    steps = stored.get("step") or []
    return {
        key: list(zip(steps, values, strict=True))
        for key, values in stored.items()
        if key != "step" and isinstance(values, list) and len(values) == len(steps)
    }


def curve_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A record's curves as rows (trial id, step, split, metric, value): "val_loss" is split val,
    metric loss."""
    out = []
    for key, points in curve_points(record).items():
        split, _, metric = key.partition("_")
        out += [
            {"id": record["id"], "step": s, "split": split, "metric": metric or split, "value": v}
            for s, v in points
        ]
    return out


def rung_records(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored trial as one record per depth it was fitted at. A depth ladder's trial
    (`fitting.ladder.fit_ladder`) stores each rung's record under `metrics["ladder"]`, in the
    order the chains climbed, the top one also as the trial's own: each rung becomes the trial's
    record (its id, experiment, seed, provenance) with the rung's status, metrics and curves, its
    config at the rung's depth, and `rung` (0 at the bottom), `depth` and `exact_start` (whether
    every chain entered the rung with its function unchanged). A trial without a ladder is one
    rung at its own depth, `exact_start` None."""
    ladder = (record.get("metrics") or {}).get("ladder")
    if not ladder:
        depth = _dig(record, ("config", "depth"))
        return [{**record, "rung": 0, "depth": depth, "exact_start": None}]
    out = []
    for n, step in enumerate(ladder):
        config = {**(record.get("config") or {}), "depth": step["depth"]}
        # a rung's curves are its own: none rather than the top rung's where it stored none
        out.append({**record, "curves": {}, **step, "config": config, "rung": n})
    return out


def rung_frame(records: list[dict[str, Any]]):
    """Stored records as a DataFrame, one row per rung (`rung_records`): `run_row`'s columns
    with `rung`, `depth` and `exact_start` after the trial's id."""
    import pandas as pd

    rows = []
    for record in records:
        for rung in rung_records(record):
            row = run_row(rung)
            front = {"id": row.pop("id")}
            front |= {k: rung.get(k) for k in ("rung", "depth", "exact_start")}
            rows.append(front | row)
    if not rows:
        rest = [c for c in run_row({}) if c != "id"]
        return pd.DataFrame(columns=["id", "rung", "depth", "exact_start", *rest])
    return pd.DataFrame(rows)


def load_rungs(path: str | Path, experiment: str | None = None):
    """The trials of a run directory (or store file), one row per fitted depth: a depth ladder's
    trial a row per rung (`rung_records`), any other trial one row; a pandas DataFrame with
    `load_runs`' columns, read from the rung (`status`, `test_metric`, `block_params`,
    `metrics.*`, `config.depth`), and `rung`, `depth`, `exact_start` after the id. The config
    is otherwise the trial's: `config.budget` is the top rung's planned budget, and
    `block_params` the rung's own count. `metrics.ladder`, every rung as JSON text in
    `load_runs`, is left out."""
    with _store(path) as store:
        return rung_frame(store.records(experiment=experiment))


def load_curves(path: str | Path, experiment: str | None = None):
    """The learning curves of a run directory's trials in long form: a pandas DataFrame with
    columns id, step, split (train, val), metric (loss, metric) and value."""
    import pandas as pd

    with _store(path) as store:
        rows = [row for r in store.records(experiment=experiment) for row in curve_rows(r)]
    return pd.DataFrame(rows, columns=["id", "step", "split", "metric", "value"])


def export(frame, path: str | Path) -> None:
    """Write a DataFrame as CSV or Parquet, by the file's extension; Parquet needs pyarrow (the
    `parquet` extra), named in one line when it is missing."""
    kind = FORMATS.get(Path(path).suffix.lower())
    if kind is None:
        raise UserError(f"{path}: export writes .csv or .parquet files")
    if kind == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UserError(
                "writing .parquet needs pyarrow: pip install 'blocklab[parquet]'"
            ) from None
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)

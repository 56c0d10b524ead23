"""The trial store: one SQLite file (standard library, WAL), one row per trial.

A trial's id is the hash of its resolved config and seed, so a rerun finds what is finished and
skips it. Each trial is committed on its own as it finishes: an interrupted sweep loses nothing
finished.
"""

from __future__ import annotations

import csv
import json
import math
import sqlite3
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from blocklab.errors import UserError

FINISHED = ("done", "diverged")  # a failed trial (an exception) is retried on the next run
DB_NAME = "blocklab.sqlite"
# which finished trials a rerun reuses: those made by the code here now (current), any (stale),
# or none (a fresh run, replacing what is stored)
REUSE = ("current", "stale", "none")

SCHEMA = """
CREATE TABLE IF NOT EXISTS trials (
    id TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    status TEXT NOT NULL,
    seed INTEGER NOT NULL,
    config TEXT NOT NULL,
    metrics TEXT NOT NULL,
    curves TEXT NOT NULL,
    provenance TEXT NOT NULL,
    error TEXT,
    finished_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS trials_experiment ON trials (experiment);
"""
_FINISHED_SQL = ", ".join(f"'{status}'" for status in FINISHED)
# a failed trial never replaces a finished one: two processes may run the same trial, and whichever
# order they finish in, the finished result wins
PUT = f"""
INSERT INTO trials VALUES (?,?,?,?,?,?,?,?,?,?)
ON CONFLICT (id) DO UPDATE SET
    experiment = excluded.experiment, status = excluded.status, seed = excluded.seed,
    config = excluded.config, metrics = excluded.metrics, curves = excluded.curves,
    provenance = excluded.provenance, error = excluded.error, finished_at = excluded.finished_at
WHERE excluded.status IN ({_FINISHED_SQL}) OR trials.status NOT IN ({_FINISHED_SQL})
"""


def _json(obj: Any) -> str:
    # NaN is not JSON; a missing number is None
    def clean(o: Any) -> Any:
        if isinstance(o, float) and not math.isfinite(o):
            return None
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    return json.dumps(clean(obj), sort_keys=True)


BUSY_SECONDS = 60  # how long a writer waits for another process's lock


def _switch_to_wal(conn: sqlite3.Connection) -> None:
    """WAL mode, retried while another process holds the lock: SQLite does not apply the busy
    timeout to the switch when several processes open a new store at once."""
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class Store:
    def __init__(self, path: str | Path, reuse: str = "current"):
        if reuse not in REUSE:
            raise ValueError(f"reuse must be one of {REUSE}, got {reuse!r}")
        self.reuse = reuse
        # what this store's run has told the user once (stale trials, frozen parameters)
        self.told: set[str] = set()
        path = Path(path)
        if path.is_dir() or not path.suffix:
            path = path / DB_NAME
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None)
            # other processes may hold the write lock: wait for it rather than fail
            self.conn.execute(f"PRAGMA busy_timeout={BUSY_SECONDS * 1000}")
            _switch_to_wal(self.conn)
            # with WAL, a killed process loses no commit; a power cut may lose the last few
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise UserError(f"cannot open the store at {path}: {exc}") from None
        self.path = path

    def close(self) -> None:
        self.conn.close()

    def finished(self, ids: Iterable[str]) -> set[str]:
        return {r["id"] for r in self._select_ids(list(ids)) if r["status"] in FINISHED}

    def reusable(self, fingerprints: dict[str, str | None]) -> tuple[set[str], set[str]]:
        """For trial id -> the fingerprint of the code that would make it now: the ids whose
        finished trial this store's `reuse` lets a rerun keep, and the finished ones made by other
        code (a trial stored without a fingerprint counts as other code)."""
        ids = list(fingerprints)
        stored = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            stored.update(
                self.conn.execute(
                    "SELECT id, json_extract(provenance, '$.code.fingerprint') FROM trials "
                    f"WHERE status IN ({_FINISHED_SQL}) AND id IN ({','.join('?' * len(chunk))})",
                    tuple(chunk),
                ).fetchall()
            )
        stale = {i for i, fp in stored.items() if fp is None or fp != fingerprints[i]}
        if self.reuse == "none":
            return set(), stale
        if self.reuse == "stale":
            return set(stored), stale
        return set(stored) - stale, stale

    def say_stale(self, ids: set[str]) -> None:
        """One line on stderr when a rerun meets finished trials made by other code, each trial
        told once however many batches of an experiment meet it."""
        new = ids - self.told
        self.told |= new
        count = len(new)
        if not count:
            return
        what = f"{count} stored trial{'s were' if count > 1 else ' was'} made by other code"
        how = {
            "current": "rerunning (--reuse-stale keeps them)",
            "stale": "reusing (--reuse-stale)",
            "none": "rerunning (--fresh)",
        }[self.reuse]
        print(f"blocklab: {what}: {how}", file=sys.stderr, flush=True)

    def put(self, record: dict[str, Any]) -> None:
        self.conn.execute(
            PUT,
            (
                record["id"],
                record["experiment"],
                record["status"],
                record["seed"],
                _json(record["config"]),
                _json(record.get("metrics", {})),
                _json(record.get("curves", {})),
                _json(record.get("provenance", {})),
                record.get("error"),
                record.get("finished_at", time.time()),
            ),
        )

    def get(self, trial_id: str) -> dict[str, Any] | None:
        rows = self._select("WHERE id = ?", (trial_id,))
        if not rows:  # a unique prefix, compared literally (LIKE would treat _ and % as wildcards)
            rows = self._select("WHERE substr(id, 1, ?) = ?", (len(trial_id), trial_id))
        if len(rows) > 1:
            raise UserError(f"trial id prefix {trial_id!r} is ambiguous ({len(rows)} trials)")
        return rows[0] if rows else None

    def records(self, ids: Iterable[str] | None = None, experiment: str | None = None):
        if ids is not None:
            wanted = list(ids)
            found = {r["id"]: r for r in self._select_ids(wanted)}
            return [found[i] for i in wanted if i in found]
        if experiment:
            return self._select("WHERE experiment = ? ORDER BY finished_at", (experiment,))
        return self._select("ORDER BY finished_at", ())

    def _select_ids(self, ids: list[str]) -> list[dict[str, Any]]:
        out = []
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            out += self._select(f"WHERE id IN ({','.join('?' * len(chunk))})", tuple(chunk))
        return out

    def _select(self, where: str, params: tuple) -> list[dict[str, Any]]:
        cur = self.conn.execute(
            "SELECT id, experiment, status, seed, config, metrics, curves, provenance, error, "
            f"finished_at FROM trials {where}",
            params,
        )
        out = []
        for row in cur:
            rec = dict(zip(("id", "experiment", "status", "seed"), row[:4], strict=True))
            for key, text in zip(
                ("config", "metrics", "curves", "provenance"), row[4:8], strict=True
            ):
                rec[key] = json.loads(text)
            rec["error"], rec["finished_at"] = row[8], row[9]
            out.append(rec)
        return out

    def export_csv(self, path: str | Path, records: list[dict[str, Any]]) -> int:
        """One line per trial: scalar columns, with config and metrics flattened to dotted keys."""
        flat = [flatten(r) for r in records]
        keys: list[str] = []
        for f in flat:
            keys += [k for k in f if k not in keys]
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=keys)
            writer.writeheader()
            writer.writerows(flat)
        return len(flat)


def flatten(record: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        elif isinstance(value, list):
            out[prefix] = json.dumps(value)
        else:
            out[prefix] = value

    for key in ("id", "experiment", "status", "seed", "error", "finished_at"):
        out[key] = record.get(key)
    walk("config", record["config"])
    walk("metrics", record["metrics"])
    return out

"""The trials table: one row per trial, and `Store`, the trials of one run directory.

A trial's id is the hash of its resolved config and seed, so a rerun finds what is finished and
skips it. Each trial is committed on its own as it finishes: an interrupted sweep loses nothing
finished. The file itself (where it is, how it opens, what went wrong with it) is
`store.database`'s; the tables beside this one, `store.leases` and `store.fit_states`.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import sys
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from blocklab.errors import Kept, StoreError, UserError
from blocklab.store.database import DB_NAME, explain, locate, open_read_only, open_writable

FINISHED = ("done", "diverged")  # a failed trial (an exception) is retried on the next run
# which finished trials a rerun reuses: those made by the code here now (current), any (stale),
# or none (a fresh run, replacing what was stored before the store was opened)
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
FINISHED_SQL = ", ".join(f"'{status}'" for status in FINISHED)
# a failed trial never replaces a finished one: two processes may run the same trial, and whichever
# order they finish in, the finished result wins
PUT = f"""
INSERT INTO trials VALUES (?,?,?,?,?,?,?,?,?,?)
ON CONFLICT (id) DO UPDATE SET
    experiment = excluded.experiment, status = excluded.status, seed = excluded.seed,
    config = excluded.config, metrics = excluded.metrics, curves = excluded.curves,
    provenance = excluded.provenance, error = excluded.error, finished_at = excluded.finished_at
WHERE excluded.status IN ({FINISHED_SQL}) OR trials.status NOT IN ({FINISHED_SQL})
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


class Store:
    """The trials of one run directory: `Store(DIR)` keeps them in DIR/blocklab.sqlite, created
    on first use; a path naming a database file (see `locate`) is used as it is. `read_only=True`
    opens an existing store to read without changing it, in a read-only directory too."""

    def __init__(self, path: str | Path, reuse: str = "current", *, read_only: bool = False):
        if reuse not in REUSE:
            raise ValueError(f"reuse must be one of {REUSE}, got {reuse!r}")
        self.reuse = reuse
        # what this store's run has told the user once (stale trials, frozen parameters)
        self.told: set[str] = set()
        # called with each record once it is stored: a tracker logs trials as they finish
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        # called with the ids of the trials a sweep will have, finished or not, before it runs
        # any (`expect`): the run directory counts an interrupted run's trials against them
        self.on_expect: list[Callable[[list[str]], None]] = []
        self.path = locate(path)
        self.read_only = read_only
        # a fresh run (reuse "none") replaces what was stored before it opened the store, and
        # keeps what it (or a sweep beside it) finished since: one command runs several sweeps
        # that share trials, and each trial trains once
        self.opened = time.time()
        self.put_ids: set[str] = set()  # the trials this store put since it was opened
        self.conn = (
            open_read_only(self.path, "trials") if read_only else open_writable(self.path, SCHEMA)
        )
        # closed when the store is dropped, not when the cyclic collector reaches the connection
        # (it holds a cycle of its own): the last connection out removes the -wal and -shm files
        self._close = weakref.finalize(self, self.conn.close)

    def close(self) -> None:
        self._close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def errors(self):
        """SQLite's errors inside the block as a one-line `StoreError` naming this file."""
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(explain(exc, self.path)) from None

    def finished(self, ids: Iterable[str]) -> set[str]:
        return {r["id"] for r in self._select_ids(list(ids)) if r["status"] in FINISHED}

    def expect(self, ids: Iterable[str]) -> None:
        """A sweep will have these trials, stored or run (`on_expect` hears of them)."""
        ids = list(ids)
        for listener in self.on_expect:
            listener(ids)

    def reusable(
        self, fingerprints: dict[str, str | None], modules: dict[str, list[str]] | None = None
    ) -> tuple[set[str], set[str]]:
        """For trial id -> the fingerprint of the code that would make it now: the ids whose
        finished trial this store's `reuse` lets a rerun keep, and the finished ones made by other
        code (a trial stored without a fingerprint counts as other code). Under "none" only the
        trials finished after this store was opened are kept, those made by this code. With
        `modules` (trial id -> the modules that fingerprint hashes), a trial recorded under the
        names its unchanged modules have since moved from is this code
        (`fingerprint.moved_only`)."""
        ids = list(fingerprints)
        stored, since = {}, set()
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            with self.errors():
                rows = self.conn.execute(
                    "SELECT id, json_extract(provenance, '$.code.fingerprint'), finished_at "
                    f"FROM trials WHERE status IN ({FINISHED_SQL}) AND id IN "
                    f"({','.join('?' * len(chunk))})",
                    tuple(chunk),
                ).fetchall()
            stored.update((trial, fp) for trial, fp, _ in rows)
            # strictly after: a trial stamped in the very tick the store opened may be older,
            # and training it again costs time where reusing it would break --fresh
            since.update(trial for trial, _, at in rows if at > self.opened)
        stale = {i for i, fp in stored.items() if fp is None or fp != fingerprints[i]}
        stale -= self._moved(stale, modules or {})
        if self.reuse == "none":
            return since - stale, stale
        if self.reuse == "stale":
            return set(stored), stale
        return set(stored) - stale, stale

    def _moved(self, ids: set[str], modules: dict[str, list[str]]) -> set[str]:
        """Of `ids` (finished, other fingerprints), those whose code only moved."""
        from blocklab.fingerprint import moved_only

        ids = [i for i in ids if i in modules]
        moved: set[str] = set()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            with self.errors():
                rows = self.conn.execute(
                    "SELECT id, json_extract(provenance, '$.code') FROM trials WHERE id IN "
                    f"({','.join('?' * len(chunk))})",
                    tuple(chunk),
                ).fetchall()
            moved |= {i for i, code in rows if code and moved_only(json.loads(code), modules[i])}
        return moved

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
        row = (
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
        )
        with self.errors():
            self.conn.execute(PUT, row)
        self.put_ids.add(record["id"])
        for listener in self.listeners:
            listener(record)

    def kept(self) -> Kept:
        """What a stop leaves here, read from the store: the finished trials it holds, and
        those of them this store put (a put whose transaction a stop rolled back is not
        there). A store it cannot read counts what this store put."""
        where = self.path.parent if self.path.name == DB_NAME else self.path
        mine = list(self.put_ids)
        try:
            stored = self.conn.execute(
                f"SELECT count(*) FROM trials WHERE status IN ({FINISHED_SQL})"
            ).fetchone()[0]
            ids: set[str] = set()
            for i in range(0, len(mine), 500):
                chunk = mine[i : i + 500]
                ids.update(
                    row[0]
                    for row in self.conn.execute(
                        f"SELECT id FROM trials WHERE status IN ({FINISHED_SQL}) AND id IN "
                        f"({','.join('?' * len(chunk))})",
                        tuple(chunk),
                    )
                )
        except sqlite3.Error:
            return Kept(len(mine), len(mine), str(where))
        return Kept(stored, len(ids), str(where))

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
        with self.errors():
            rows = self.conn.execute(
                "SELECT id, experiment, status, seed, config, metrics, curves, provenance, error, "
                f"finished_at FROM trials {where}",
                params,
            ).fetchall()
        out = []
        for row in rows:
            rec = dict(zip(("id", "experiment", "status", "seed"), row[:4], strict=True))
            for key, text in zip(
                ("config", "metrics", "curves", "provenance"), row[4:8], strict=True
            ):
                try:
                    rec[key] = json.loads(text)
                except (TypeError, ValueError):
                    raise StoreError(
                        f"the store {self.path} holds trial {rec['id']} whose {key} is not JSON "
                        "(the file was changed outside blocklab): delete that row with "
                        f"sqlite3 {self.path} \"DELETE FROM trials WHERE id = '{rec['id']}'\" "
                        "(a rerun makes it again) or move the store aside"
                    ) from None
            rec["error"], rec["finished_at"] = row[8], row[9]
            out.append(rec)
        return out

"""The trial store: one SQLite file (standard library, WAL), one row per trial.

A trial's id is the hash of its resolved config and seed, so a rerun finds what is finished and
skips it. Each trial is committed on its own as it finishes: an interrupted sweep loses nothing
finished. A store opened for writing is checked first (`PRAGMA quick_check`), so a damaged file
is refused before anything is written to it; one opened to read stores nothing and leaves no
files behind (`_read_modes`). Whatever goes wrong with the file (damaged, locked, full,
read-only) is a `StoreError`: one line naming the file and what to do.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import sys
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from blocklab.errors import StoreError, UserError

FINISHED = ("done", "diverged")  # a failed trial (an exception) is retried on the next run
DB_NAME = "blocklab.sqlite"
# which finished trials a rerun reuses: those made by the code here now (current), any (stale),
# or none (a fresh run, replacing what was stored before the store was opened)
REUSE = ("current", "stale", "none")
DB_SUFFIXES = (".sqlite", ".sqlite3", ".db")  # a path named so is the database file itself
SQLITE_HEADER = b"SQLite format 3\x00"

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


def _open(path: Path) -> sqlite3.Connection:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None)
    except OSError as exc:
        raise StoreError(f"cannot open the store at {path}: {exc.strerror}") from None
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store at {path}: {exc}") from None
    try:
        # other processes may hold the write lock: wait for it rather than fail
        conn.execute(f"PRAGMA busy_timeout={BUSY_SECONDS * 1000}")
        # before anything writes: a damaged file is refused as it is, for recovery
        problems = [line for (text,) in conn.execute("PRAGMA quick_check") for line in
                    text.splitlines() if line.strip() and not line.startswith("***")]  # fmt: skip
        if problems != ["ok"]:
            more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
            raise StoreError(damaged(path, f"quick_check: {problems[0]}{more}"))
        _switch_to_wal(conn)
        # with WAL, a killed process loses no commit; a power cut may lose the last few
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(SCHEMA)
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(explain(exc, path)) from None
    except StoreError:
        conn.close()
        raise
    return conn


def _read_modes(path: Path) -> list[str]:
    """How a reader opens `path`, in order of preference (see `_open_read_only`)."""
    wal = path.with_name(path.name + "-wal")
    # Under WAL a reader needs the -wal and -shm files beside the store, and SQLite creates them
    # if they are missing; only the last connection to close removes them, and only one that may
    # write (a mode=ro connection never may, so it leaves them behind). With no -wal nobody has
    # the store open and nothing waits in a log, so a connection that may write but is held to
    # queries (query_only) reads it as any reader does, stores nothing, and removes the files it
    # made; a writer that opens meanwhile shares them under SQLite's own locking, and whichever
    # of the two closes last removes them (the reader, closing last, first copies the writer's
    # commits from the log into the file, as the writer would have). immutable=1 would make no
    # files either, but it takes no locks: a writer starting mid-read could change pages under
    # the reader. With a -wal present a writer may be at work, so the reader opens mode=ro and
    # leaves those files, which were there before it, to their owner.
    writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    modes = ["mode=rw"] if writable and not wal.exists() else []
    # where SQLite cannot make those files (a read-only directory) nobody can be writing the
    # store either, so the file is read as it stands
    return [*modes, "mode=ro", "mode=ro&immutable=1"]


def _open_read_only(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise StoreError(f"no store at {path}")
    uri = path.resolve().as_uri() + "?"
    modes = _read_modes(path)
    for mode in modes:
        conn = None
        try:
            conn = sqlite3.connect(uri + mode, uri=True, timeout=BUSY_SECONDS, isolation_level=None)
            conn.execute("PRAGMA query_only=ON")
            tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            break
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            if mode == modes[-1] or "unable to open" not in str(exc):
                raise StoreError(explain(exc, path)) from None
    if ("trials",) not in tables:
        conn.close()
        raise StoreError(f"{path} holds no trials table: it is not a blocklab store")
    return conn


def locate(path: str | Path) -> Path:
    """The database file `path` names: DIR/blocklab.sqlite for a directory, or for a path that
    does not exist yet whatever its name (`runs/v1.2` is a directory); the file itself for a name
    ending in .sqlite, .sqlite3 or .db, or for an existing SQLite file. Any other file fails."""
    path = Path(path)
    if path.is_dir():
        return path / DB_NAME
    if path.suffix in DB_SUFFIXES:
        return path
    if path.is_file():
        with open(path, "rb") as fh:
            if fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER:
                return path
        raise StoreError(f"{path} is a file, not a run directory or an SQLite store")
    return path / DB_NAME


def damaged(path: Path, detail: str) -> str:
    return (
        f"the store {path} is damaged or not an SQLite database ({detail}): move it aside "
        f"(mv {path} {path}.damaged), recover what it holds with "
        f"`sqlite3 {path}.damaged .recover | sqlite3 {path}`, and rerun"
    )


def explain(exc: sqlite3.Error, path: Path) -> str:
    """What went wrong with the store at `path`, and what to do, in one line."""
    # the error's SQLite code name where Python gives it (3.11+), else its text
    text, name = str(exc), getattr(exc, "sqlite_errorname", "")
    if any(k in name for k in ("CORRUPT", "NOTADB")) or "malformed" in text:
        return damaged(path, text)
    if "not a database" in text:
        return damaged(path, text)
    if any(k in name for k in ("BUSY", "LOCKED")) or "locked" in text:
        return (
            f"the store {path} is locked: another process held it for over {BUSY_SECONDS} s; "
            "let that process finish (or stop it) and rerun the same command"
        )
    if "FULL" in name or "is full" in text:
        return (
            f"cannot write to the store {path}: the disk is full; free some space and rerun "
            "the same command (the trials finished so far are kept)"
        )
    if "READONLY" in name or "readonly" in text:
        return f"the store {path} cannot be written here ({text}): give --out a writable directory"
    return f"the store {path}: {text}"


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
        # called with the ids of the trials a sweep plans, finished or not, before it runs any
        # (`plan`): the run directory counts an interrupted run's trials against them
        self.planners: list[Callable[[list[str]], None]] = []
        self.path = locate(path)
        self.read_only = read_only
        # a fresh run (reuse "none") replaces what was stored before it opened the store, and
        # keeps what it (or a sweep beside it) finished since: one command runs several sweeps
        # that share trials, and each trial trains once
        self.opened = time.time()
        self.stored = 0  # trials this store put since it was opened: what a stop keeps
        self.conn = _open_read_only(self.path) if read_only else _open(self.path)
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

    def plan(self, ids: Iterable[str]) -> None:
        """A sweep plans these trials (`planners` hear of them)."""
        ids = list(ids)
        for planner in self.planners:
            planner(ids)

    def reusable(self, fingerprints: dict[str, str | None]) -> tuple[set[str], set[str]]:
        """For trial id -> the fingerprint of the code that would make it now: the ids whose
        finished trial this store's `reuse` lets a rerun keep, and the finished ones made by other
        code (a trial stored without a fingerprint counts as other code). Under "none" only the
        trials finished after this store was opened are kept, those made by this code."""
        ids = list(fingerprints)
        stored, since = {}, set()
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            with self.errors():
                rows = self.conn.execute(
                    "SELECT id, json_extract(provenance, '$.code.fingerprint'), finished_at "
                    f"FROM trials WHERE status IN ({_FINISHED_SQL}) AND id IN "
                    f"({','.join('?' * len(chunk))})",
                    tuple(chunk),
                ).fetchall()
            stored.update((trial, fp) for trial, fp, _ in rows)
            # strictly after: a trial stamped in the very tick the store opened may be older,
            # and training it again costs time where reusing it would break --fresh
            since.update(trial for trial, _, at in rows if at > self.opened)
        stale = {i for i, fp in stored.items() if fp is None or fp != fingerprints[i]}
        if self.reuse == "none":
            return since - stale, stale
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
        self.stored += 1
        for listener in self.listeners:
            listener(record)

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

"""The store's file: where it is (`locate`), opening it to write (`open_writable`) or to read
(`open_read_only`), and what went wrong with it, in one line (`explain`).

A store opened for writing is checked first (`PRAGMA quick_check`), so a damaged file is refused
before anything is written to it; one opened to read stores nothing and leaves no files behind
(`read_modes`). Whatever goes wrong with the file (damaged, locked, full, read-only) is a
`StoreError`: one line naming the file and what to do.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from blocklab.errors import StoreError

DB_NAME = "blocklab.sqlite"
DB_SUFFIXES = (".sqlite", ".sqlite3", ".db")  # a path named so is the database file itself
SQLITE_HEADER = b"SQLite format 3\x00"
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


def open_writable(path: Path, schema: str) -> sqlite3.Connection:
    """A connection that may write the store at `path`, made if missing, with `schema`'s tables."""
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
        conn.executescript(schema)
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(explain(exc, path)) from None
    except StoreError:
        conn.close()
        raise
    return conn


def read_modes(path: Path) -> list[str]:
    """How a reader opens `path`, in order of preference (see `open_read_only`)."""
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


def open_read_only(path: Path, table: str) -> sqlite3.Connection:
    """A connection held to queries on the store at `path`, which must hold `table`."""
    if not path.is_file():
        raise StoreError(f"no store at {path}")
    uri = path.resolve().as_uri() + "?"
    modes = read_modes(path)
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
    if (table,) not in tables:
        conn.close()
        raise StoreError(f"{path} holds no {table} table: it is not a blocklab store")
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

"""Claims on trials, kept in the store, so that sweeps sharing a store split its trials.

A sweep claims a unit's trials just before it starts them and releases the claims as it stores
the unit, or all of them when it stops (Ctrl-C and SIGTERM included). Another sweep skips a trial
claimed by a live sweep, and takes over a claim whose sweep is gone, killed or not: on the same
host, its process has exited; on any host, it has not renewed the claim for `stale_seconds()`. A
live sweep renews its claims from a thread every quarter of that time, so however long a trial
runs its claim stays live, and a process id reused by another program holds nothing for long.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blocklab.errors import StoreError, UserError

if TYPE_CHECKING:
    from blocklab.store import Store

SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    claimed_at REAL NOT NULL
);
"""
STALE = 600.0  # seconds: a claim not renewed for this long is taken over, whichever host made it
POLL = 1.0  # seconds between looks at the store while waiting for trials other sweeps hold


def stale_seconds() -> float:
    """STALE, or the environment's BLOCKLAB_CLAIM_STALE: a sweep on another host cannot be seen
    from here, so this is how long one that died holds its trials."""
    text = os.environ.get("BLOCKLAB_CLAIM_STALE", "")
    try:
        value = float(text) if text else STALE
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UserError(f"BLOCKLAB_CLAIM_STALE must be a positive number of seconds, got {text!r}")
    return value


def alive(pid: int) -> bool:
    """Whether a process of this host is running (an exited one not yet reaped is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


class Claims:
    """This process's claims in one store. Use it as a context manager: it renews its claims
    while open and releases them all on leaving, however the block ends."""

    def __init__(self, store: Store, stale: float | None = None):
        self.conn, self.path, self.errors = store.conn, store.path, store.errors
        self.stale = stale_seconds() if stale is None else stale
        self.owner, self.pid, self.host = uuid.uuid4().hex, os.getpid(), socket.gethostname()
        with self.errors():
            self.conn.executescript(SCHEMA)
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> Claims:
        self._renewer = threading.Thread(target=self._renew, daemon=True, name="claims")
        self._renewer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        # a store that fails now (full, locked) keeps the claims; they die with this process
        with contextlib.suppress(sqlite3.Error, StoreError):
            self.release_all()

    def claim(self, ids: Iterable[str]) -> bool:
        """Claim all of `ids` at once, or none when another live sweep holds any of them."""
        ids = list(ids)
        now = time.time()
        with self.errors():
            return self._claim(ids, now)

    def _claim(self, ids: list[str], now: float) -> bool:
        self.conn.execute("BEGIN IMMEDIATE")  # no other sweep claims between the look and the write
        try:
            if self._held(ids, now):
                self.conn.execute("ROLLBACK")
                return False
            self.conn.executemany(
                "INSERT OR REPLACE INTO claims VALUES (?,?,?,?,?)",
                [(i, self.owner, self.pid, self.host, now) for i in ids],
            )
            self.conn.execute("COMMIT")
            return True
        except BaseException:
            self._end_transaction()
            raise

    def store(self, put: Callable[[dict[str, Any]], None], records: list[dict[str, Any]]) -> None:
        """Store `records` with `put` (on this store's connection) and release their claims in
        one transaction: a unit's trials are stored all or none, so an interrupted sweep leaves
        no unit partly stored, and no trial is ever both stored and claimed."""
        with self.errors():
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                for record in records:
                    put(record)
                self.conn.executemany(
                    "DELETE FROM claims WHERE owner = ? AND id = ?",
                    [(self.owner, r["id"]) for r in records],
                )
                self.conn.execute("COMMIT")
            except BaseException:
                self._end_transaction()
                raise

    def release(self, ids: Iterable[str]) -> None:
        ids = list(ids)
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            with self.errors():
                self.conn.execute(
                    f"DELETE FROM claims WHERE owner = ? AND id IN ({','.join('?' * len(chunk))})",
                    (self.owner, *chunk),
                )

    def release_all(self) -> None:
        self._end_transaction()
        self.conn.execute("DELETE FROM claims WHERE owner = ?", (self.owner,))

    def _held(self, ids: list[str], now: float) -> bool:
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            rows = self.conn.execute(
                "SELECT owner, pid, host, claimed_at FROM claims "
                f"WHERE id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            if any(self._live(*row, now) for row in rows):
                return True
        return False

    def _live(self, owner: str, pid: int, host: str, claimed_at: float, now: float) -> bool:
        if owner == self.owner or now - claimed_at > self.stale:
            return False
        return alive(pid) if host == self.host else True

    def _end_transaction(self) -> None:
        # an interrupt inside a transaction leaves it open, holding the store's write lock
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def _renew(self) -> None:
        # a connection of its own: sqlite3 connections are not shared between threads
        conn = sqlite3.connect(self.path, timeout=5, isolation_level=None)
        try:
            while not self._stop.wait(self.stale / 4):
                with contextlib.suppress(sqlite3.Error):  # a busy store: renew next time
                    conn.execute(
                        "UPDATE claims SET claimed_at = ? WHERE owner = ?",
                        (time.time(), self.owner),
                    )
        finally:
            conn.close()

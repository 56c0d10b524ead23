"""Leases on trials, kept in the store (`store.leases`), so that sweeps sharing a store split its
trials.

A sweep leases a batch's trials just before it starts them and releases the leases as it stores
the batch, or all of them when it stops (Ctrl-C and SIGTERM included). Another sweep skips a trial
leased by a live sweep, and takes over a lease whose sweep is gone, killed or not: on the same
host, its process has exited; on any host, it has not renewed the lease for `stale_seconds()`. A
live sweep renews its leases from a thread every quarter of that time, so however long a trial
runs its lease stays live, and a process id reused by another program holds nothing for long.
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
from blocklab.store import leases as table

if TYPE_CHECKING:
    from blocklab.store import Store

STALE = 600.0  # seconds: a lease not renewed for this long is taken over, whichever host made it
POLL = 1.0  # seconds between looks at the store while waiting for trials other sweeps hold
# the environment variable that sets `stale_seconds`, named as it always was
STALE_ENV = "BLOCKLAB_CLAIM_STALE"


def stale_seconds() -> float:
    """STALE, or the environment's BLOCKLAB_CLAIM_STALE: a sweep on another host cannot be seen
    from here, so this is how long one that died holds its trials."""
    text = os.environ.get(STALE_ENV, "")
    try:
        value = float(text) if text else STALE
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UserError(f"{STALE_ENV} must be a positive number of seconds, got {text!r}")
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


class Leases:
    """This process's leases in one store. Use it as a context manager: it renews its leases
    while open and releases them all on leaving, however the block ends."""

    def __init__(self, store: Store, stale: float | None = None):
        self.conn, self.path, self.errors = store.conn, store.path, store.errors
        self.stale = stale_seconds() if stale is None else stale
        self.owner, self.pid, self.host = uuid.uuid4().hex, os.getpid(), socket.gethostname()
        with self.errors():
            table.create(self.conn)
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> Leases:
        self._renewer = threading.Thread(target=self._renew, daemon=True, name="leases")
        self._renewer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        # a store that fails now (full, locked) keeps the leases; they die with this process
        with contextlib.suppress(sqlite3.Error, StoreError):
            self.release_all()

    def take(self, ids: Iterable[str]) -> bool:
        """Lease all of `ids` at once, or none when another live sweep holds any of them."""
        ids = list(ids)
        now = time.time()
        holder = (self.owner, self.pid, self.host)
        with self.errors():
            return table.take(self.conn, ids, holder, now, lambda row: self._live(*row, now))

    def store(self, put: Callable[[dict[str, Any]], None], records: list[dict[str, Any]]) -> None:
        """Store `records` with `put` (on this store's connection) and release their leases in
        one transaction: a batch's trials are stored all or none, so an interrupted sweep leaves
        no batch partly stored, and no trial is ever both stored and leased."""
        with self.errors():
            table.store_and_release(self.conn, self.owner, put, records)

    def release(self, ids: Iterable[str]) -> None:
        with self.errors():
            table.release(self.conn, self.owner, ids)

    def release_all(self) -> None:
        table.release_all(self.conn, self.owner)

    def _live(self, owner: str, pid: int, host: str, leased_at: float, now: float) -> bool:
        if owner == self.owner or now - leased_at > self.stale:
            return False
        return alive(pid) if host == self.host else True

    def _renew(self) -> None:
        # a connection of its own: sqlite3 connections are not shared between threads
        conn = sqlite3.connect(self.path, timeout=5, isolation_level=None)
        try:
            while not self._stop.wait(self.stale / 4):
                with contextlib.suppress(sqlite3.Error):  # a busy store: renew next time
                    table.renew(conn, self.owner, time.time())
        finally:
            conn.close()

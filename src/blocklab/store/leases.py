"""The lease table: which sweep holds which trials of a store while it runs them.

A row is one trial's lease: the sweep that holds it (`owner`, a random id per sweep), that
sweep's process and host, and when it last renewed the lease. The table keeps its first name,
`claims`, and its columns theirs, so that stores written before still open. When a lease is
live is the engine's policy (`engine.leases`), given here as a function of a row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    claimed_at REAL NOT NULL
);
"""
CHUNK = 500  # ids per statement: SQLite bounds a statement's parameters

# a lease's row as `live` reads it: (owner, pid, host, claimed_at)
Row = tuple[str, int, str, float]


def create(conn: sqlite3.Connection) -> None:
    conn.executescript(SCHEMA)


def take(
    conn: sqlite3.Connection,
    ids: list[str],
    holder: tuple[str, int, str],
    now: float,
    live: Callable[[Row], bool],
) -> bool:
    """Lease all of `ids` to `holder` (owner, pid, host) at `now`, or none when a `live` lease
    holds any of them: one transaction, so no other sweep leases between the look and the write."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if _held(conn, ids, live):
            conn.execute("ROLLBACK")
            return False
        conn.executemany(
            "INSERT OR REPLACE INTO claims VALUES (?,?,?,?,?)",
            [(i, *holder, now) for i in ids],
        )
        conn.execute("COMMIT")
        return True
    except BaseException:
        end_transaction(conn)
        raise


def store_and_release(
    conn: sqlite3.Connection,
    owner: str,
    put: Callable[[dict[str, Any]], None],
    records: list[dict[str, Any]],
) -> None:
    """Store `records` with `put` (on `conn`) and release `owner`'s leases on them in one
    transaction: the records are stored all or none, and no trial is ever both stored and held."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for record in records:
            put(record)
        conn.executemany(
            "DELETE FROM claims WHERE owner = ? AND id = ?", [(owner, r["id"]) for r in records]
        )
        conn.execute("COMMIT")
    except BaseException:
        end_transaction(conn)
        raise


def release(conn: sqlite3.Connection, owner: str, ids: Iterable[str]) -> None:
    ids = list(ids)
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i : i + CHUNK]
        conn.execute(
            f"DELETE FROM claims WHERE owner = ? AND id IN ({','.join('?' * len(chunk))})",
            (owner, *chunk),
        )


def release_all(conn: sqlite3.Connection, owner: str) -> None:
    end_transaction(conn)
    conn.execute("DELETE FROM claims WHERE owner = ?", (owner,))


def renew(conn: sqlite3.Connection, owner: str, now: float) -> None:
    conn.execute("UPDATE claims SET claimed_at = ? WHERE owner = ?", (now, owner))


def count(conn: sqlite3.Connection) -> int:
    """How many leases the store holds, live or not."""
    return conn.execute("SELECT count(*) FROM claims").fetchone()[0]


def end_transaction(conn: sqlite3.Connection) -> None:
    # an interrupt inside a transaction leaves it open, holding the store's write lock
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _held(conn: sqlite3.Connection, ids: list[str], live: Callable[[Row], bool]) -> bool:
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i : i + CHUNK]
        rows = conn.execute(
            "SELECT owner, pid, host, claimed_at FROM claims "
            f"WHERE id IN ({','.join('?' * len(chunk))})",
            chunk,
        )
        if any(live(row) for row in rows):
            return True
    return False

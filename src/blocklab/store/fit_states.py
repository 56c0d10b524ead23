"""The fit-state table: beside a finished ladder trial, what continues its fits to a larger
budget (`fitting.continuation`, which packs and reads the states; here they are only bytes).

A row is one trial's states: its id, the key it shares with the trials it may continue or be
continued by (its config without the budget), its budget (`steps`, `tol`) and the packed states.
"""

from __future__ import annotations

import sqlite3

from blocklab.store.trials import FINISHED_SQL, Store

SCHEMA = """
CREATE TABLE IF NOT EXISTS fit_states (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, steps INTEGER NOT NULL, tol REAL NOT NULL,
    state BLOB NOT NULL
)
"""
CHUNK = 500  # keys per statement: SQLite bounds a statement's parameters


def put(store: Store, trial: str, key: str, steps: int, tol: float, blob: bytes) -> None:
    """Keep trial `trial`'s fit states (on the caller's transaction, if it has one open)."""
    with store.errors():
        store.conn.execute(SCHEMA)
        store.conn.execute(
            "INSERT OR REPLACE INTO fit_states VALUES (?,?,?,?,?)", (trial, key, steps, tol, blob)
        )


def finished(store: Store, keys: list[str]) -> list[tuple[str, str, int, float, bytes, str | None]]:
    """The stored fit states of finished trials under any of `keys`, each as (key, trial id,
    steps, tol, states, the fingerprint of the code that made the trial). None stored yet: []."""
    out = []
    for i in range(0, len(keys), CHUNK):
        chunk = keys[i : i + CHUNK]
        try:
            out += store.conn.execute(
                "SELECT s.key, s.id, s.steps, s.tol, s.state, "
                "json_extract(t.provenance, '$.code.fingerprint') FROM fit_states s "
                f"JOIN trials t ON t.id = s.id WHERE t.status IN ({FINISHED_SQL}) "
                f"AND s.key IN ({','.join('?' * len(chunk))})",
                tuple(chunk),
            ).fetchall()
        except sqlite3.OperationalError:  # no fit states stored yet
            return []
    return out

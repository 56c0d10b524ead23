"""A measured point that is not a trained trial (a rank, a draw of random networks), kept in the
store like a trial: reused while the code that made it is unchanged, recomputed otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from blocklab.engine.provenance import provenance
from blocklab.fingerprint import code
from blocklab.store import Store


def stored_point(
    store: Store, record: dict[str, Any], modules: list[str], compute: Callable[[], dict]
) -> tuple[dict[str, Any], bool]:
    """A measured point that is not a trained trial (a rank, a draw of random networks): the
    stored record of `record["id"]` when the store lets a rerun keep it, else `record` with the
    metrics `compute()` returns, stored with the code that made it (`modules` and the engine).
    Returns the record and whether it was computed now."""
    codes = code(modules)
    store.expect([record["id"]])
    done, stale = store.reusable({record["id"]: codes["fingerprint"]})
    store.say_stale(stale)
    if record["id"] in done:
        return store.records(ids=[record["id"]])[0], False
    record = {
        **record,
        "status": "done",
        "metrics": compute(),
        "provenance": {**provenance(), "code": codes},
        "finished_at": time.time(),
    }
    store.put(record)
    return record, True

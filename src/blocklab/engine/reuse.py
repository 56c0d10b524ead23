"""What a sweep may reuse from its store beyond the code that made it (`store.reusable`): the
precision a trial ran at (`other_precision`), and which trials another sweep stored while this one
ran (`stored_since`)."""

from __future__ import annotations

import sys

from blocklab.fitting.train import precision
from blocklab.store import Store


def trial_precision(spec, device: str) -> str:
    """What a trial computes in on `device`: float64 for a second-order fit, else its Adam
    step's precision (`train.precision`). Its record's `metrics.precision`."""
    return "float64" if spec.train.second_order else precision(device, spec.train.precision)


def other_precision(specs, store: Store, done: set[str], device: str) -> set[str]:
    """The stored trials among `done` that ran at another precision than their spec asks on
    `device` (`train.precision`): a bf16 result is no answer to a float32 request, nor the
    reverse, so they rerun, and the run says so once."""
    wanted = {s.id: trial_precision(s, device) for s in specs if s.id in done}
    if not wanted:
        return set()
    ran = {r["id"]: r.get("metrics", {}).get("precision") for r in store.records(ids=list(wanted))}
    other = {i for i, p in ran.items() if p is not None and p != wanted[i]}
    if other:
        pairs = sorted({(ran[i], wanted[i]) for i in other})
        said = ", ".join(f"{a} where this run asks {b}" for a, b in pairs)
        print(
            f"{len(other)} stored trial(s) ran at another precision ({said}): rerunning them",
            file=sys.stderr,
        )
    return other


def stored_since(store: Store, ids: set[str], since: float) -> set[str]:
    return {r["id"] for r in store.records(ids=sorted(ids)) if r["finished_at"] >= since}

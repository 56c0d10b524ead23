"""A training experiment's plan before it runs (the manifest's price hook, `Experiment.price`):
the trials its config plans, met with the store in --out and priced as `engine.pricing` prices
them (`price`), the command's recorded run of this very config among the sources (`Recorded`);
and for an experiment that searches its learning rates first (`_trials.run_searched`), the
search's trials and the finals at the rates it chose, as far as the store has decided the
search (`searched`).

A search is decided from the store as `_trials.search_lr` decides it, round by round
(`_trials.next_rate`): where every trial of a key's round is stored by this code, its scores say
whether the search goes past an edge (the next round's trials are planned) or which rate it
chose (the finals are planned at it). Where a round is not all stored, the key's search is still
to run: its finals are counted at the grid's first rate (a trial's cost does not hang on its
rate) and met with the store once the search has run, and the rounds it may add past an edge
are not counted; the plan's note says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blocklab.engine.pricing import TIMED, Plan, price_specs
from blocklab.specs import TrialSpec
from blocklab.store import DB_NAME, Store

Finals = Callable[[dict[Hashable, float]], list[tuple[dict[str, Any], TrialSpec]]]


@dataclass(frozen=True)
class Points:
    """What a run measures besides its trials (needle's random-weight settings): how many, how
    many of them the store holds, and `seconds()`: the core-seconds of the rest, timed here."""

    what: str  # "random-weight settings"
    key: str  # the plan's JSON keys: how many (`key`), and how many stored (`key`_stored)
    total: int
    stored: int
    seconds: Callable[[], float]


@contextlib.contextmanager
def stored(out_dir: str | Path) -> Iterator[Store | None]:
    """The store in `out_dir`, read only and closed after; None where there is none yet."""
    path = Path(out_dir) / DB_NAME
    store = Store(path, read_only=True) if path.is_file() else None
    try:
        yield store
    finally:
        if store is not None:
            store.close()


def price(
    specs: Sequence[TrialSpec],
    cfg: Any,
    store: Store | None,
    words: Sequence[str],
    *,
    extra: dict[str, Any] | None = None,
    note: str | None = None,
    points: Points | None = None,
) -> Plan:
    """The plan of fitting `specs` (what `cfg` plans) into `store`: `engine.pricing.price_specs`,
    with the run of `cfg` that the timings file records for one of the commands `words`
    (`Recorded`) before the networks are timed here; and the run's `points`, timed here where
    the recorded run, which measured them too, does not price the plan."""
    specs = list({s.id: s for s in specs}.values())
    whole = Recorded.of(cfg, words, len(specs))
    plan = price_specs(specs, store, recorded=whole, extra=extra)
    if note:
        plan = dataclasses.replace(plan, note=note)
    if points is None:
        return plan
    left = points.total - points.stored
    keys = {points.key: points.total, f"{points.key}_stored": points.stored}
    plan = dataclasses.replace(plan, extra={**plan.extra, **keys})
    if not left or plan.core_seconds is None or (whole is not None and whole.used):
        return plan
    timed = f"{TIMED} for {left} {points.what}: each timed on this machine at a few of its draws"
    busy = plan.trials_new + plan.trials_continued
    basis = f"{plan.basis}; {timed}" if busy else timed
    return dataclasses.replace(plan, core_seconds=plan.core_seconds + points.seconds(),
                               basis=basis)  # fmt: skip


@dataclass
class Recorded:
    """The timings file's run of this very config (its fingerprint,
    `timings.config_fingerprint`) by one of the experiment's commands, as a plan's recorded
    source (`engine.pricing.price_specs`): its wall seconds times the cores it ran on, the
    command's start and report included, where every one of its `total` trials is new (the whole
    run again), else nothing: an experiment's trials differ in cost (its variants, lengths,
    budgets), so a share of the run would not price a few of them. `used`: whether it priced."""

    entry: dict[str, Any]
    total: int
    used: bool = False

    @classmethod
    def of(cls, cfg: Any, words: Sequence[str], total: int) -> Recorded | None:
        """The recorded run of `cfg` by one of the commands `words`; None where there is none."""
        from blocklab.timings import config_fingerprint, entries

        fingerprint = config_fingerprint(cfg)
        for entry in entries():
            if entry.get("command") in words and entry.get("config_fingerprint") == fingerprint:
                return cls(entry, total) if total else None
        return None

    def __call__(self, new: list[TrialSpec]) -> tuple[float, str] | None:
        if len(new) != self.total:
            return None
        self.used = True
        e = self.entry
        cores = e["machine"]["cores"]
        source = (e.get("source") or "").split(":")[0] or "the timings file"
        said = (
            f"the recorded run of `blocklab {e['command']}` at this config ({source}, "
            f"{e['date']}, commit {e['commit']}): {e['seconds']:.0f} s on {cores} cores, its "
            "whole run again"
        )
        return float(e["seconds"]) * cores, said


def searched(
    cfg: Any,
    at: dict[Hashable, Callable[[float], TrialSpec]],
    finals: Finals,
    store: Store | None,
    higher: bool,
) -> tuple[list[TrialSpec], dict[str, Any], str]:
    """The trials a searched run (`_trials.run_searched`) fits into `store`, as far as the store
    decides its search (the module's docstring): the search's rounds and the finals; the plan's
    JSON keys (`searches`: keys searched, `searches_to_run`: those the store has not decided,
    `search_trials`: the search's trials planned); and its note in words."""
    from blocklab.engine.pricing import meet
    from blocklab.experiments import _trials

    grids = {key: sorted(cfg.lr_grid) for key in at}
    extend = cfg.lr_extend if len(cfg.lr_grid) > 1 else 0
    planned: list[TrialSpec] = []
    rates: dict[Hashable, float] = {}
    pending, open_, round_ = list(at), [], 0
    while pending:
        search = {key: [at[key](lr) for lr in grids[key]] for key in pending}
        this = [s for group in search.values() for s in group]
        planned += this
        met = meet(this, store)
        again = []
        for key in pending:
            if any(s.id not in met.done for s in search[key]):
                open_.append(key)
                continue
            scores = [_trials.val_score(met.records.get(s.id), higher) for s in search[key]]
            best, _, extended = _trials.next_rate(grids[key], scores, round_ < extend)
            if extended:
                again.append(key)
            else:
                rates[key] = grids[key][best]
        pending, round_ = again, round_ + 1
    first = cfg.lr_grid[0]
    trials = planned + [s for _, s in finals({key: rates.get(key, first) for key in at})]
    keys = {
        "searches": len(at),
        "searches_to_run": len(open_),
        "search_trials": len({s.id for s in planned}),
    }
    if not open_:
        note = f"the {len(at)} learning-rate searches are stored: finals at the rates they chose"
    else:
        more = (
            f"; each may add up to {extend} rate{'s' if extend > 1 else ''} past an edge of the "
            "grid (not counted)"
            if extend
            else ""
        )
        note = (
            f"{len(open_)} of {len(at)} learning-rate searches still to run: their finals are "
            f"counted at the grid's first rate ({first:g}) and met with the store once the "
            f"search has run{more}"
        )
    return trials, keys, note


def price_searched(
    cfg: Any,
    at: dict[Hashable, Callable[[float], TrialSpec]],
    finals: Finals,
    out_dir: str | Path,
    words: Sequence[str],
    *,
    higher: bool = True,
    extra: dict[str, Any] | None = None,
) -> Plan:
    """The plan of a searched run into `out_dir` (`searched`, priced by `price`)."""
    with stored(out_dir) as store:
        trials, keys, note = searched(cfg, at, finals, store, higher)
        return price(trials, cfg, store, words, extra={**(extra or {}), **keys}, note=note)


def price_planned(
    specs: Sequence[TrialSpec],
    cfg: Any,
    out_dir: str | Path,
    words: Sequence[str],
    *,
    extra: dict[str, Any] | None = None,
) -> Plan:
    """The plan of fitting `specs`, what `cfg` plans, into `out_dir` (`price`)."""
    with stored(out_dir) as store:
        return price(specs, cfg, store, words, extra=extra)

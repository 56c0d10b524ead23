"""What the next run costs, estimated from the fits this one measured (`next_cost`).

The next command changes a few settings (`cells.Change`). Two of them have a cost the stored fits
measure:

- more iterations (`train.steps`): the stored ladders continue (`fitting.continuation`). A fit
  certified, floored or stopped stands; a fit the budget cut runs at most the new budget's extra
  iterations; the rungs above it on its chain fit again, at most the new budget each. Each at its
  rung's measured seconds an iteration (the rung's seconds over its chains' iterations).
- more (teacher, seed) units (`seeds`, `teachers`): each new unit at this run's measured cost of
  a unit (`pilot.core_seconds_per_unit`'s sum: every rung of every arm).

- more chains (`train.restarts`): a ladder's chains cannot be added to a stored one, so every
  unit fits again from the start, at this run's measured cost of a unit times the ratio of the
  chains (and of the iterations, where those change too).

All are upper bounds in core-seconds (fits that certify early cost less). Any other change
(budgets, depths, widths) builds networks this run never fitted: not estimated.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Cost:
    """The next run's fits in core-seconds at most, and for more iterations how many stored fits
    continue, fit again above a continued one, or stand as they ended."""

    core_seconds: float
    continued: int = 0
    refit: int = 0
    kept: int = 0
    units: int = 0  # new (teacher, seed) units


def next_cost(rows: list[dict[str, Any]], changes, chains: str = "own") -> Cost | None:
    """The cost of the next run's `changes` over this run's fit rows (one per rung of each
    ladder trial, as `experiments._trials.rung_rows` gives them), its chains continuing their
    own fits ("own") or the best one ("best": every chain moves with a continued one); None
    where a change is one this module does not estimate, or the rows carry no per-chain
    iterations."""
    by_key = {c.key: c for c in changes}
    known = {"train.steps", "train.restarts", "seeds", "teachers"}
    if not by_key or set(by_key) - known:
        return None
    done = [r for r in rows if r.get("status") == "done" and r.get("restart_iterations")]
    if not done:
        return None
    if "train.restarts" in by_key:
        return _afresh(done, by_key)
    cost = Cost(0.0)
    if "train.steps" in by_key:
        c = by_key["train.steps"]
        cost = _more_iterations(done, c.old, c.new, chains == "best")
    units = {(r.get("teacher"), r.get("seed")) for r in done}
    teachers = len({t for t, _ in units})
    seeds = len({s for _, s in units})
    new_teachers = by_key["teachers"].new if "teachers" in by_key else teachers
    new_seeds = by_key["seeds"].new if "seeds" in by_key else seeds
    added = new_teachers * new_seeds - len(units)
    if added > 0:
        per_unit = sum(r.get("seconds") or 0.0 for r in done) / len(units)
        steps = by_key.get("train.steps")
        scale = steps.new / steps.old if steps is not None else 1.0  # a new unit fits whole
        seconds = cost.core_seconds + added * per_unit * scale
        cost = Cost(seconds, cost.continued, cost.refit, cost.kept, added)
    return cost


def _afresh(rows: list[dict[str, Any]], by_key: dict) -> Cost:
    """Every unit of the next run fitted from the start: this run's cost of a unit, times the
    chains' ratio and the iterations' ratio, times the next run's units."""
    units = {(r.get("teacher"), r.get("seed")) for r in rows}
    per_unit = sum(r.get("seconds") or 0.0 for r in rows) / len(units)
    scale = 1.0
    for key in ("train.restarts", "train.steps"):
        if key in by_key:
            scale *= by_key[key].new / by_key[key].old
    teachers = len({t for t, _ in units})
    seeds = len({s for _, s in units})
    new_t = by_key["teachers"].new if "teachers" in by_key else teachers
    new_s = by_key["seeds"].new if "seeds" in by_key else seeds
    return Cost(new_t * new_s * per_unit * scale, units=max(0, new_t * new_s - len(units)))


def _more_iterations(rows: list[dict[str, Any]], old: int, new: int, best: bool) -> Cost:
    """Continuing each ladder from `old` to `new` iterations (`fitting.continuation.actions`,
    read off the rows: a chain's fit that ran without certifying and did not diverge was cut;
    with `best`, every chain above a rung where one continued fits again)."""
    trials: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        trials[r["id"]].append(r)
    seconds, continued, refit, kept = 0.0, 0, 0, 0
    for rungs in trials.values():
        moved: set[int] = set()
        for r in sorted(rungs, key=lambda r: r["depth"]):
            iterations = r["restart_iterations"]
            ran = sum(iterations)
            per = (r.get("seconds") or 0.0) / ran if ran else 0.0
            chains = zip(r["restart_converged"], r["restart_train_losses"], strict=True)
            for c, (certified, loss) in enumerate(chains):
                if c in moved:
                    refit, seconds = refit + 1, seconds + per * new
                elif certified or loss is None or not math.isfinite(loss):
                    kept += 1
                else:  # cut by its budget: it continues
                    continued, seconds = continued + 1, seconds + per * (new - old)
                    moved.add(c)
            if best and moved:
                moved = set(range(len(iterations)))
    return Cost(seconds, continued, refit, kept)

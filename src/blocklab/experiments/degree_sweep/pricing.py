"""The degree sweep's plan before it fits (`price`, the manifest's price hook): the trials its
config plans (`plan`), met with the store in --out and priced as `engine.pricing` prices them,
with the run's units, teachers and seeds; and the price of the next command a report proposes
(`pricer`: the config with its changes, priced against the store the run just wrote). A plan
that adds iterations to stored ladders says what the store's earlier continuation changed, where
one ran (`continued_before`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path
from typing import Any

from blocklab.engine.pricing import Plan, meet, price_specs
from blocklab.errors import UserError
from blocklab.experiments._pricing import stored
from blocklab.experiments.degree_sweep import plan, sizing
from blocklab.experiments.degree_sweep.config import DegreeSweepConfig


def planned(cfg: DegreeSweepConfig) -> list[Any]:
    """The trials a run of `cfg` fits, rates at the config's (second-order fits) or at its grid's
    first (a search under Adam picks them: a trial's cost does not hang on its rate)."""
    from blocklab.tasks import make_task

    task = make_task(cfg.task, **cfg.task_options)
    cells = plan.shapes(cfg, task)
    rate = cfg.train.lr if cfg.train.second_order else cfg.lr_grid[0]
    return [s for _, s in plan.trials(cfg, cells, dict.fromkeys(cells, rate))]


def price(cfg: DegreeSweepConfig, out_dir: str | Path, time_here: bool = True) -> Plan:
    """The plan of running `cfg` into `out_dir`: its trials against the store there, priced
    (`engine.pricing.price_specs`), with its units, teachers and seeds."""
    with stored(out_dir) as store:
        specs = planned(cfg)
        found = price_specs(
            specs, store, recorded=lambda new: _recorded(cfg, out_dir, new),
            time_here=time_here, extra=_units(cfg),
        )  # fmt: skip
        if not found.trials_continued:
            return found
        # it adds iterations to stored ladders: what the store's earlier continuation changed
        before = {p.steps for p in meet(specs, store).parents.values()}
    notes = [continued_before(_steps(cfg, steps), out_dir) for steps in sorted(before)]
    note = "; ".join(n for n in notes if n)
    return dataclasses.replace(found, note=note) if note else found


def _steps(cfg: DegreeSweepConfig, steps: int) -> DegreeSweepConfig:
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=steps))


def _units(cfg: DegreeSweepConfig) -> dict[str, Any]:
    return {"units": cfg.teachers * cfg.seeds, "teachers": cfg.teachers, "seeds": cfg.seeds}


def _recorded(cfg: DegreeSweepConfig, out_dir, new: list[Any]) -> tuple[float, str] | None:
    """The new trials at the cost of a unit recorded for the design (`sizing.measured`), a unit
    being a trial of each arm; None where no run of the design is recorded."""
    try:
        entry = sizing.measured(cfg, out_dir)
    except UserError:
        return None
    per_unit = entry.get("core_seconds_per_unit")
    if not per_unit:
        return None
    units = len(new) / max(1, len(cfg.arms()))
    return units * float(per_unit), f"{entry['source']}, {per_unit:.0f} core-seconds a unit"


def with_changes(cfg: DegreeSweepConfig, changes) -> DegreeSweepConfig:
    """`cfg` with a next command's changes (`cells.Change`: a dotted key for a nested config),
    checked as any config is; a UserError where one is not a config field."""
    for change in changes:
        head, _, field = change.key.partition(".")
        try:
            if field:
                inner = dataclasses.replace(getattr(cfg, head), **{field: change.new})
                cfg = dataclasses.replace(cfg, **{head: inner})
            else:
                cfg = dataclasses.replace(cfg, **{head: change.new})
        except (AttributeError, TypeError, ValueError) as exc:
            raise UserError(f"{change.key}: {exc}") from None
    return cfg


def pricer(cfg: DegreeSweepConfig, out_dir: str | Path):
    """What prices a report's next command: its changes -> the `Plan` of `cfg` with them, run
    into `out_dir` (networks never timed here: a report reads the store and the records), or a
    `Plan` with the reason it is not priced."""

    def priced(changes) -> Plan:
        try:
            return price(with_changes(cfg, changes), out_dir, time_here=False)
        except UserError as exc:
            return Plan(0, 0, reason=f"the next command's changes cannot be priced ({exc})")

    return priced


def continued_before(cfg: DegreeSweepConfig, out_dir: str | Path) -> str | None:
    """Where this store's trials continued stored ones of fewer iterations (an earlier next
    command that added iterations): what that changed, in words. Its trials' test losses
    (each rung's, the chain its ladder kept) against their parents', and how many fits had
    certified before and after; None where no trial of `cfg` continued one."""
    from blocklab.engine.pricing import meet_parents
    from blocklab.frames import rung_records

    with stored(out_dir) as store:
        if store is None:
            return None
        found = meet_parents(planned(cfg), store)
    if not found:
        return None
    changes, certified = [], [0, 0]
    befores = set()
    for record, parent in found:
        befores.add(parent["config"]["train"]["steps"])
        for now, then in zip(rung_records(record), rung_records(parent), strict=False):
            a, b = _loss(now), _loss(then)
            if a is not None and b is not None and b > 0:
                changes.append(a / b - 1)
            certified[0] += _certified(then)
            certified[1] += _certified(now)
    if not changes:
        return None
    fits = sum(len(_chains(r)) for record, _ in found for r in rung_records(record))
    biggest = min(changes)
    return (
        f"this store's earlier continuation, from {', '.join(f'{b:,}' for b in sorted(befores))} "
        f"to {cfg.train.steps:,} iterations on {len(found)} trial{'s' if len(found) > 1 else ''}, "
        "moved each rung's test loss "
        f"by a median of {statistics.median(changes):+.1%} (most: {biggest:+.1%}); certified "
        f"fits {certified[0]} before, {certified[1]} after, of {fits}"
    )


def _chains(rung: dict[str, Any]) -> list[dict[str, Any]]:
    return (rung.get("metrics") or {}).get("restarts") or []


def _certified(rung: dict[str, Any]) -> int:
    return sum(bool(c.get("converged")) for c in _chains(rung))


def _loss(rung: dict[str, Any]) -> float | None:
    loss = (rung.get("metrics") or {}).get("test_loss")
    return float(loss) if isinstance(loss, (int, float)) and math.isfinite(loss) else None

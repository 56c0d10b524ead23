"""The referee of a second-order sweep: each cell's first trial (teacher 0, seed 0, its first
initialization) fitted by the other second-order optimizer too, and how far apart the two land."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RefereeCell:  # a cell's first trial fitted by both second-order optimizers from one start
    arm: str
    budget: int
    main: str | None  # the sweep's optimizer
    main_train: float  # the main trial's restart 0 final training loss; NaN: missing, diverged
    referee: str  # the other optimizer
    referee_train: float  # its final training loss from the same initialization; NaN: diverged
    gap: float  # (referee - main) / main; NaN without both
    main_converged: bool | None  # the main trial's certificate (that of its best restart)
    referee_converged: bool | None


@dataclass(frozen=True)
class RefereeSummary:
    cells: tuple[RefereeCell, ...]
    median_gap: float  # of |gap| over the cells that have one; NaN: none has
    max_gap: float


def _first(r: dict[str, Any]) -> bool:  # the trial a referee refits: teacher 0, seed 0
    return (r.get("teacher") or 0) == 0 and r["seed"] == 0


def _finite(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _referee_cell(main: dict[str, Any] | None, ref: dict[str, Any], optimizer) -> RefereeCell:
    restarts = (main or {}).get("restart_train_losses") or [None]
    main_train, ref_train = _finite(restarts[0]), _finite(ref.get("train_loss"))
    both = main_train > 0 and math.isfinite(ref_train)  # NaN compares False
    return RefereeCell(
        arm=ref["arm"],
        budget=int(ref["budget"]),
        main=optimizer,
        main_train=main_train,
        referee=ref["optimizer"],
        referee_train=ref_train,
        gap=(ref_train - main_train) / main_train if both else math.nan,
        main_converged=(main or {}).get("converged"),
        referee_converged=ref.get("converged"),
    )


def referee_summary(rows, referee) -> RefereeSummary | None:
    """Per cell, the training loss the sweep's optimizer reached from the first trial's first
    initialization (`restart_train_losses[0]`) against the other optimizer's from the same one on
    the same training set, and the median and largest |gap|; None without referee rows."""
    if not referee:
        return None
    first = {(r["arm"], int(r["budget"])): r for r in rows if _first(r)}
    optimizer = rows[0].get("optimizer") if rows else None
    cells = tuple(
        _referee_cell(first.get((r["arm"], int(r["budget"]))), r, optimizer) for r in referee
    )
    gaps = [abs(c.gap) for c in cells if math.isfinite(c.gap)]
    median = float(np.median(gaps)) if gaps else math.nan
    return RefereeSummary(cells=cells, median_gap=median, max_gap=max(gaps, default=math.nan))

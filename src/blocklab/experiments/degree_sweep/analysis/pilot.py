"""The spreads a degree run must be sized by, measured on its rows: what a run of +-3% would take.

- `sigma`: per arm, the spread of log test loss between seeds of one teacher within a cell (after
  the best of the trial's K chains), pooled over the arm's cells and teachers as a root mean
  square: the per-unit noise once the teacher is known. Teachers differ in difficulty by far more
  (`teacher_spread` and the raw spread between units, `unit_spread`).
- `teacher_spread`: per arm, the standard deviation between teachers of its difference from the
  reference (d = 3) in mean log loss over the shared cells' budgets ranks; NaN with one teacher.
- `units_for(R)`: the (teacher, seed) units a +-R interval on the widest decisive multiplier
  needs (`sample_size.units_for`, from that interval's half width and its t's degrees of
  freedom), and `core_seconds_per_unit`: what one unit cost here, the fit seconds of every rung
  of every arm summed over the units. Their product is the run's cost in core-seconds, which
  `estimate` divides among cores or by a GPU's measured speed-up.

The multiplier model's standard error is about sqrt(2 sigma^2 / n) / alpha per multiplier, so
sigma, alpha and the spread between teachers are what a larger run's size rests on.

A run sized to a resolution before it runs (`experiments.degree_sweep.sizing`: its `Spreads`,
what sizing reads of a finished run, and its `RunSize`) is this one calculation at another
target: the units grow by whole teachers, each teacher keeping the run's seeds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from blocklab.engine.devices import spread_out
from blocklab.experiments.degree_sweep.analysis.cells import loss
from blocklab.sample_size import units_for


@dataclass(frozen=True)
class Pilot:
    sigma: dict[str, float]  # arm -> pooled SD of log loss between seeds of one teacher
    sigma_pooled: float  # over every arm's cells and teachers
    unit_spread: dict[str, float]  # arm -> pooled SD between all units of a cell, teachers mixed
    teacher_spread: dict[str, float]  # arm -> SD between teachers of its log-loss gap to d=3
    alpha: float  # the shared exponent (NaN: no model)
    units: int  # (teacher, seed) units this run holds
    core_seconds_per_unit: float  # fit seconds per unit, every rung of every arm
    # the widest decisive multiplier interval's half width in log units (NaN: none; inf:
    # unbounded) and the degrees of freedom of its t (`capacity.Decision.widest`, `.df`)
    widest: float = math.nan
    df: float = math.inf
    level: float = 0.95

    def units_for(self, target: float) -> int | None:
        """The (teacher, seed) units a +-`target` interval on the widest decisive multiplier
        needs; None where no decisive interval is bounded."""
        return units_for(self.widest, self.units, target, self.df, self.level)

    @property
    def units_for_3pct(self) -> int | None:
        return self.units_for(0.03)

    def core_seconds(self, target: float = 0.03) -> float | None:
        """The +-`target` run's fit time in core-seconds, at this run's cost per unit."""
        units = self.units_for(target)
        if units is None or not math.isfinite(self.core_seconds_per_unit):
            return None
        return units * self.core_seconds_per_unit

    def estimate(self, cores: int = 1, gpu: bool = False, target: float = 0.03) -> float | None:
        """Seconds of the +-`target` run on `cores` CPU cores (one trial per core: Ray, Slurm or
        the local pool), or on one GPU (`GPU_OVER_CORE`, trials one at a time)."""
        return spread_out(self.core_seconds(target), cores, gpu)


def _unit(r: dict[str, Any]) -> tuple[Any, Any]:
    return (r.get("teacher"), r["seed"])


def pilot(
    rows, model, widest: float = math.nan, df: float = math.inf, level: float = 0.95,
    reference: str = "d=3",
) -> Pilot:  # fmt: skip
    """The spreads of the finished `rows` (one per rung) and the shared `model` (None: not
    fitted); `widest`, `df`, `level`: the widest decisive interval as the capacity analysis
    read it (`capacity.Decision`)."""
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    by_unit: dict[tuple[str, Any, int], list[float]] = defaultdict(list)
    seconds, units = 0.0, set()
    for r in rows:
        value = loss(r)
        seconds += r.get("seconds") or 0.0
        units.add(_unit(r))
        if value is None or not value > 0:
            continue
        cells[(r["arm"], int(r["budget"]))].append(math.log(value))
        by_unit[(r["arm"], r.get("teacher"), int(r["budget"]))].append(math.log(value))
    sigma, pooled = _pooled_sd(by_unit)
    alpha = model.alpha.value if model is not None else math.nan
    return Pilot(
        sigma=sigma,
        sigma_pooled=pooled,
        unit_spread=_pooled_sd(cells)[0],
        teacher_spread=_teacher_spread(by_unit, reference),
        alpha=alpha,
        units=len(units),
        core_seconds_per_unit=seconds / len(units) if units else math.nan,
        widest=widest,
        df=df,
        level=level,
    )


def _pooled_sd(groups: dict[tuple, list[float]]) -> tuple[dict[str, float], float]:
    """Per arm (each key's first entry), the root mean square of the groups' sample SDs (groups
    of one have none), and the same over every arm."""
    out, every = {}, []
    for arm in sorted({k[0] for k in groups}):
        variances = [np.var(v, ddof=1) for k, v in groups.items() if k[0] == arm and len(v) > 1]
        every += variances
        out[arm] = float(np.sqrt(np.mean(variances))) if variances else math.nan
    return out, float(np.sqrt(np.mean(every))) if every else math.nan


def _teacher_spread(by_unit, reference: str) -> dict[str, float]:
    """Per arm, the SD between teachers of (arm - reference) mean log loss, averaged over the
    budget ranks both hold (the arms' budgets differ: rank k is each arm's k-th depth)."""
    means: dict[tuple[str, Any], list[float]] = defaultdict(list)
    for arm, teacher in sorted({(a, t) for a, t, _ in by_unit}, key=str):
        budgets = sorted(b for a, t, b in by_unit if (a, t) == (arm, teacher))
        means[(arm, teacher)] = [float(np.mean(by_unit[(arm, teacher, b)])) for b in budgets]
    teachers = sorted({t for _, t in means}, key=str)
    out = {}
    for arm in sorted({a for a, _ in means if a != reference}):
        gaps = []
        for t in teachers:
            mine, ref = means.get((arm, t)), means.get((reference, t))
            if mine and ref:
                k = min(len(mine), len(ref))
                gaps.append(float(np.mean(np.subtract(mine[:k], ref[:k]))))
        out[arm] = float(np.std(gaps, ddof=1)) if len(gaps) > 1 else math.nan
    return out

"""The degree run's spreads and the size of a +-3% run (`degree_sweep.analysis.pilot`), for the
terminal and the JSON; a run sized to a resolution is worded where it is sized
(`degree_sweep.sizing.plan_lines`)."""

from __future__ import annotations

import math
from typing import Any

from blocklab.engine.devices import GPU_OVER_CORE
from blocklab.experiments.degree_sweep.analysis.pilot import Pilot
from blocklab.experiments.degree_sweep.sizing import Spreads
from blocklab.formatting import minutes, plain

CORES = (2, 64)  # the reference machine, and a Ray or Slurm allocation of that many cores


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else minutes(seconds)


def _by_arm(values: dict[str, float]) -> str:
    shown = [f"{a} {v:.3g}" for a, v in values.items() if math.isfinite(v)]
    return ", ".join(shown) or "not measured"


def pilot_lines(p: Pilot) -> list[str]:
    """What the spreads were and what +-3% would cost, or why it cannot be sized."""
    lines = [
        f"spreads of log loss (best chain): sigma, between seeds of a teacher, {_by_arm(p.sigma)}; "
        f"between teachers, each arm's gap to d=3: {_by_arm(p.teacher_spread)}"
    ]
    total = p.core_seconds()
    if total is None:
        lines.append("+-3%: not sized (no bounded decisive multiplier interval)")
        return lines
    on = ", ".join(f"{_hours(p.estimate(cores=c))} on {c} cores" for c in CORES)
    lines.append(
        f"+-3% needs about {p.units_for_3pct} (teacher, seed) units (this run: {p.units}, "
        f"{p.core_seconds_per_unit:.0f} core-seconds each): {on} (local, Ray or Slurm), "
        f"about {_hours(p.estimate(gpu=True))} on one GPU (estimated: a GPU at "
        f"{GPU_OVER_CORE:g} CPU cores, from the results log)"
    )
    return lines


def pilot_json(p: Pilot) -> dict[str, Any]:
    return plain(
        {
            "sigma": p.sigma,
            "sigma_pooled": p.sigma_pooled,
            "unit_spread": p.unit_spread,
            "teacher_spread": p.teacher_spread,
            "alpha": p.alpha,
            "units": p.units,
            "units_for_3pct": p.units_for_3pct,
            "core_seconds_per_unit": p.core_seconds_per_unit,
            "estimate_seconds": {
                **{f"cpu_{c}_cores": p.estimate(cores=c) for c in CORES},
                "one_gpu": p.estimate(gpu=True),
            },
            "gpu_over_core": GPU_OVER_CORE,
        }
    )


def spreads_of(p: Pilot, source: str) -> Spreads:
    """What a sized run reads of this run's spreads (`sizing.Spreads`), named by `source`."""
    return Spreads(p.widest, p.units, p.df, p.level, p.core_seconds_per_unit, source)

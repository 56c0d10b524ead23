"""The degree run's spreads, the size of a +-3% run and of a run sized to a resolution
(`degree_sweep.analysis.pilot`), for the terminal and the JSON."""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from blocklab.errors import UserError
from blocklab.experiments.degree_sweep import sizing
from blocklab.experiments.degree_sweep.analysis.pilot import GPU_OVER_CORE, Pilot, RunSize, Spreads
from blocklab.experiments.degree_sweep.analysis.pilot import size as plan_for
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


# where a sized run can run, beside this machine: (name, cores, the flags that send it there)
ELSEWHERE = (
    ("Ray", 64, ["--executor", "ray", "--executor-option", "address=HOST:PORT"]),
    ("Slurm", 64, ["--executor", "slurm", "--executor-option", "partition=P"]),
)
SIZED = ("--teachers", "--seeds", "--target-resolution")  # flags the plan's command sets


def plan_command(words: list[str], plan: RunSize) -> list[str]:
    """The command that runs `plan`: `words` (a command line, "blocklab ...") less --plan and
    --json and the flags the plan sets, then those."""
    out, skip = [], False
    for w in words:
        name = w.split("=", 1)[0]
        if skip:
            skip = False
        elif name in SIZED:
            skip = "=" not in w
        elif w not in ("--plan", "--json"):
            out.append(w)
    return out + [
        "--target-resolution", f"{plan.target:g}", "--teachers", str(plan.teachers),
        "--seeds", str(plan.seeds),
    ]  # fmt: skip


def plan_lines(plan: RunSize, cfg=None, words: list[str] | None = None) -> list[str]:
    """What a run sized to +-R is, what it was sized from, and what it costs here and elsewhere,
    each with its command."""
    s = plan.spreads
    read = f"t with df {s.df:g}" if math.isfinite(s.df) else "bootstrap"
    widest = f"+-{math.expm1(s.widest):.1%}" if math.isfinite(s.widest) else "unbounded"
    lines = [
        f"sized to +-{plan.target:.0%}: {plan.units} (teacher, seed) units, {plan.teachers} "
        f"teachers x {plan.seeds} seed{'s' if plan.seeds > 1 else ''}, by the power calculation "
        f"on {s.source} (its widest decisive interval {widest} at {s.units} units, {read})"
    ]
    if cfg is not None and cfg.teachers != plan.teachers:
        lines.append(f"this run fits {cfg.teachers} teachers (given, or already in --out)")
    if plan.core_seconds is None:
        lines.append("its time: not estimated (no cost per unit was measured)")
        return lines
    command = plan_command(words or ["blocklab", "degree-sweep"], plan)
    here = os.cpu_count() or 1
    lines.append(
        f"fits: {plan.core_seconds / 3600:.1f} core-hours at {s.core_seconds_per_unit:.0f} "
        "core-seconds a unit (the cost recorded with those spreads):"
    )
    lines.append(f"- here, {here} cores: about {_hours(plan.seconds(here))}: {shlex.join(command)}")
    for name, cores, flags in ELSEWHERE:
        lines.append(
            f"- {name}, {min(cores, plan.trials or cores)} cores (a trial to each): about "
            f"{_hours(plan.seconds(cores))}: {shlex.join(command + flags)}"
        )
    lines.append(
        f"- one GPU: about {_hours(plan.gpu_seconds)} (estimated: a GPU at {GPU_OVER_CORE:g} CPU "
        f"cores, from the results log): {shlex.join(command + ['--device', 'cuda'])}"
    )
    return lines


def size(cfg, out_dir: str | Path, pinned: bool = False):
    """(config, plan): `cfg` with the teachers its `target_resolution` needs by the power
    calculation on the recorded spreads of its design (`sizing.measured`); `pinned`: the
    teachers were given, and stay. Never fewer teachers than --out's run already fitted."""
    entry = sizing.measured(cfg, out_dir)
    spreads = Spreads.recorded(entry)
    plan = plan_for(spreads, cfg.target_resolution, cfg.seeds, len(cfg.arms()))
    if plan.teachers is None:
        raise UserError(
            f"--target-resolution: {spreads.source} bounds no decisive multiplier interval, "
            "so nothing sizes a run from it; run more teachers first (--teachers)"
        )
    if not pinned:
        cfg = replace(cfg, teachers=max(plan.teachers, int(entry.get("teachers") or 0)))
    return cfg, plan

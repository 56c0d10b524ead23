"""What a degree run sized to a resolution (`--target-resolution R`) is sized from: the spreads
of a finished run of the same design, the run in --out where its report recorded them
(`SPREADS_FILE`, written by every degree report), else, where the design is the demo's, the
recorded run of the demo's teachers at the run's own iteration count (`RECORDED_SPREADS`), or the
demo's (`DEMO_SPREADS`) where none was recorded at it; and the run they size: `size` sizes the
config by the power calculation on them (`sample_size.units_for`, the one the analysis reads
after a run), and `plan_lines` words the plan with its cost and commands. Those two are the
manifest's sizing hook (`experiments.Sizing`): everything a plan needs is here, below the
analysis and the report, so the command line and the API ask the manifest for a plan.

The size is fixed before any fit of the run it sizes, and a run grows but never shrinks: the
teachers already fitted in --out stay in it. Sized from a run in the same store, the finished
units are the first stage of an internal pilot (Wittes and Brittain 1990); the coverage of the
intervals under that rule is measured by `degree_sweep.analysis.coverage.simulate_sized`
(`benchmarks/coverage.py --sized`).
"""

from __future__ import annotations

import json
import math
import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from blocklab.engine.devices import GPU_OVER_CORE, spread_out
from blocklab.errors import UserError
from blocklab.experiments.degree_sweep.config import DegreeSweepConfig
from blocklab.formatting import minutes
from blocklab.sample_size import units_for, units_interval, variance_factor

SPREADS_FILE = "spreads.json"
# what a design leaves out: the run's size, how it is read, and how long each fit may run (the
# spreads between teachers measured at 512 and 1,024 iterations a rung agree: +-8.8% and +-9.0%
# on m(d=2) with 9 teachers, docs/results/degree.md)
NOT_DESIGN = ("teachers", "seeds", "roundings", "target_resolution", "count", "alpha", "n_boot")
# Chains leave the spread between teachers, which dominates it, as it is, but not the cost: a
# unit's cost is the one measured at the run's chains where recorded, else scaled by them
# (`scaled`)
NOT_TRAIN = ("steps", "converge_tol", "restarts")
# fields added since runs recorded their designs, at the value they had before: left out of a
# design there, so a run recorded before them still sizes a run of its design (a run with
# depths of each arm's own, or with the control, is another design)
SINCE = {"arm_depths": [], "control": False}

# the demo's run from a fresh clone (docs/results/degree.md, "Seed 000 at equal counts", commit
# 057573a): the matched design, 6 teachers of 1 seed (Yuen's t, df 3), m_2 / m_4 the widest
# decisive interval, 0.746 [0.505, 1.1]; its spreads.json as the report recorded it
DEMO_SPREADS: dict[str, Any] = {
    "widest": 0.3896431354734754,
    "units": 6,
    "teachers": 6,
    "df": 3.0,
    "level": 0.95,
    "core_seconds_per_unit": 93.35960368083313,
    "restarts": 2,
    "source": "the demo's recorded run (docs/results/degree.md, 2026-11-29, commit 057573a)",
}

# Runs of the demo's teachers recorded at an iteration count of their own, by --steps. 2,048: the
# stored 10-teacher run (docs/results/degree.md, "The demo's design sized to +-10%", fitted at
# fdb20c6), read by the matched estimator at 2026-11-29's sizing rule (the widest of m_2 / m_4
# and m(d=2): m(d=2) 0.904 [0.779, 1.05], Yuen's t with df 5). Its arms ran at depths 1, 2, 4, 8
# (the matched design's are the demo's), so its cost is not a matched unit's: that is measured
# by chains (its `cost_by_chains`), on 2 AVX-512 cores: 2 chains by 2 teachers fitted alone, 4 by
# the first 20 teachers of seed 000's confirmatory run (docs/results/degree.md, 2026-11-29).
RECORDED_SPREADS: dict[int, dict[str, Any]] = {
    2048: {
        "widest": 0.14861136105630823,
        "units": 10,
        "teachers": 10,
        "df": 5.0,
        "level": 0.95,
        "core_seconds_per_unit": 118.6625468759994,
        "restarts": 2,
        "cost_by_chains": {"2": 118.6625468759994, "4": 365.37862941165},
        "source": "the demo's teachers at 2,048 iterations (docs/results/degree.md, 2026-11-28, "
        "the 10-teacher run read by the matched estimator)",
    },
}


def design(cfg: DegreeSweepConfig) -> dict[str, Any]:
    """What a run's spreads depend on: its config less its size and its reading, and less the
    fields added since at their old value (`SINCE`)."""
    from blocklab.formatting import config_json

    out = {k: v for k, v in config_json(cfg).items() if k not in NOT_DESIGN}
    out = {k: v for k, v in out.items() if k not in SINCE or v != SINCE[k]}
    out["train"] = {k: v for k, v in out["train"].items() if k not in NOT_TRAIN}
    return json.loads(json.dumps(out, sort_keys=True, default=str))


def record(out_dir: str | Path, cfg: DegreeSweepConfig, pilot, source: str) -> None:
    """Write what sizing reads of this run (`pilot`: a `degree_sweep.analysis.pilot.Pilot`) into its
    directory."""

    def number(x: float) -> float | None:
        return x if math.isfinite(x) else None

    entry = {
        "design": design(cfg),
        "widest": number(pilot.widest),
        "units": pilot.units,
        "teachers": cfg.teachers,
        "df": number(pilot.df),
        "level": pilot.level,
        "core_seconds_per_unit": number(pilot.core_seconds_per_unit),
        "restarts": cfg.train.restarts,
        "source": source,
    }
    (Path(out_dir) / SPREADS_FILE).write_text(json.dumps(entry, indent=2) + "\n")


def measured(cfg: DegreeSweepConfig, out_dir: str | Path) -> dict[str, Any]:
    """The recorded spreads a run of `cfg`'s design is sized by: --out's run, else the demo's
    teachers' at the run's iterations, else the demo's; its cost per unit `scaled` to its
    chains."""
    path = Path(out_dir) / SPREADS_FILE
    if path.is_file():
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            entry = {}
        if _as_now(entry.get("design")) == design(cfg):
            return scaled(entry, cfg)
    if design(cfg) == design(DegreeSweepConfig.demo()):
        return scaled(RECORDED_SPREADS.get(cfg.train.steps, DEMO_SPREADS), cfg)
    raise UserError(
        f"--target-resolution sizes a run from a finished run of its design: {out_dir} holds "
        "none and the design is not the demo's; run it once at a size of its own into that "
        "--out, then add --target-resolution"
    )


def _as_now(recorded: Any) -> Any:
    """A recorded design less the training fields left out of designs since it was written (a
    store of 2026-11-28 holds its chains in its design)."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("train"), dict):
        return recorded
    train = {k: v for k, v in recorded["train"].items() if k not in NOT_TRAIN}
    return recorded | {"train": train}


def scaled(entry: dict[str, Any], cfg: DegreeSweepConfig) -> dict[str, Any]:
    """`entry` with its cost per unit at `cfg`'s chains: measured at them (`cost_by_chains`),
    else scaled from its own in proportion (an entry that records no chains: as is)."""
    chains, cost = entry.get("restarts"), entry.get("core_seconds_per_unit")
    now = cfg.train.restarts
    measured_at = (entry.get("cost_by_chains") or {}).get(str(now))
    if measured_at is not None:
        return entry | {"core_seconds_per_unit": measured_at, "restarts": now}
    if not chains or cost is None or chains == now:
        return entry
    return entry | {
        "core_seconds_per_unit": cost * now / chains,
        "source": f"{entry['source']}; its cost scaled from {chains} chains to {now}",
    }


@dataclass(frozen=True)
class Spreads:
    """What sizing reads of a finished run: its widest decisive interval (`Pilot.widest`, over
    every count the run reports), the units and t it was read with, the cost of a unit, and
    where the run is recorded."""

    widest: float
    units: int
    df: float
    level: float
    core_seconds_per_unit: float
    source: str

    @classmethod
    def recorded(cls, entry: dict[str, Any]) -> Spreads:
        """From a run's record (`measured`): null is NaN, or inf for df."""

        def number(key: str, missing: float) -> float:
            value = entry.get(key)
            return missing if value is None else float(value)

        return cls(
            number("widest", math.nan), int(entry["units"]), number("df", math.inf),
            number("level", 0.95), number("core_seconds_per_unit", math.nan),
            str(entry["source"]),
        )  # fmt: skip

    def units_for(self, target: float) -> int | None:
        """The power calculation (`sample_size.units_for`): the units a +-`target` interval on
        the widest decisive multiplier needs; None where none is bounded."""
        return units_for(self.widest, self.units, target, self.df, self.level)


@dataclass(frozen=True)
class RunSize:
    """A run sized to +-`target` (the half width of the multipliers' 95% intervals, as a share):
    its units as teachers x seeds, its fit time in core-seconds at the measured cost per unit,
    and on one GPU (estimated: `GPU_OVER_CORE`). `units` None: the spreads bound no decisive
    interval, and nothing can be sized from them."""

    target: float
    units: int | None
    teachers: int | None
    seeds: int
    core_seconds: float | None
    gpu_seconds: float | None
    spreads: Spreads
    trials: int | None = None  # units x arms: no more cores than trials can work at once

    def seconds(self, cores: int) -> float | None:
        """Wall seconds on `cores` CPU cores, a trial to a core."""
        return spread_out(self.core_seconds, min(cores, self.trials or cores), gpu=False)

    def units_interval(self) -> tuple[int, int] | None:
        """The units the target needs under the 95% interval of the spread it was sized from
        (`sample_size.units_interval`); None where that spread bounds none."""
        s = self.spreads
        return units_interval(s.widest, s.units, self.target, s.df, s.level)

    def json(self) -> dict[str, Any]:
        """The run size's keys of the plan's JSON (`--plan --json`): the units, teachers and
        seeds it asks for, with the units' interval, and its cost at the recorded cost of a
        unit."""
        between = self.units_interval()
        return {
            "target": self.target,
            "units": self.units,
            "units_low": between[0] if between else None,
            "units_high": between[1] if between else None,
            "teachers": self.teachers,
            "seeds": self.seeds,
            "core_seconds": self.core_seconds,
            "gpu_seconds": self.gpu_seconds,
        }


def size_for(spreads: Spreads, target: float, seeds: int, arms: int = 1) -> RunSize:
    """The run that reaches +-`target` by `spreads`' power calculation (`Pilot.units_for`):
    whole teachers of `seeds` seeds each, the teachers being the intervals' groups; a unit is a
    trial of each of the `arms`."""
    need = spreads.units_for(target)
    if need is None:
        return RunSize(target, None, None, seeds, None, None, spreads)
    teachers = max(2, math.ceil(need / seeds))  # a t over teachers needs two of them
    units = teachers * seeds
    total = units * spreads.core_seconds_per_unit
    total = total if math.isfinite(total) else None  # no cost per unit measured
    return RunSize(target, units, teachers, seeds, total, spread_out(total, 1, gpu=True), spreads,
                units * arms)  # fmt: skip


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else minutes(seconds)


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


def interval_words(plan: RunSize) -> str:
    """The units `plan` needs with the interval its spread's own uncertainty gives them
    (`RunSize.units_interval`), and how far a pilot of that size would narrow it."""
    s = plan.spreads
    between = plan.units_interval()
    if between is None:
        why = "a bootstrap's spread" if math.isinf(s.df) else "no bounded interval"
        return f"{plan.units} units (no interval on them: {why})"
    low, high = between
    pilot = variance_factor(max(1, plan.units - 1))
    return (
        f"{plan.units} units ({low}-{high} at 95%, from {s.units} units: their spread's own "
        f"95% interval at df {s.df:g} spans a factor of {variance_factor(s.df):.0f}; a pilot "
        f"of {plan.units} units narrows that to a factor of {pilot:.1f})"
    )


def plan_lines(plan: RunSize, cfg=None, words: list[str] | None = None, priced=None) -> list[str]:
    """What a run sized to +-R is, what it was sized from, and what it costs here and elsewhere,
    each with its command; its cost `priced`'s (`engine.pricing.Plan`, the trials against the
    store) where given, else the recorded cost of a unit's."""
    s = plan.spreads
    read = f"t with df {s.df:g}" if math.isfinite(s.df) else "bootstrap"
    widest = f"+-{math.expm1(s.widest):.1%}" if math.isfinite(s.widest) else "unbounded"
    lines = [
        f"sized to +-{plan.target:.0%}: {interval_words(plan)}, {plan.teachers} "
        f"teachers x {plan.seeds} seed{'s' if plan.seeds > 1 else ''}, by the power calculation "
        f"on {s.source} (its widest decisive interval {widest} at {s.units} units, {read})"
    ]
    if cfg is not None and cfg.teachers != plan.teachers:
        lines.append(f"this run fits {cfg.teachers} teachers (given, or already in --out)")
    if priced is not None:
        plan = replace(plan, core_seconds=priced.core_seconds, gpu_seconds=priced.gpu_seconds)
        basis = "as the plan below prices them"
    else:
        basis = f"at {s.core_seconds_per_unit:.0f} core-seconds a unit (the cost recorded with "
        basis += "those spreads)"
    if plan.core_seconds is None:
        lines.append("its time: not estimated (see the plan's cost)")
        return lines
    command = plan_command(words or ["blocklab", "degree-sweep"], plan)
    here = os.cpu_count() or 1
    lines.append(f"fits: {plan.core_seconds / 3600:.1f} core-hours {basis}:")
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
    entry = measured(cfg, out_dir)
    spreads = Spreads.recorded(entry)
    plan = size_for(spreads, cfg.target_resolution, cfg.seeds, len(cfg.arms()))
    if plan.teachers is None:
        raise UserError(
            f"--target-resolution: {spreads.source} bounds no decisive multiplier interval, "
            "so nothing sizes a run from it; run more teachers first (--teachers)"
        )
    if not pinned:
        cfg = replace(cfg, teachers=max(plan.teachers, int(entry.get("teachers") or 0)))
    return cfg, plan

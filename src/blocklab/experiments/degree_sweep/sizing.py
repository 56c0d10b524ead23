"""What a degree run sized to a resolution (`--target-resolution R`) is sized from: the spreads
of a finished run of the same design, the run in --out where its report recorded them
(`SPREADS_FILE`, written by every degree report), else, where the design is the demo's, the
recorded run of the demo's teachers at the run's own iteration count (`RECORDED_SPREADS`), or the
demo's (`DEMO_SPREADS`) where none was recorded at it. The report module sizes the run from them
(`size` there: the power calculation of `degree_sweep.analysis.pilot`); `size` and `plan_lines`
here are the manifest's sizing hook (`experiments.Sizing`), which reaches it.

The size is fixed before any fit of the run it sizes, and a run grows but never shrinks: the
teachers already fitted in --out stay in it. Sized from a run in the same store, the finished
units are the first stage of an internal pilot (Wittes and Brittain 1990); the coverage of the
intervals under that rule is measured by `degree_sweep.analysis.coverage.simulate_sized`
(`benchmarks/coverage.py --sized`).
"""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

from blocklab.errors import UserError
from blocklab.experiments.degree_sweep.config import DegreeSweepConfig

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


def size(cfg: DegreeSweepConfig, out_dir: str | Path, pinned: bool = False):
    """The sizing hook's `size`: (config, plan), `cfg` with the teachers its `target_resolution`
    needs by the power calculation on the spreads `measured` reads (the report's `size`)."""
    return _report().size(cfg, out_dir, pinned)


def plan_lines(plan, cfg: DegreeSweepConfig, words: list[str]) -> list[str]:
    """The sizing hook's `plan_lines`: the plan, its cost and its commands (the report's)."""
    return _report().plan_lines(plan, cfg, words)


def _report() -> ModuleType:
    # The plan is the analysis's power calculation on these spreads and its words are the
    # report's, both in layers above this one, which no import here may name (a function-local
    # one included): the hook reaches them as the run reaches the report, by the module's name
    # in its home (`<home>.report`), so the command line and the API ask the manifest and never
    # the report for a plan.
    return importlib.import_module(f"{__package__}.report")

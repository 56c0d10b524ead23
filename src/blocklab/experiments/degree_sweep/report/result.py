"""The degree sweep's analysis of a run's rows (`analyze`): the tables (`tables.tabulate`), the
capacity analysis of each rounding (`degree_sweep.analysis.capacity`), the pilot's spreads and
seed 000's predictions worded, gathered in one `Result` that the report words."""

import math
from dataclasses import dataclass, field
from typing import Any

from blocklab.engine.progress import current
from blocklab.experiments.degree_sweep.analysis.arms import compare
from blocklab.experiments.degree_sweep.analysis.capacity import (
    PREDICTED_EFFECT,
    CapacityResult,
    Invocation,
)
from blocklab.experiments.degree_sweep.analysis.capacity import analyze as analyze_capacity
from blocklab.experiments.degree_sweep.analysis.claims import Claim
from blocklab.experiments.degree_sweep.analysis.claims import claims as word_claims
from blocklab.experiments.degree_sweep.analysis.pilot import Pilot
from blocklab.experiments.degree_sweep.analysis.pilot import pilot as measure_spreads
from blocklab.experiments.degree_sweep.experiment import EXPERIMENT, DegreeSweep
from blocklab.experiments.degree_sweep.report.claims import DECIDING
from blocklab.experiments.degree_sweep.report.pilot import spreads_of
from blocklab.experiments.degree_sweep.report.tables import Tables, tabulate
from blocklab.experiments.degree_sweep.sizing import RunSize, size_for


@dataclass
class Result:
    rows: list[dict[str, Any]]
    lr_choice: dict[str, dict[str, Any]]  # "budget/arm" -> the rate chosen and those tried
    failed: list[dict[str, Any]]
    # per (task, budget, arm) the test metric over seeds; per (task, budget) the paired tests
    tables: Tables
    capacity: CapacityResult  # design checks, scaling fits, efficiency and the verdict
    pilot: Pilot  # the spreads a larger run is sized by
    # second-order fits: each cell's first trial refitted by the other optimizer
    referee: list[dict[str, Any]] = field(default_factory=list)
    # arm -> the rank of its input Jacobian measured before the fits (`preflight.input_ranks`)
    input_rank: dict[str, dict[str, Any]] = field(default_factory=dict)
    # arm -> its exact per-parameter measures at the run's width (`exact`)
    exact: dict[str, dict[str, Any]] = field(default_factory=dict)
    # with roundings K: the capacity analysis of each other rounding, 1 to K-1 (the run's own is
    # `capacity`)
    roundings: tuple[CapacityResult, ...] = ()
    # seed 000's predictions worded at `resolution` (`degree_sweep.analysis.claims`), and where one
    # is undecided the run that would decide it at +-3%, from this run's spreads
    claims: list[Claim] = field(default_factory=list)
    resolution: float = PREDICTED_EFFECT
    deciding: RunSize | None = None


def _capacity(cfg, trials, rows, verdicts, command, on_draw=None, referee=(), price=None):
    """The capacity analysis (`degree_sweep.analysis.capacity`) of `rows`, one rounding's;
    `price` prices its next command (`Invocation.price`)."""
    return analyze_capacity(
        rows,
        trials.lr_choice,
        list(cfg.budgets) or sorted({int(r["budget"]) for r in rows}),
        tol=cfg.plateau_tol,
        n_boot=cfg.n_boot,
        paired=verdicts,
        width=cfg.shape.width if cfg.mode == "width" else None,
        converge_tol=cfg.train.converge_tol,
        referee=referee,
        input_rank=getattr(trials, "input_rank", None),
        run=Invocation(
            cfg, command, EXPERIMENT, DegreeSweep.no_flags, DegreeSweep.defaults, price
        ),
        on_draw=on_draw,
        count=cfg.count,
    )


def analyze(cfg, trials, command: str | None = None, price=None) -> Result:
    """The summaries over seeds, the paired tests, the capacity analysis
    (`degree_sweep.analysis.capacity`) and the pilot's spreads of the sweep's rows; with
    roundings, the capacity analysis of each other rounding's rows too. `command`: the run's own as
    `run.json` recorded it, which a next command repeats (None: not known); `price`: what prices
    that next command (`degree_sweep.pricing.pricer`; None: not priced)."""
    by_rounding: dict[int, list] = {}
    for r in trials.rows:  # rows stored before roundings existed are the run's own
        by_rounding.setdefault(int(r.get("rounding") or 0), []).append(r)
    rows = by_rounding.pop(0, [])
    tables = tabulate(rows, alpha=cfg.alpha)
    refitted = getattr(trials, "referee", [])  # trials built before referees have none
    draw = current().counter("analysis: {} intervals", "fit")  # the command's display
    cap = _capacity(cfg, trials, rows, tables.verdicts, command, draw, refitted, price)
    others = tuple(
        _capacity(cfg, trials, got, compare(got, cfg.alpha), command)
        for _, got in sorted(by_rounding.items())
    )
    seen = getattr(trials, "input_rank", {})
    d = cap.decision  # sized by the widest decisive interval over every count
    widths = [c.decision.widest for c in cap.counts.values() if not math.isnan(c.decision.widest)]
    spreads = measure_spreads(rows, cap.model, max(widths, default=math.nan), d.df, d.level)
    r = cfg.target_resolution or PREDICTED_EFFECT
    worded = word_claims(cap, r, others)
    deciding = None
    if any(c.word == "undecided" for c in worded):
        deciding = size_for(spreads_of(spreads, "this run"), DECIDING, cfg.seeds, len(cfg.arms()))
    return Result(
        rows, trials.lr_choice, trials.failed, tables, cap, spreads, refitted, seen,
        getattr(trials, "exact", {}), others, worded, r, deciding,
    )  # fmt: skip

"""The design checks that gate the degree sweep's capacity verdict (`capacity`), and the
per-budget statistics they read.

A verdict is only stated when the run can support one. Second-order fits (`engine.converge`) are
judged by their certificates, Adam runs by their plateau and their learning-rate search. The
checks, in order:
- `budget_span`: at least MIN_BUDGETS budgets spanning at least MIN_SPAN x (a scaling curve of
  3 parameters needs them);
- `plateau` (Adam): at least PLATEAU_SHARE of the trials plateaued: under the wsd schedule, the
  run of half the steps (branched off the stable phase and annealed, `train.half_run`) ends less
  than `plateau_tol` above the full run's validation loss, so doubling the steps gained less than
  that; under cosine, the smoothed validation loss fell by less than `plateau_tol` of its final
  value over the last quarter of training (which the annealing also lowers);
- `converged` (fits): at least CONVERGED_SHARE of the trials carry the certificate: doubling the
  iterations lowered the training loss by less than `converge_tol` of it;
- `monotone_in_budget`: for every arm, the mean test loss does not rise with budget beyond the
  intervals (at no step is the larger budget's 95% interval entirely above the smaller one's);
  a larger network that fits worse is undertrained, not less expressive;
- `generalization` (fits): in every (arm, budget) cell the mean test loss is at most
  GENERALIZATION_RATIO times the mean training loss, so the training loss a fit reaches reads as
  approximation error, not as a small training set memorized;
- `lr_not_at_edge` (Adam): no chosen learning rate lies at an edge of the rates tried (the sweep
  extends the grid past an edge before it gives up);
- `width_matched`: in width mode, no arm's width moved more than `width_slack` from the nominal
  one;
- `replicates`: every cell holds at least MIN_REPLICATES finished (teacher, seed) pairs. The
  efficiency intervals are percentile bootstraps over those pairs, and the paired tests and the
  monotone check read t intervals over them: with 2 pairs a bootstrap has 3 distinct resamples,
  so its "95% interval" is the range of 3 fits, and a t interval is 12.7 standard errors wide.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from blocklab.analysis.stats import interval
from blocklab.specs import SECOND_ORDER, TrainConfig

PLATEAU_SHARE = 0.9
CONVERGED_SHARE = 0.9
GENERALIZATION_RATIO = 1.2
MIN_BUDGETS, MIN_SPAN = 4, 8.0
# in width mode the solver may move a width to meet the budget; past one unit the arm is a
# different architecture (measured: d=3 at width 6 fits a teacher 1.7-2.3x worse than at 8-9),
# and so is one unit that is more than WIDTH_SHARE of the width (measured at width 3: d=3 at
# width 4 fit 3x better than every width-3 cell at any budget, and alone decided a verdict)
WIDTH_SLACK, WIDTH_SHARE = 1, 0.2


def width_slack(width: int) -> int:
    """How far a width may move from the nominal `width`: WIDTH_SLACK units, none where that
    is more than WIDTH_SHARE of it."""
    return WIDTH_SLACK if WIDTH_SHARE * width >= WIDTH_SLACK else 0


# 3 pairs: 10 distinct bootstrap resamples, t intervals 4.3 standard errors wide (with 2: 3
# resamples, 12.7 standard errors)
MIN_REPLICATES = 3


@dataclass(frozen=True)
class Check:  # a subclass holds what the check measured; `reports/capacity.py` words it
    name: str
    passed: bool


@dataclass(frozen=True)
class BudgetSpan(Check):
    budgets: int  # distinct budgets
    span: float  # the largest budget over the smallest


@dataclass(frozen=True)
class Plateau(Check):
    share: float  # of the trials, those that plateaued
    trials: int
    rule: str  # the criterion the rows were read by (`plateau_rule`)
    tol: float
    least: tuple[tuple[str, int, float], ...]  # (arm, budget, share plateaued), lowest first


@dataclass(frozen=True)
class Converged(Check):
    share: float  # of the trials, those whose certificate holds
    trials: int
    tol: float  # the certificate's: doubling the iterations gained less than this share
    least: tuple[tuple[str, int, float], ...]  # (arm, budget, share converged), lowest first


@dataclass(frozen=True)
class Monotone(Check):
    # (arm, budget, mean loss, the next budget, its mean loss): the loss rose beyond the intervals
    rises: tuple[tuple[str, int, float, int, float], ...]


@dataclass(frozen=True)
class Generalization(Check):
    worst: float  # the largest mean test / mean train loss of a cell; NaN: no cell has both
    failing: tuple[tuple[str, int, float], ...]  # (arm, budget, ratio) above the limit, worst first


@dataclass(frozen=True)
class LrEdge(Check):
    edges: tuple[tuple[str, float, tuple[float, ...]], ...]  # ("budget/arm", lr chosen, tried)


@dataclass(frozen=True)
class WidthMatch(Check):
    width: int | None  # the nominal width; None in depth mode, which solves it per arm
    moved: tuple[tuple[str, int, int], ...]  # (arm, budget, width) more than WIDTH_SLACK off


@dataclass(frozen=True)
class Replicates(Check):
    least: int  # the fewest finished (teacher, seed) pairs of a cell
    cells: tuple[tuple[str, int, int], ...]  # (arm, budget, pairs) below MIN_REPLICATES


def loss(r: dict[str, Any]) -> float | None:
    """A finished trial's test loss; None for a diverged one."""
    return r.get("test_loss") if r["status"] == "done" else None


def plateau_rule(rows) -> str:
    """The plateau criterion the rows were read by (`monitor.TrialMonitor.plateau`): "wsd", the
    run of half the steps against the full run, or "cosine", the fall over the last quarter."""
    return "wsd" if rows and all(r.get("schedule") == "wsd" for r in rows) else "cosine"


def plateaued(r: dict[str, Any], tol: float) -> bool:
    value = r.get("plateau_improvement")
    return r["status"] == "done" and value is not None and value < tol


def second_order(rows) -> bool:
    """The rows are second-order fits (`engine.converge`), which carry convergence certificates
    and search no learning rate."""
    return bool(rows) and all(r.get("optimizer") in SECOND_ORDER for r in rows)


def _mean(values) -> float:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else math.nan


def _fit_stats(trials) -> dict[str, float]:
    """A cell's second-order fields (NaN where its trials have none, as Adam trials do)."""
    certified = [r["converged"] for r in trials if r.get("converged") is not None]
    medians = [
        float(np.median(done))
        for r in trials
        if (done := [v for v in r.get("restart_train_losses") or [] if v is not None])
    ]
    return {
        "converged_fraction": sum(certified) / len(trials) if certified else math.nan,
        "train_mean": _mean(r.get("train_loss") for r in trials),
        "restart_median_mean": _mean(medians),
        "restart_spread": _mean(r.get("restart_spread") for r in trials),
    }


def budget_stats(rows, tol: float, level: float = 0.95) -> dict[str, dict[int, dict[str, Any]]]:
    """arm -> budget -> test-loss statistics over (teacher, seed): mean, std, interval, the share
    plateaued, and with several teachers the spread within a teacher (the mean over teachers of
    the seeds' std) and between teachers (the std of the teachers' means). Second-order fits add
    the share converged, the mean training loss of the best restarts, the mean of each trial's
    median restart and the mean restart spread."""
    groups: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        groups[r["arm"]][int(r["budget"])].append(r)
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for arm, by_budget in groups.items():
        out[arm] = {}
        for b, trials in sorted(by_budget.items()):
            per_teacher = defaultdict(list)
            for r in trials:
                if loss(r) is not None:
                    per_teacher[r.get("teacher", 0)].append(loss(r))
            losses = [v for values in per_teacher.values() for v in values]
            mean, std, lo, hi, n = interval(losses, level)
            within = [np.std(v, ddof=1) for v in per_teacher.values() if len(v) > 1]
            means = [np.mean(v) for v in per_teacher.values()]
            out[arm][b] = {
                "mean": mean,
                "std": std,
                "ci_low": lo,
                "ci_high": hi,
                "n": n,
                "plateaued_fraction": sum(plateaued(r, tol) for r in trials) / len(trials),
                "within_teacher_std": float(np.mean(within)) if within else math.nan,
                "between_teacher_std": float(np.std(means, ddof=1)) if len(means) > 1 else math.nan,
                "teachers": len(per_teacher),
                "block_params": int(trials[0]["block_params"]),
                **_fit_stats(trials),
            }
    return out


def width_check(rows, width: int | None) -> WidthMatch:
    """Width mode compares degrees at one width; `width` None (depth mode) solves it by design."""
    moved = sorted(
        {
            (r["arm"], int(r["budget"]), int(r["width"]))
            for r in rows
            if width is not None
            and r.get("width") is not None
            and abs(int(r["width"]) - width) > width_slack(width)
        },
        key=lambda t: (t[1], t[0]),
    )
    return WidthMatch(name="width_matched", passed=not moved, width=width, moved=tuple(moved))


def _least(stats, key: str) -> tuple[tuple[str, int, float], ...]:
    """The three cells where the share `key` is lowest, of those below 1."""
    cells = [(a, b, s[key]) for a, by_b in stats.items() for b, s in by_b.items() if s[key] < 1]
    return tuple(sorted(cells, key=lambda t: t[2])[:3])


def _budget_span(budgets) -> BudgetSpan:
    span = max(budgets) / min(budgets) if budgets else 0.0
    n = len(set(budgets))
    ok = n >= MIN_BUDGETS and span >= MIN_SPAN
    return BudgetSpan(name="budget_span", passed=ok, budgets=n, span=span)


def _plateau(rows, stats, tol: float) -> Plateau:
    flat = [plateaued(r, tol) for r in rows]
    share = sum(flat) / len(flat) if flat else 0.0
    return Plateau(
        name="plateau",
        passed=share >= PLATEAU_SHARE,
        share=share,
        trials=len(flat),
        rule=plateau_rule(rows),
        tol=tol,
        least=_least(stats, "plateaued_fraction"),
    )


def _converged(rows, stats, tol: float) -> Converged:
    share = sum(r.get("converged") is True for r in rows) / len(rows) if rows else 0.0
    return Converged(
        name="converged",
        passed=share >= CONVERGED_SHARE,
        share=share,
        trials=len(rows),
        tol=tol,
        least=_least(stats, "converged_fraction"),
    )


def _monotone(stats) -> Monotone:
    rises = []
    for arm, by_b in stats.items():
        seq = [(b, s) for b, s in sorted(by_b.items()) if math.isfinite(s["mean"])]
        for (b0, s0), (b1, s1) in zip(seq, seq[1:], strict=False):
            lo1 = s1["ci_low"] if math.isfinite(s1["ci_low"]) else s1["mean"]
            hi0 = s0["ci_high"] if math.isfinite(s0["ci_high"]) else s0["mean"]
            if lo1 > hi0:
                rises.append((arm, b0, s0["mean"], b1, s1["mean"]))
    return Monotone(name="monotone_in_budget", passed=not rises, rises=tuple(rises))


def _generalization(stats) -> Generalization:
    # a cell with no finished trial has no ratio: the converged check counts it already
    ratios = [
        (a, b, s["mean"] / s["train_mean"] if s["train_mean"] > 0 else math.inf)
        for a, by_b in stats.items()
        for b, s in by_b.items()
        if math.isfinite(s["mean"]) and math.isfinite(s["train_mean"])
    ]
    failing = sorted((c for c in ratios if c[2] > GENERALIZATION_RATIO), key=lambda c: -c[2])
    return Generalization(
        name="generalization",
        passed=not failing,
        worst=max((c[2] for c in ratios), default=math.nan),
        failing=tuple(failing),
    )


def _replicates(stats) -> Replicates:
    counts = [(a, b, int(s["n"])) for a, by_b in stats.items() for b, s in by_b.items()]
    short = tuple(sorted((c for c in counts if c[2] < MIN_REPLICATES), key=lambda c: c[2]))
    least = min((c[2] for c in counts), default=0)
    return Replicates(
        name="replicates", passed=bool(counts) and not short, least=least, cells=short
    )


def _lr_edge(lr_choice) -> LrEdge:
    edges = tuple(
        (str(key), c["lr"], tuple(c["tried"])) for key, c in lr_choice.items() if c.get("at_edge")
    )
    return LrEdge(name="lr_not_at_edge", passed=not edges, edges=edges)


def design_checks(
    rows,
    lr_choice,
    budgets,
    tol: float,
    stats=None,
    width: int | None = None,
    *,
    converge_tol: float = TrainConfig.converge_tol,
) -> list[Check]:
    """The checks in the module's order: second-order fits get `converged` and `generalization`,
    Adam runs `plateau` (read at `tol`) and `lr_not_at_edge`. `converge_tol`: the fits'
    certificate tolerance (`TrainConfig.converge_tol`), which their rows were judged by."""
    stats = stats if stats is not None else budget_stats(rows, tol)
    if second_order(rows):
        middle = [_converged(rows, stats, converge_tol), _monotone(stats), _generalization(stats)]
    else:
        middle = [_plateau(rows, stats, tol), _monotone(stats), _lr_edge(lr_choice)]
    return [_budget_span(budgets), *middle, width_check(rows, width), _replicates(stats)]

"""Capacity analysis of a degree sweep: design checks that gate the verdict, per-budget statistics,
scaling fits with their parameter-efficiency multipliers beside seed 000's prediction, and the
verdict itself.

Everything reads the test loss (MSE for regression, cross-entropy for classification), the
quantity a network's capacity bounds from below; accuracy stays in the summaries table.

A verdict is only stated when the run can support one. The checks, in order:
- `budget_span`: at least MIN_BUDGETS budgets spanning at least MIN_SPAN x (a scaling curve of
  3 parameters needs them);
- `plateau`: at least PLATEAU_SHARE of the trials plateaued: under the wsd schedule, the run of
  half the steps (branched off the stable phase and annealed, `train.half_run`) ends less than
  `plateau_tol` above the full run's validation loss, so doubling the steps gained less than
  that; under cosine, the smoothed validation loss fell by less than `plateau_tol` of its final
  value over the last quarter of training (which the annealing also lowers);
- `monotone_in_budget`: for every arm, the mean test loss does not rise with budget beyond the
  intervals (at no step is the larger budget's 95% interval entirely above the smaller one's);
  a larger network that fits worse is undertrained, not less expressive;
- `lr_not_at_edge`: no chosen learning rate lies at an edge of the rates tried (the sweep extends
  the grid past an edge before it gives up).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from blocklab.analysis import scaling
from blocklab.analysis.stats import Verdict, interval, layer_degrees
from blocklab.theory import h

PLATEAU_SHARE = 0.9
MIN_BUDGETS, MIN_SPAN = 4, 8.0
# in width mode the solver may move a width to meet the budget within 2%; past one unit the arm
# is a different architecture (measured: d=3 at width 6 fits a teacher 1.7-2.3x worse than at 8-9)
WIDTH_SLACK = 1
REFERENCE = "d=3"
PREDICTED_EFFECT = h(3) / h(2) - 1  # what the theory says separates d = 3 from d = 2 and 4


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
class Monotone(Check):
    # (arm, budget, mean loss, the next budget, its mean loss): the loss rose beyond the intervals
    rises: tuple[tuple[str, int, float, int, float], ...]


@dataclass(frozen=True)
class LrEdge(Check):
    edges: tuple[tuple[str, float, tuple[float, ...]], ...]  # ("budget/arm", lr chosen, tried)


@dataclass(frozen=True)
class WidthMatch(Check):
    width: int | None  # the nominal width; None in depth mode, which solves it per arm
    moved: tuple[tuple[str, int, int], ...]  # (arm, budget, width) more than WIDTH_SLACK off


def _loss(r: dict[str, Any]) -> float | None:
    return r.get("test_loss") if r["status"] == "done" else None


def plateau_rule(rows) -> str:
    """The plateau criterion the rows were read by (`monitor.TrialMonitor.plateau`): "wsd", the
    run of half the steps against the full run, or "cosine", the fall over the last quarter."""
    return "wsd" if rows and all(r.get("schedule") == "wsd" for r in rows) else "cosine"


def plateaued(r: dict[str, Any], tol: float) -> bool:
    value = r.get("plateau_improvement")
    return r["status"] == "done" and value is not None and value < tol


def budget_stats(rows, tol: float, level: float = 0.95) -> dict[str, dict[int, dict[str, Any]]]:
    """arm -> budget -> test-loss statistics over (teacher, seed): mean, std, interval, the share
    plateaued, and with several teachers the spread within a teacher (the mean over teachers of
    the seeds' std) and between teachers (the std of the teachers' means)."""
    groups: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        groups[r["arm"]][int(r["budget"])].append(r)
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for arm, by_budget in groups.items():
        out[arm] = {}
        for b, trials in sorted(by_budget.items()):
            per_teacher = defaultdict(list)
            for r in trials:
                if _loss(r) is not None:
                    per_teacher[r.get("teacher", 0)].append(_loss(r))
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
            and abs(int(r["width"]) - width) > WIDTH_SLACK
        },
        key=lambda t: (t[1], t[0]),
    )
    return WidthMatch(name="width_matched", passed=not moved, width=width, moved=tuple(moved))


def design_checks(
    rows, lr_choice, budgets, tol: float, stats=None, width: int | None = None
) -> list[Check]:
    stats = stats if stats is not None else budget_stats(rows, tol)
    span = max(budgets) / min(budgets) if budgets else 0.0
    n_budgets = len(set(budgets))
    ok = n_budgets >= MIN_BUDGETS and span >= MIN_SPAN
    checks: list[Check] = [BudgetSpan(name="budget_span", passed=ok, budgets=n_budgets, span=span)]

    flat = [plateaued(r, tol) for r in rows]
    share = sum(flat) / len(flat) if flat else 0.0
    least = sorted(
        (
            (a, b, s["plateaued_fraction"])
            for a, by_b in stats.items()
            for b, s in by_b.items()
            if s["plateaued_fraction"] < 1
        ),
        key=lambda t: t[2],
    )[:3]
    checks.append(
        Plateau(
            name="plateau",
            passed=share >= PLATEAU_SHARE,
            share=share,
            trials=len(flat),
            rule=plateau_rule(rows),
            tol=tol,
            least=tuple(least),
        )
    )

    rises = []
    for arm, by_b in stats.items():
        seq = [(b, s) for b, s in sorted(by_b.items()) if math.isfinite(s["mean"])]
        for (b0, s0), (b1, s1) in zip(seq, seq[1:], strict=False):
            lo1 = s1["ci_low"] if math.isfinite(s1["ci_low"]) else s1["mean"]
            hi0 = s0["ci_high"] if math.isfinite(s0["ci_high"]) else s0["mean"]
            if lo1 > hi0:
                rises.append((arm, b0, s0["mean"], b1, s1["mean"]))
    checks.append(Monotone(name="monotone_in_budget", passed=not rises, rises=tuple(rises)))

    edges = tuple(
        (str(key), c["lr"], tuple(c["tried"])) for key, c in lr_choice.items() if c.get("at_edge")
    )
    checks.append(LrEdge(name="lr_not_at_edge", passed=not edges, edges=edges))
    checks.append(width_check(rows, width))
    return checks


def predicted_multiplier(arm: str, degree: float | None) -> float | None:
    """Seed 000's prediction of an arm's parameter multiplier against d = 3: equal degree proxy
    (eq. 17) means B_X h(X) = B_3 h(3), so B_X / B_3 = h(3) / h(X). None for non-polynomial arms."""
    if degree is None:
        return None
    return h(3) / h(layer_degrees(arm, degree))


def scaling_fits(rows, n_boot: int, level: float = 0.95) -> scaling.ScalingResult:
    obs = [
        scaling.Observation(
            r["arm"],
            int(r["budget"]),
            int(r["block_params"]),
            (int(r.get("teacher", 0)), int(r["seed"])),
            _loss(r) if _loss(r) is not None else math.nan,
        )
        for r in rows
    ]
    return scaling.analyze(obs, reference=REFERENCE, n_boot=n_boot, level=level)


class Side(Enum):  # where an arm's multiplier interval lies against 1
    MORE = "more"  # above 1: the arm needs more parameters than the reference
    FEWER = "fewer"  # below 1
    SAME = "same"  # holds 1: not distinguishable
    UNDETERMINED = "undetermined"  # too many bootstrap fits failed for an interval


@dataclass(frozen=True)
class ArmEfficiency:  # an arm's multiplier, where it lies, and seed 000's prediction
    efficiency: scaling.Efficiency
    side: Side
    predicted: float | None  # None for a non-polynomial arm
    inside: bool | None  # the prediction lies in the interval; None without both


def efficiency_findings(
    fit: scaling.ScalingResult, degrees: dict[str, float | None]
) -> list[ArmEfficiency]:
    """Every arm but the reference: its multiplier, what its interval excludes, the prediction."""
    out = []
    for arm, e in fit.efficiency.items():
        if arm == fit.reference:
            continue
        pred = predicted_multiplier(arm, degrees.get(arm))
        if math.isnan(e.ci_low):
            side = Side.UNDETERMINED
        else:
            side = Side.MORE if e.ci_low > 1 else Side.FEWER if e.ci_high < 1 else Side.SAME
        inside = None
        if pred is not None and side is not Side.UNDETERMINED:
            inside = e.ci_low <= pred <= e.ci_high
        out.append(ArmEfficiency(efficiency=e, side=side, predicted=pred, inside=inside))
    return out


class Refusal(Enum):  # why the capacity verdict is not stated
    DESIGN_CHECK = "design_check"  # a design check failed (`CapacityVerdict.failed`)
    NO_REFERENCE_FIT = "no_reference_fit"  # the reference arm has no scaling fit


class Standing(Enum):  # where the reference stands among the arms' multiplier intervals
    OTHERS_BETTER = "others_better"  # some arm needs fewer parameters (`CapacityVerdict.better`)
    REFERENCE_BEST = "reference_best"  # every other arm needs more
    NONE_BETTER = "none_better"  # no arm needs fewer, not all need more


@dataclass(frozen=True)
class CapacityVerdict:  # the finding of a run that passed its design checks, or why none
    refused: Refusal | None
    reference: str
    failed: tuple[Check, ...] = ()  # the failed checks of a DESIGN_CHECK refusal
    standing: Standing | None = None
    better: tuple[str, ...] = ()  # arms whose interval lies below 1
    ref_params: float = math.nan  # P_ref, where the reference reaches target_loss
    target_loss: float = math.nan
    level: float = math.nan  # of the bootstrap intervals
    arms: tuple[ArmEfficiency, ...] = ()
    paired: tuple[Verdict, ...] = ()  # per budget, `stats.compare`


def verdict(checks: list[Check], fit: scaling.ScalingResult, degrees, paired) -> CapacityVerdict:
    """The finding, refused when a design check failed or the reference could not be fitted.
    `paired` are the per-budget verdicts of `stats.compare`."""
    failed = tuple(c for c in checks if not c.passed)
    if failed:
        return CapacityVerdict(refused=Refusal.DESIGN_CHECK, reference=REFERENCE, failed=failed)
    if fit.reference is None:
        return CapacityVerdict(refused=Refusal.NO_REFERENCE_FIT, reference=REFERENCE)
    ref = fit.efficiency[fit.reference]
    arms = efficiency_findings(fit, degrees)
    better = tuple(a.efficiency.arm for a in arms if a.side is Side.FEWER)
    if better:
        standing = Standing.OTHERS_BETTER
    elif arms and all(a.side is Side.MORE for a in arms):
        standing = Standing.REFERENCE_BEST
    else:
        standing = Standing.NONE_BETTER
    return CapacityVerdict(
        refused=None,
        reference=fit.reference,
        standing=standing,
        better=better,
        ref_params=ref.ref_params,
        target_loss=ref.target_loss,
        level=fit.level,
        arms=tuple(arms),
        paired=tuple(paired),
    )


@dataclass
class CapacityResult:
    budgets: list[int]
    checks: list[Check]
    stats: dict[str, dict[int, dict[str, Any]]]
    fit: scaling.ScalingResult
    verdict: CapacityVerdict
    degrees: dict[str, float | None]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def arms_json(self) -> dict[str, Any]:
        """The `arms` object of the JSON contract."""
        fits, eff = self.fit.fits, self.fit.efficiency
        out: dict[str, Any] = {}
        for arm, by_b in self.stats.items():
            keys = ("mean", "std", "ci_low", "ci_high", "plateaued_fraction")
            entry: dict[str, Any] = {
                "degree": self.degrees.get(arm),
                "budgets": {
                    str(b): {
                        **{k: s[k] for k in keys},
                        "n": s["n"],
                        "block_params": s["block_params"],
                        # the same count under the key the JSON contract names
                        "params": s["block_params"],
                        "within_teacher_std": s["within_teacher_std"],
                        "between_teacher_std": s["between_teacher_std"],
                    }
                    for b, s in by_b.items()
                },
                "fit": None,
                "efficiency_vs_d3": None,
            }
            if arm in fits:
                f = fits[arm]
                entry["fit"] = {
                    "L_inf": f.L_inf,
                    "a": f.a,
                    "alpha": f.alpha,
                    "ci": {k: list(v) for k, v in f.ci.items()},
                }
            if arm in eff:
                e = eff[arm]
                entry["efficiency_vs_d3"] = {
                    "multiplier": e.multiplier,
                    "ci_low": e.ci_low,
                    "ci_high": e.ci_high,
                    "predicted": predicted_multiplier(arm, self.degrees.get(arm)),
                    "extrapolated": e.extrapolated,
                    "infinite_share": e.infinite_share,
                }
            out[arm] = entry
        return out


def analyze(rows, lr_choice, budgets, *, tol: float, n_boot: int, paired, level=0.95, width=None):
    """`width`: the nominal width of a width-mode run (None in depth mode)."""
    degrees = {r["arm"]: r["degree"] for r in rows}
    stats = budget_stats(rows, tol, level)
    checks = design_checks(rows, lr_choice, budgets, tol, stats, width)
    fit = scaling_fits(rows, n_boot, level)
    return CapacityResult(
        budgets=sorted(budgets),
        checks=checks,
        stats=stats,
        fit=fit,
        verdict=verdict(checks, fit, degrees, paired),
        degrees=degrees,
    )

"""Capacity analysis of a degree sweep: design checks that gate the verdict and the per-budget
statistics they read (`design`), scaling fits with their parameter-efficiency multipliers beside
seed 000's prediction, the verdict itself, and for second-order fits the referee's summary.

Everything reads the test loss (MSE for regression, cross-entropy for classification), the
quantity a network's capacity bounds from below; accuracy stays in the summaries table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from blocklab.analysis import scaling
from blocklab.analysis.design import Check, budget_stats, design_checks, loss, second_order
from blocklab.analysis.design import plateau_rule as plateau_rule  # read here by sanford_match
from blocklab.analysis.design import plateaued as plateaued  # read here by sanford_match
from blocklab.analysis.stats import Verdict, layer_degrees
from blocklab.specs import TrainConfig
from blocklab.theory import h

REFERENCE = "d=3"
PREDICTED_EFFECT = h(3) / h(2) - 1  # what the theory says separates d = 3 from d = 2 and 4


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
            loss(r) if loss(r) is not None else math.nan,
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


@dataclass
class CapacityResult:
    budgets: list[int]
    checks: list[Check]
    stats: dict[str, dict[int, dict[str, Any]]]
    fit: scaling.ScalingResult
    verdict: CapacityVerdict
    degrees: dict[str, float | None]
    second_order: bool = False  # the rows are second-order fits (`design.second_order`)
    referee: RefereeSummary | None = None  # fits with referee rows (`referee_summary`)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def arms_json(self) -> dict[str, Any]:
        """The `arms` object of the JSON contract."""
        fits, eff = self.fit.fits, self.fit.efficiency
        out: dict[str, Any] = {}
        for arm, by_b in self.stats.items():
            keys = ("mean", "std", "ci_low", "ci_high", "plateaued_fraction", "converged_fraction")
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
                        "train_mean": s["train_mean"],
                        "restart_spread": s["restart_spread"],
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


def analyze(
    rows,
    lr_choice,
    budgets,
    *,
    tol: float,
    n_boot: int,
    paired,
    level=0.95,
    width=None,
    converge_tol: float = TrainConfig.converge_tol,
    referee=(),
):
    """`width`: the nominal width of a width-mode run (None in depth mode); `converge_tol`: the
    fits' certificate tolerance; `referee`: the referee rows of a second-order sweep."""
    degrees = {r["arm"]: r["degree"] for r in rows}
    stats = budget_stats(rows, tol, level)
    checks = design_checks(rows, lr_choice, budgets, tol, stats, width, converge_tol=converge_tol)
    fit = scaling_fits(rows, n_boot, level)
    return CapacityResult(
        budgets=sorted(budgets),
        checks=checks,
        stats=stats,
        fit=fit,
        verdict=verdict(checks, fit, degrees, paired),
        degrees=degrees,
        second_order=second_order(rows),
        referee=referee_summary(rows, referee),
    )

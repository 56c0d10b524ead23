"""Capacity analysis of a degree sweep: design checks that gate the verdict and the per-budget
statistics they read (`design`), scaling fits with their parameter-efficiency multipliers beside
seed 000's prediction, the verdict itself, and for second-order fits the referee's summary
(`referee`).

Everything reads the test loss (MSE for regression, cross-entropy for classification), the
quantity a network's capacity bounds from below; accuracy stays in the summaries table.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from blocklab.analysis.cells import EDGE, FAILED, Check, Invocation, budget_stats, second_order
from blocklab.analysis.stats import Verdict
from blocklab.experiments.degree_sweep.analysis import design, fit_checks, multiplier, scaling
from blocklab.experiments.degree_sweep.analysis.cost import next_cost
from blocklab.experiments.degree_sweep.analysis.counts import (
    COUNTS,
    counted,
    multiplier_fit,
    predictions,
    scaling_fits,
)
from blocklab.experiments.degree_sweep.analysis.design import design_checks
from blocklab.experiments.degree_sweep.analysis.referee import RefereeSummary, referee_summary
from blocklab.specs import TrainConfig
from blocklab.theory import predicted_multiplier

REFERENCE = fit_checks.REFERENCE
# what the theory says separates d = 3 from d = 2 and 4: the resolution a verdict must reach
PREDICTED_EFFECT = fit_checks.RESOLUTION


class Outcome(Enum):  # what the status line says
    VERDICT = "VERDICT"  # every check passed and the intervals decide the question
    # no check failed; a check or the shape test is at its edge, or an interval is too wide
    INCONCLUSIVE = "INCONCLUSIVE"
    NO_VERDICT = "NO VERDICT"  # a design check failed, or the shared model could not be fitted


@dataclass(frozen=True)
class Finding:  # one multiplier (or m_2 / m_4) beside its prediction
    name: str  # an arm, or "m2/m4"
    interval: multiplier.Interval
    predicted: float | None  # h(3)/h(d); 1 for m_2 / m_4; None for a non-polynomial arm
    excludes_one: bool
    excludes_prediction: bool | None
    # the half width reached, as a share (exp(half width in log) - 1); inf when unbounded
    resolution: float

    @property
    def decided(self) -> bool:
        """The interval tells the prediction from no effect: it excludes 1 or the prediction,
        or, where the prediction is 1 itself, it is narrower than the predicted effect."""
        if self.excludes_one or self.excludes_prediction:
            return True
        if self.predicted is not None and math.isclose(self.predicted, 1.0):
            return self.resolution <= PREDICTED_EFFECT
        return False


@dataclass(frozen=True)
class Decision:  # the status of a run: what its checks and intervals support
    outcome: Outcome
    reference: str
    failed: tuple[Check, ...] = ()  # NO_VERDICT: the failed checks
    # INCONCLUSIVE: the checks whose figure's band straddles its threshold (`cells.EDGE`), and
    # whether the shape test names other arms with some unit left out (`ShapeTest.stable`)
    edges: tuple[Check, ...] = ()
    shape_edge: bool = False
    no_model: bool = False  # NO_VERDICT: the shared model could not be fitted
    shape_rejected: bool = False  # d=2's or d=4's exponent differs: no constant multiplier
    differs: tuple[str, ...] = ()  # every arm whose exponent differs (`ShapeTest.differs`)
    findings: tuple[Finding, ...] = ()  # every multiplier but the reference's, then m_2 / m_4
    decisive: tuple[str, ...] = ()  # the findings the status rests on
    units: int = 0  # (teacher, seed) units of the run
    units_for_3pct: int | None = None  # what +-3% on the widest decisive interval needs
    level: float = math.nan
    # the widest decisive interval's half width in log units (inf: unbounded; NaN: none), and
    # the degrees of freedom of the t the intervals read (`MultiplierFit.df`): what a run of
    # another resolution is sized by (`multiplier.units_for`)
    widest: float = math.nan
    df: float = math.inf
    # NO_VERDICT, INCONCLUSIVE: the command to run next (`design.next_run`); None: the run's
    # config is not known, or no setting of it is left to change
    next: design.NextRun | None = None

    def finding(self, name: str) -> Finding | None:
        return next((f for f in self.findings if f.name == name), None)

    @property
    def undecided(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.name in self.decisive and not f.decided)


def _finding(name: str, interval: multiplier.Interval, predicted: float | None) -> Finding:
    lo, hi = interval.low, interval.high
    bounded = interval.bounded
    excludes_pred = None
    if predicted is not None and bounded:
        excludes_pred = not lo <= predicted <= hi
    hw = interval.half_width_log()
    return Finding(
        name=name,
        interval=interval,
        predicted=predicted,
        excludes_one=bounded and not lo <= 1.0 <= hi,
        excludes_prediction=excludes_pred,
        resolution=math.expm1(hw) if math.isfinite(hw) else math.inf,
    )


# seed 000's question among integers: d = 3 against 2 and 4, and m_2 / m_4
DECISIVE = (*fit_checks.DECISIVE, "m2/m4")


def decide(
    checks: list[Check],
    model: multiplier.MultiplierFit | None,
    degrees: dict,
    predicted: dict[str, float | None] | None = None,
) -> Decision:
    """The status (see `Outcome`): the findings rest on d=2, d=4 and m_2 / m_4 where they ran,
    else on every other arm. `predicted`: arm -> the theory's multiplier on the count the model
    was fitted on (`predictions`; None: the nominal count's h(3) / h(d))."""
    failed = tuple(c for c in checks if c.outcome == FAILED)
    edges = tuple(c for c in checks if c.outcome == EDGE)
    if model is None:
        return Decision(Outcome.NO_VERDICT, REFERENCE, failed=failed, no_model=True)
    if predicted is None:
        predicted = {arm: predicted_multiplier(arm, d) for arm, d in degrees.items()}
    differs = model.shape.differs  # arms with an exponent of their own: no multiplier
    findings = [
        _finding(arm, m, predicted.get(arm))
        for arm, m in model.multipliers.items()
        if arm != model.reference and arm not in differs
    ]
    if model.ratio_2_4 is not None:
        p2, p4 = predicted.get("d=2"), predicted.get("d=4")
        findings.append(_finding("m2/m4", model.ratio_2_4, p2 / p4 if p2 and p4 else 1.0))
    names = [f.name for f in findings]
    decisive = tuple(n for n in DECISIVE if n in names) or tuple(names)
    # the question rests on d=2 and d=4: an exponent of their own means no constant multiplier
    rejected = any(a in differs for a in DECISIVE) or (bool(differs) and not decisive)
    widest = max(
        (multiplier.Interval.half_width_log(f.interval) for f in findings if f.name in decisive),
        default=math.nan,
    )
    common = dict(
        reference=model.reference,
        findings=tuple(findings),
        decisive=decisive,
        units=model.units,
        units_for_3pct=multiplier.units_for(widest, model.units, df=model.df, level=model.level),
        level=model.level,
        widest=widest,
        df=model.df,
        shape_rejected=rejected,
        differs=differs,
    )
    if failed:
        return Decision(Outcome.NO_VERDICT, failed=failed, edges=edges, **common)
    # a check at its edge decides nothing either way: the run cannot tell on which side the
    # figure lies, and another machine's rounding could put it on either; nor does an exponent
    # of its own that some unit's absence unmakes (a test that does not reject claims nothing:
    # the multipliers, read under one exponent, carry the status)
    shape_edge = bool(differs) and not model.shape.stable
    if edges or shape_edge:
        return Decision(Outcome.INCONCLUSIVE, edges=edges, shape_edge=shape_edge, **common)
    decided = common["shape_rejected"] or all(f.decided for f in findings if f.name in decisive)
    return Decision(Outcome.VERDICT if decided else Outcome.INCONCLUSIVE, **common)


@dataclass(frozen=True)
class Counted:  # the shared model fitted on one parameter count (COUNTS), and its status
    count: str
    model: multiplier.MultiplierFit | None
    decision: Decision
    predicted: dict[str, float | None]  # arm -> the theory's multiplier on this count


@dataclass
class CapacityResult:
    budgets: list[int]
    checks: list[Check]
    stats: dict[str, dict[int, dict[str, Any]]]
    fit: scaling.ScalingResult  # each arm's own curve (the figure, and `arms` in the JSON)
    model: multiplier.MultiplierFit | None  # the shared scaling model; None: not fitted
    decision: Decision
    degrees: dict[str, float | None]
    paired: tuple[Verdict, ...] = ()  # per budget, `stats.compare`
    second_order: bool = False  # the rows are second-order fits (`cells.second_order`)
    referee: RefereeSummary | None = None  # fits with referee rows (`referee_summary`)
    # the count `model` and `decision` are fitted on, and the shared model on every count the
    # rows carry (`Counted`), that one included
    count: str = "nominal"
    counts: dict[str, Counted] = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:  # every design check
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
                        "functional_params": s["functional_params"],
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
    input_rank=None,
    run: Invocation | None = None,
    on_draw=None,
    count: str = "nominal",
):
    """`count`: the parameter count (COUNTS) the status's shared model is fitted on; the other
    is fitted too where the rows carry it, with its own status on the same checks. `width`: the
    nominal width of a width-mode run (None in depth mode); `converge_tol`: the fits'
    certificate tolerance; `referee`: the referee rows of a second-order sweep;
    `input_rank`: arm -> the rank of its input Jacobian, measured before the fits; `run`: how
    the run was started, which the next command of a run without a verdict repeats;
    `on_draw(stage, done, total)`: the bootstraps' progress, `stage` naming the analysis module
    ("multiplier": the shared model, most of the time; "scaling": each arm's own curve)."""

    def drew(stage: str):  # a bootstrap's own (done, total) callback
        return functools.partial(on_draw, stage) if on_draw is not None else None

    degrees = {r["arm"]: r["degree"] for r in rows}
    stats = budget_stats(rows, tol, level)
    if not counted(rows, count):
        raise ValueError(f"the rows carry no {COUNTS[count]}: fit on another count")
    model = multiplier_fit(rows, n_boot, level, drew("multiplier"), count)
    checks = design_checks(
        rows, lr_choice, budgets, tol, stats, width, converge_tol=converge_tol,
        multiplier=model, input_rank=input_rank,
    )  # fmt: skip
    fit = scaling_fits(rows, n_boot, level, drew("scaling"), count)
    counts = {}
    for c in [count] + [c for c in COUNTS if c != count and counted(rows, c)]:
        got = model if c == count else multiplier_fit(rows, n_boot, level, None, c)
        predicted = predictions(rows, degrees, c)
        counts[c] = Counted(c, got, decide(checks, got, degrees, predicted), predicted)
    decision = counts[count].decision
    if run is not None and decision.outcome is not Outcome.VERDICT:
        # what would settle a check at its edge is what its remedy changes
        after = design.next_run(decision.failed or decision.edges, run, decision.units_for_3pct)
        if after is not None:
            chains = getattr(getattr(run.cfg, "train", None), "chains", "own")
            after = dataclasses.replace(after, cost=next_cost(rows, after.changes, chains))
        decision = dataclasses.replace(decision, next=after)
        counts[count] = dataclasses.replace(counts[count], decision=decision)
    return CapacityResult(
        budgets=sorted(budgets),
        checks=checks,
        stats=stats,
        fit=fit,
        model=model,
        decision=decision,
        degrees=degrees,
        paired=tuple(paired),
        second_order=second_order(rows),
        referee=referee_summary(rows, referee),
        count=count,
        counts=counts,
    )


@dataclass(frozen=True)
class Roundings:
    """The run's capacity analysis beside each other rounding's (`--roundings`): a status that
    another rounding changes is not the run's result, whatever each says alone."""

    results: tuple[CapacityResult, ...]  # the run's own first, then roundings 1 to K-1

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(r.decision.outcome.value for r in self.results)

    @property
    def same(self) -> bool:
        return len(set(self.words)) == 1

    def claims(self, result: CapacityResult) -> tuple[tuple[str, str], ...]:
        """What a rounding's status states, as (finding, word): each decisive multiplier
        decided or not, each arm with an exponent of its own, each check's outcome."""
        d = result.decision
        out = [(f.name, "decided" if f.decided else "undecided") for f in d.findings
               if f.name in d.decisive]  # fmt: skip
        out += [(f"{a} own exponent", "named") for a in d.differs]
        out += [(c.name, c.outcome) for c in result.checks]
        return tuple(out)

    @property
    def same_claims(self) -> bool:
        return len({self.claims(r) for r in self.results}) == 1

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
from typing import Any

from blocklab.experiments.degree_sweep.analysis import (
    design,
    fit_checks,
    matched,
    matched_checks,
    multiplier,
    scaling,
)
from blocklab.experiments.degree_sweep.analysis.answered import (
    MatchedResult,
    answer_counts,
    answer_run,
)
from blocklab.experiments.degree_sweep.analysis.arms import Verdict
from blocklab.experiments.degree_sweep.analysis.cells import (
    EDGE,
    FAILED,
    Change,
    Check,
    Invocation,
    budget_stats,
    second_order,
)
from blocklab.experiments.degree_sweep.analysis.counts import (
    COUNTS,
    counted,
    multiplier_fit,
    predictions,
    scaling_fits,
)
from blocklab.experiments.degree_sweep.analysis.decision import (  # noqa: F401 (its names)
    PREDICTED_EFFECT,
    REFERENCE,
    Counted,
    Decision,
    Finding,
    Outcome,
    _finding,
)
from blocklab.experiments.degree_sweep.analysis.design import design_checks
from blocklab.experiments.degree_sweep.analysis.referee import RefereeSummary, referee_summary
from blocklab.sample_size import units_for
from blocklab.specs import TrainConfig
from blocklab.theory import predicted_multiplier

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
        units_for_3pct=units_for(widest, model.units, df=model.df, level=model.level),
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


@dataclass
class CapacityResult:
    budgets: list[int]
    checks: list[Check]
    stats: dict[str, dict[int, dict[str, Any]]]
    fit: scaling.ScalingResult  # each arm's own curve (the figure, and `arms` in the JSON)
    model: multiplier.MultiplierFit | None  # the shared scaling model; None: not fitted
    decision: Decision
    degrees: dict[str, float | None]
    paired: tuple[Verdict, ...] = ()  # per budget, `arms.compare`
    second_order: bool = False  # the rows are second-order fits (`cells.second_order`)
    referee: RefereeSummary | None = None  # fits with referee rows (`referee_summary`)
    # the count `model` and `decision` are fitted on, and the shared model on every count the
    # rows carry (`Counted`), that one included
    count: str = "nominal"
    counts: dict[str, Counted] = dataclasses.field(default_factory=dict)
    # the matched answer where some pair of arms meets (`matched`): then `checks` are the ones
    # it rests on and `decision` its status, and the scaling model's checks stand apart in
    # `scaling_checks`, a secondary view with its own shape test
    matched: MatchedResult | None = None
    scaling_checks: list[Check] = dataclasses.field(default_factory=list)
    scaling_counts: dict[str, Counted] = dataclasses.field(default_factory=dict)

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
    failed_trials: int = 0,
    answer: bool = True,
):
    """`count`: the parameter count (COUNTS) the status's shared model is fitted on; the other
    is fitted too where the rows carry it, with its own status on the same checks. `width`: the
    nominal width of a width-mode run (None in depth mode); `converge_tol`: the fits'
    certificate tolerance; `referee`: the referee rows of a second-order sweep;
    `input_rank`: arm -> the rank of its input Jacobian, measured before the fits; `run`: how
    the run was started, which the next command of a run without a verdict repeats;
    `on_draw(stage, done, total)`: the bootstraps' progress, `stage` naming the analysis module
    ("multiplier": the shared model, most of the time; "scaling": each arm's own curve);
    `failed_trials`: trials that raised (a design check they leave short is no longer held by
    design); `answer` False: the scaling model's status even where arms meet (its own tests)."""

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
    scaling_checks: list[Check] = []
    scaling_counts: dict[str, Counted] = {}
    answered = None
    if answer and second_order(rows) and matched.applies(rows):
        answered = answer_run(rows, n_boot, level, width, checks, failed_trials)
        # the scaling view keeps its own checks, but none whose slack is the resolution the
        # run claims (`converged`, `search`): the fits' certificate share at their own
        # tolerance, clustered by ladder, stands for them there; robustness for the answer
        scaling_checks = [
            matched_checks.converged(rows, converge_tol, level) if c.name == "converged" else c
            for c in checks
            if c.name not in ("search", "input_rank")
        ]
        checks = list(answered.checks)
        scaling_counts = counts
        counts = answer_counts(answered, counts, degrees)
        count = "nominal"
    decision = counts[count].decision
    if run is not None and decision.outcome is not Outcome.VERDICT:
        # what would settle a check at its edge is what its remedy changes; with no check
        # failed, the teachers that would decide m_2 / m_4 too (the matched answer's units)
        more: tuple[Change, ...] = ()
        if answered is not None and not decision.failed and answered.teachers_needed:
            teachers = getattr(run.cfg, "teachers", 1)
            more = (Change("teachers", teachers, answered.teachers_needed),)
        why = decision.failed or decision.edges
        after = design.next_run(why, run, decision.units_for_3pct, more)
        if after is not None and run.price is not None:
            after = dataclasses.replace(after, cost=run.price(after.changes))
        decision = dataclasses.replace(decision, next=after)
        counts[count] = dataclasses.replace(counts[count], decision=decision)
    if answered is not None:
        answered = dataclasses.replace(answered, decision=decision)
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
        matched=answered,
        scaling_checks=scaling_checks,
        scaling_counts=scaling_counts,
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

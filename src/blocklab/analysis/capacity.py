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
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from blocklab.analysis import scaling
from blocklab.analysis.stats import interval, layer_degrees
from blocklab.theory import h

PLATEAU_SHARE = 0.9
MIN_BUDGETS, MIN_SPAN = 4, 8.0
# in width mode the solver may move a width to meet the budget within 2%; past one unit the arm
# is a different architecture (measured: d=3 at width 6 fits a teacher 1.7-2.3x worse than at 8-9)
WIDTH_SLACK = 1
REFERENCE = "d=3"
PREDICTED_EFFECT = h(3) / h(2) - 1  # what the theory says separates d = 3 from d = 2 and 4


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def _loss(r: dict[str, Any]) -> float | None:
    return r.get("test_loss") if r["status"] == "done" else None


def criterion(rows, tol: float) -> str:
    """The plateau criterion the rows were read by, in words (see `train.Tracker.plateau`)."""
    if rows and all(r.get("schedule") == "wsd" for r in rows):
        return (
            f"the annealed validation loss of the run of half the steps lies < {tol:g} above "
            "the full run's: doubling the steps gained less than that"
        )
    return (
        f"smoothed validation loss fell by < {tol:g} of its final value over the last quarter "
        "of training"
    )


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
                "params": int(trials[0]["block_params"]),
            }
    return out


def width_check(rows, width: int | None) -> Check:
    """Width mode compares degrees at one width; `width` None (depth mode) solves it by design."""
    if width is None:
        return Check("width_matched", True, "depth mode: the width is solved per arm and budget")
    moved = sorted(
        {
            (r["arm"], int(r["budget"]), int(r["width"]))
            for r in rows
            if r.get("width") is not None and abs(int(r["width"]) - width) > WIDTH_SLACK
        },
        key=lambda t: (t[1], t[0]),
    )
    if not moved:
        return Check(
            "width_matched", True, f"every arm within {WIDTH_SLACK} of the nominal width {width}"
        )
    listed = ", ".join(f"{a} at {b} (width {w})" for a, b, w in moved[:4])
    more = f"; and {len(moved) - 4} more" if len(moved) > 4 else ""
    return Check(
        "width_matched",
        False,
        f"the budget solver moved widths more than {WIDTH_SLACK} from {width} to meet a budget "
        f"within 2%: {listed}{more}; choose --budgets or --width where every arm keeps the width",
    )


def design_checks(
    rows, lr_choice, budgets, tol: float, stats=None, width: int | None = None
) -> list[Check]:
    stats = stats if stats is not None else budget_stats(rows, tol)
    checks = []

    span = max(budgets) / min(budgets) if budgets else 0.0
    ok = len(set(budgets)) >= MIN_BUDGETS and span >= MIN_SPAN
    detail = (
        f"{len(set(budgets))} budgets spanning {span:.3g}x (a scaling fit needs >= {MIN_BUDGETS} "
        f"over >= {MIN_SPAN:g}x)" + ("" if ok else "; give more or wider --budgets")
    )
    checks.append(Check("budget_span", ok, detail))

    flat = [plateaued(r, tol) for r in rows]
    share = sum(flat) / len(flat) if flat else 0.0
    worst = sorted(
        (
            (a, b, s["plateaued_fraction"])
            for a, by_b in stats.items()
            for b, s in by_b.items()
            if s["plateaued_fraction"] < 1
        ),
        key=lambda t: t[2],
    )[:3]
    detail = (
        f"{share:.0%} of {len(flat)} trials plateaued (needs >= {PLATEAU_SHARE:.0%}; plateau: "
        f"{criterion(rows, tol)})"
    )
    if worst:
        detail += "; least: " + ", ".join(f"{a} at {b} ({f:.0%})" for a, b, f in worst)
    if share < PLATEAU_SHARE:
        detail += "; train longer (--steps) or with a larger batch (--batch-size)"
    checks.append(Check("plateau", share >= PLATEAU_SHARE, detail))

    rises = []
    for arm, by_b in stats.items():
        seq = [(b, s) for b, s in sorted(by_b.items()) if math.isfinite(s["mean"])]
        for (b0, s0), (b1, s1) in zip(seq, seq[1:], strict=False):
            lo1 = s1["ci_low"] if math.isfinite(s1["ci_low"]) else s1["mean"]
            hi0 = s0["ci_high"] if math.isfinite(s0["ci_high"]) else s0["mean"]
            if lo1 > hi0:
                rises.append(f"{arm}: {s0['mean']:.4g} at {b0} -> {s1['mean']:.4g} at {b1}")
    detail = (
        "every arm's test loss falls or stays level with budget"
        if not rises
        else "test loss rises with budget beyond the intervals (undertrained: more --steps, "
        "another --lr-grid): " + "; ".join(rises)
    )
    checks.append(Check("monotone_in_budget", not rises, detail))

    edges = [(key, c) for key, c in lr_choice.items() if c.get("at_edge")]
    detail = (
        "every chosen learning rate lies inside the rates tried"
        if not edges
        else "chosen at an edge of the rates tried (widen --lr-grid or raise --lr-extend): "
        + "; ".join(
            f"{key} lr={c['lr']:g} of {', '.join(f'{x:g}' for x in c['tried'])}"
            for key, c in edges[:4]
        )
        + (f"; and {len(edges) - 4} more" if len(edges) > 4 else "")
    )
    checks.append(Check("lr_not_at_edge", not edges, detail))
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


def _x(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.3g}"


def efficiency_claims(fit: scaling.ScalingResult, degrees: dict[str, float | None]) -> list[str]:
    """One sentence per arm: its multiplier against d = 3 with the interval, what the interval
    excludes, and the prediction beside it."""
    out = []
    for arm, e in fit.efficiency.items():
        if arm == fit.reference:
            continue
        pred = predicted_multiplier(arm, degrees.get(arm))
        if math.isnan(e.ci_low):
            out.append(f"{arm}: x{_x(e.multiplier)}, interval undetermined (too many fits failed)")
            continue
        if e.ci_low > 1:
            side = f"needs more parameters than {fit.reference}"
        elif e.ci_high < 1:
            side = f"needs fewer parameters than {fit.reference}"
        else:
            side = f"not distinguishable from {fit.reference}"
        text = f"{arm}: x{_x(e.multiplier)} [{_x(e.ci_low)}, {_x(e.ci_high)}], {side}"
        if pred is not None:
            inside = e.ci_low <= pred <= e.ci_high
            text += f" (predicted {pred:.3f}: {'inside' if inside else 'outside'} the interval)"
        if e.extrapolated:
            text += "; extrapolated beyond the budgets it ran at"
        out.append(text)
    return out


def verdict(checks: list[Check], fit: scaling.ScalingResult, degrees, paired) -> str | None:
    """The stated finding, or None when a design check failed or nothing could be fitted.
    `paired` are the per-budget verdicts of `stats.compare` (their sentences are appended)."""
    if not all(c.passed for c in checks) or fit.reference is None:
        return None
    claims = efficiency_claims(fit, degrees)
    ref = fit.efficiency[fit.reference]
    head = (
        f"Parameters needed to reach the loss {fit.reference} reaches at "
        f"{ref.ref_params:.0f} parameters ({ref.target_loss:.4g}), relative to {fit.reference} "
        f"({fit.level:.0%} bootstrap intervals over (teacher, seed)): "
    )
    better = [a for a, e in fit.efficiency.items() if a != fit.reference and e.ci_high < 1]
    worse = [a for a, e in fit.efficiency.items() if a != fit.reference and e.ci_low > 1]
    if better:
        summary = f"{', '.join(better)} more parameter-efficient than {fit.reference}"
    elif worse and len(worse) == len(fit.efficiency) - 1:
        summary = f"{fit.reference} is the most parameter-efficient arm"
    else:
        summary = f"no arm is more parameter-efficient than {fit.reference}"
    text = f"{summary}. {head}" + "; ".join(claims) + "."
    per_budget = [v.claim for v in paired]
    if per_budget:
        text += " Per budget: " + " | ".join(per_budget)
    return text


@dataclass
class CapacityResult:
    budgets: list[int]
    checks: list[Check]
    stats: dict[str, dict[int, dict[str, Any]]]
    fit: scaling.ScalingResult
    verdict: str | None
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
                        "params": s["params"],
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

    def to_json(self) -> dict[str, Any]:
        return {
            "budgets": self.budgets,
            "design_checks": [asdict(c) for c in self.checks],
            "verdict": self.verdict,
            "arms": self.arms_json(),
            "resolution": self.fit.resolution,
            "predicted_effect": PREDICTED_EFFECT,
            "reference": self.fit.reference,
        }


def analyze(rows, lr_choice, budgets, *, tol: float, n_boot: int, paired, level=0.95, width=None):
    """`width`: the nominal width of a width-mode run (None in depth mode)."""
    degrees = {r["arm"]: r["degree"] for r in rows}
    stats = budget_stats(rows, tol, level)
    checks = design_checks(rows, lr_choice, budgets, tol, stats, width)
    fit = scaling_fits(rows, n_boot, level)
    return CapacityResult(
        sorted(budgets), checks, stats, fit, verdict(checks, fit, degrees, paired), degrees
    )

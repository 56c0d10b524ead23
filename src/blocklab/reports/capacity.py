"""The capacity part of the degree sweep's report (`blocklab.analysis.capacity`): design checks,
verdict, test loss per budget, scaling fits and the parameter efficiency against d = 3, and for
second-order fits the referee's comparison (the figures are in `capacity_plots`).
"""

import math
from typing import Any

from blocklab.analysis import capacity as cap
from blocklab.analysis import design
from blocklab.analysis.capacity import PREDICTED_EFFECT, REFERENCE, predicted_multiplier
from blocklab.formatting import markdown_table
from blocklab.formatting import short as fmt
from blocklab.reports import referee
from blocklab.reports.verdicts import claim


def criterion(rule: str, tol: float) -> str:
    """The plateau criterion (`analysis.capacity.plateau_rule`) in words."""
    if rule == "wsd":
        return (
            f"the annealed validation loss of the run of half the steps lies < {tol:g} above "
            "the full run's: doubling the steps gained less than that"
        )
    return (
        f"smoothed validation loss fell by < {tol:g} of its final value over the last quarter "
        "of training"
    )


def _budget_span(c: design.BudgetSpan) -> str:
    need = f"a scaling fit needs >= {design.MIN_BUDGETS} over >= {design.MIN_SPAN:g}x"
    text = f"{c.budgets} budgets spanning {c.span:.3g}x ({need})"
    return text if c.passed else f"{text}; give more or wider --budgets"


def _share_of_trials(c, what: str, need: float, rule: str, advice: str) -> str:
    """A check on the share of trials that `what`: that share, the rule, the cells lowest in it,
    and when it failed what to change."""
    text = f"{c.share:.0%} of {c.trials} trials {what} (needs >= {need:.0%}; {rule})"
    if c.least:
        text += "; least: " + ", ".join(f"{a} at {b} ({f:.0%})" for a, b, f in c.least)
    return text if c.passed else f"{text}; {advice}"


def _plateau(c: design.Plateau) -> str:
    rule = f"plateau: {criterion(c.rule, c.tol)}"
    advice = "train longer (--steps) or with a larger batch (--batch-size)"
    return _share_of_trials(c, "plateaued", design.PLATEAU_SHARE, rule, advice)


def _converged(c: design.Converged) -> str:
    rule = f"converged: doubling the iterations lowered the training loss by < {c.tol:g} of it"
    advice = "fit longer (--steps) or with more restarts (--restarts)"
    return _share_of_trials(c, "converged", design.CONVERGED_SHARE, rule, advice)


def _generalization(c: design.Generalization) -> str:
    limit = f"{design.GENERALIZATION_RATIO:g}x"
    if math.isnan(c.worst):
        return "no cell has both a test and a training loss to compare"
    if c.passed:
        return (
            f"every cell's mean test loss within {limit} its training loss (worst {c.worst:.3g}x)"
        )
    listed = ", ".join(f"{a} at {b} ({r:.3g}x)" for a, b, r in c.failing[:4])
    return (
        f"mean test loss above {limit} the mean training loss: {listed}{_more(c.failing)}; "
        "grow N (--data-ratio, --max-examples) or shrink P"
    )


def _monotone(c: design.Monotone) -> str:
    if not c.rises:
        return "every arm's test loss falls or stays level with budget"
    return (
        "test loss rises with budget beyond the intervals (undertrained: more --steps, "
        "another --lr-grid): "
        + "; ".join(f"{a}: {m0:.4g} at {b0} -> {m1:.4g} at {b1}" for a, b0, m0, b1, m1 in c.rises)
    )


def _more(items: tuple, shown: int = 4) -> str:
    return f"; and {len(items) - shown} more" if len(items) > shown else ""


def _lr_edge(c: design.LrEdge) -> str:
    if not c.edges:
        return "every chosen learning rate lies inside the rates tried"
    return (
        "chosen at an edge of the rates tried (widen --lr-grid or raise --lr-extend): "
        + "; ".join(
            f"{key} lr={lr:g} of {', '.join(f'{x:g}' for x in tried)}"
            for key, lr, tried in c.edges[:4]
        )
        + _more(c.edges)
    )


def _width(c: design.WidthMatch) -> str:
    if c.width is None:
        return "depth mode: the width is solved per arm and budget"
    slack = design.width_slack(c.width)
    if not c.moved:
        return f"every arm within {slack} of the nominal width {c.width}"
    listed = ", ".join(f"{a} at {b} (width {w})" for a, b, w in c.moved[:4])
    return (
        f"the budget solver moved widths more than {slack} from {c.width} to meet a budget: "
        f"{listed}{_more(c.moved)}; choose --budgets or --width where every arm keeps the width"
    )


def _replicates(c: design.Replicates) -> str:
    pairs = f"{design.MIN_REPLICATES} (teacher, seed) pairs"
    if c.passed:
        return f"every cell holds at least {pairs} ({c.least})"
    listed = ", ".join(f"{a} at {b} ({n})" for a, b, n in c.cells[:4]) + _more(c.cells)
    why = "too few for a bootstrap interval or a paired test"
    return f"fewer than {pairs} finished, {why}: {listed}; raise --seeds or --teachers"


DETAIL = {
    design.BudgetSpan: _budget_span,
    design.Plateau: _plateau,
    design.Converged: _converged,
    design.Generalization: _generalization,
    design.Monotone: _monotone,
    design.LrEdge: _lr_edge,
    design.WidthMatch: _width,
    design.Replicates: _replicates,
}


def detail(check: design.Check) -> str:
    """What a design check measured, and what to change where it failed."""
    return DETAIL[type(check)](check)


def _x(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.3g}"


SIDE = {
    cap.Side.MORE: "needs more parameters than",
    cap.Side.FEWER: "needs fewer parameters than",
    cap.Side.SAME: "not distinguishable from",
}


def efficiency_line(a: cap.ArmEfficiency) -> str:
    """An arm's multiplier against the reference with its interval, what the interval excludes,
    and the prediction beside it."""
    e = a.efficiency
    if a.side is cap.Side.UNDETERMINED:
        return f"{e.arm}: x{_x(e.multiplier)}, interval undetermined (too many fits failed)"
    text = f"{e.arm}: x{_x(e.multiplier)} [{_x(e.ci_low)}, {_x(e.ci_high)}], "
    text += f"{SIDE[a.side]} {e.reference}"
    if a.predicted is not None:
        where = "inside" if a.inside else "outside"
        text += f" (predicted {a.predicted:.3f}: {where} the interval)"
    if e.extrapolated:
        text += "; extrapolated beyond the budgets it ran at"
    return text


def efficiency_lines(capacity) -> list[str]:
    return [efficiency_line(a) for a in cap.efficiency_findings(capacity.fit, capacity.degrees)]


def verdict_sentence(capacity) -> str | None:
    """The stated finding with the per-budget claims of the paired tests; None when refused."""
    v = capacity.verdict
    if v.refused is not None:
        return None
    ref = v.reference
    if v.standing is cap.Standing.OTHERS_BETTER:
        summary = f"{', '.join(v.better)} more parameter-efficient than {ref}"
    elif v.standing is cap.Standing.REFERENCE_BEST:
        summary = f"{ref} is the most parameter-efficient arm"
    else:
        summary = f"no arm is more parameter-efficient than {ref}"
    head = (
        f"Parameters needed to reach the loss {ref} reaches at {v.ref_params:.0f} parameters "
        f"({v.target_loss:.4g}), relative to {ref} ({v.level:.0%} bootstrap intervals over "
        "(teacher, seed)): "
    )
    text = f"{summary}. {head}" + "; ".join(efficiency_line(a) for a in v.arms) + "."
    if v.paired:
        text += " Per budget: " + " | ".join(claim(p) for p in v.paired)
    return text


def check_lines(capacity):
    """The design checks, one line each, and the verdict or why there is none."""
    lines = [
        f"- {'passed' if c.passed else 'FAILED'}: {c.name}: {detail(c)}" for c in capacity.checks
    ]
    v = capacity.verdict
    if v.refused is None:
        return lines, verdict_sentence(capacity)
    if v.refused is cap.Refusal.DESIGN_CHECK:
        why = "; ".join(f"design check failed: {c.name}: {detail(c)}" for c in v.failed)
    else:
        why = f"no scaling fit for the reference arm {v.reference} (is it among the degrees?)"
    return lines, f"{why} — no verdict"


def converged_line(capacity) -> str | None:
    """The terminal's one line on the fits' certificates; None for an Adam run."""
    c = next((c for c in capacity.checks if isinstance(c, design.Converged)), None)
    if c is None:
        return None
    done = round(c.share * c.trials)
    return (
        f"converged fits: {done} of {c.trials} trials (certificate: doubling the iterations "
        f"gained < {c.tol:g})"
    )


def capacity_json(capacity) -> dict[str, Any]:
    """The capacity analysis under the keys of `--json`, its checks and verdict in words."""
    return {
        "budgets": capacity.budgets,
        "design_checks": [
            {"name": c.name, "passed": c.passed, "detail": detail(c)} for c in capacity.checks
        ],
        "verdict": verdict_sentence(capacity),
        "arms": capacity.arms_json(),
        "resolution": capacity.fit.resolution,
        "predicted_effect": PREDICTED_EFFECT,
        "reference": capacity.fit.reference,
    }


def _ci(pair):
    lo, hi = pair
    return f"[{fmt(lo)}, {fmt(hi)}]"


def _mult(x):
    return "inf" if x is not None and math.isinf(x) else fmt(x)


def capacity_section(capacity):
    """Markdown: design checks, verdict, per-budget losses, scaling fits, efficiency vs d = 3."""
    checks, verdict = check_lines(capacity)
    lines = ["## Design checks", "", *checks, "", "## Verdict", "", verdict, ""]
    lines += _loss_table(capacity.stats, capacity.second_order)
    if capacity.second_order:
        lines += _fit_curves_text(capacity.referee is not None)
    if capacity.referee is not None:
        lines += referee.section(capacity.referee)
    lines += _fit_table(capacity.fit)
    if capacity.fit.reference is None:
        return lines + [f"No parameter-efficiency multipliers: {REFERENCE} was not fitted.", ""]
    return lines + _efficiency_section(capacity)


# how far the trials got: Adam runs by their plateau, second-order fits by their training loss,
# certificates and restarts (the plateau is not their criterion)
TRAINED = ("plateaued",)
FITTED = ("train loss", "median restart", "converged", "restart spread")


def _share(x: float, digits: int = 0) -> str:
    return f"{x:.{digits}%}" if math.isfinite(x) else "-"


def _trained(st, second_order: bool) -> tuple[str, ...]:
    if not second_order:
        return (_share(st["plateaued_fraction"]),)
    return (
        fmt(st["train_mean"]),
        fmt(st["restart_median_mean"]),
        _share(st["converged_fraction"]),
        _share(st["restart_spread"], 1),
    )


def _loss_table(stats, second_order: bool) -> list[str]:
    if second_order:
        trained = (
            "train loss: the final training MSE of each trial's best restart, mean over trials; "
            "median restart: the same of each trial's median restart; converged: share of trials "
            "whose certificate holds; restart spread: (median restart - best) / best, mean over "
            "trials."
        )
    else:
        trained = (
            "plateaued: share of trials that had stopped improving (the criterion is in the "
            "design checks)."
        )
    lines = [
        "## Test loss per budget",
        "",
        f"Mean over (teacher, seed) with std and 95% Student-t interval; {trained} "
        "With several teachers, the spread within a teacher (mean std over seeds) and between "
        "teachers (std of their means) are shown apart.",
        "",
    ]
    body = [
        (
            arm,
            str(b),
            str(st["block_params"]),
            f"{fmt(st['mean'])} ± {fmt(st['std'])}",
            f"[{fmt(st['ci_low'])}, {fmt(st['ci_high'])}]",
            *_trained(st, second_order),
            fmt(st["within_teacher_std"]),
            fmt(st["between_teacher_std"]),
        )
        for arm, by_b in stats.items()
        for b, st in by_b.items()
    ]
    header = (
        ("arm", "budget", "params", "test loss", "95% CI")
        + (FITTED if second_order else TRAINED)
        + ("within", "between")
    )
    return lines + markdown_table(header, body)


def _fit_curves_text(refereed: bool) -> list[str]:
    panels = " and of the referee's fit from the same start" if refereed else ""
    return [
        "",
        "Loss against iterations of each arm's first trial at its middle budget"
        f"{panels}, on a log axis: where a curve flattens the fit has converged.",
        "",
        "![loss against iterations](fit_curves.png)",
    ]


def _fit_table(fit) -> list[str]:
    lines = [
        "",
        "## Scaling fits",
        "",
        "Per arm, L(P) = L_inf + a P^-alpha fit by least squares on log loss to the per-budget "
        "means against the actual parameter counts (SciPy); intervals: "
        f"{fit.level:.0%} bootstrap percentiles over {fit.n_boot} draws that resample teachers, "
        "then seeds within them, the same draws for every arm (paired).",
        "",
    ]
    body = [
        (arm, fmt(f.L_inf), _ci(f.ci["L_inf"]), fmt(f.a), fmt(f.alpha), _ci(f.ci["alpha"]))
        for arm, f in fit.fits.items()
    ]
    lines += markdown_table(("arm", "L_inf", "95% CI", "a", "alpha", "95% CI"), body)
    return lines + ["", "![test loss vs budget](scaling.png)", ""]


def _efficiency_section(capacity) -> list[str]:
    """Each arm's multiplier against the reference beside seed 000's prediction h(3) / h(d), and
    whether the intervals are narrow enough to tell d = 3 from its neighbours."""
    fit = capacity.fit
    ref = fit.efficiency[fit.reference]
    lines = [
        "## Parameter efficiency against d = 3",
        "",
        f"The loss {fit.reference} reaches at P_ref = {ref.ref_params:.0f} parameters (the middle "
        f"of its measured log range) is {ref.target_loss:.4g}. For each arm: the parameters its "
        "fitted curve needs for that loss, divided by P_ref (above 1: it needs more than "
        f"{fit.reference}; inf: its fitted floor L_inf lies above the target). Seed 000's "
        "prediction beside it: equal degree proxy (eq. 17) means B_X h(X) = B_3 h(3), so the "
        "multiplier is h(3) / h(X). Measurement and prediction are never fitted to each other.",
        "",
    ]
    body = []
    for arm, e in fit.efficiency.items():
        pred = predicted_multiplier(arm, capacity.degrees.get(arm))
        body.append(
            (
                arm,
                _mult(e.multiplier),
                f"[{_mult(e.ci_low)}, {_mult(e.ci_high)}]",
                "-" if pred is None else f"{pred:.4f}",
                "yes" if e.extrapolated else "no",
            )
        )
    lines += markdown_table(("arm", "multiplier", "95% CI", "predicted", "extrapolated"), body)
    figure = "![parameter efficiency](efficiency.png)"
    return lines + ["", _resolution(fit.resolution), "", figure, ""]


def _resolution(res: float | None) -> str:
    if res is None:
        return "Resolution: no finite interval."
    said = (
        "This run can resolve it."
        if res < PREDICTED_EFFECT / 2
        else "This run cannot resolve it: more seeds, teachers or budgets narrow the "
        "intervals (roughly as one over the square root of the number of units)."
    )
    return (
        f"Resolution: the intervals' median half-width is {res:.3g} (in multiplier units); "
        f"the predicted difference between d = 3 and d = 2 or 4 is {PREDICTED_EFFECT:.3f}. {said}"
    )

"""The capacity part of the degree sweep's report (`blocklab.analysis.capacity`): design checks,
verdict, test loss per budget, scaling fits and the parameter efficiency against d = 3, with their
two figures.
"""

import math
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from blocklab.analysis import capacity as cap
from blocklab.analysis.capacity import PREDICTED_EFFECT, REFERENCE, predicted_multiplier
from blocklab.formatting import markdown_table
from blocklab.formatting import short as fmt
from blocklab.reports.plots import colors, save
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


def _budget_span(c: cap.BudgetSpan) -> str:
    text = (
        f"{c.budgets} budgets spanning {c.span:.3g}x (a scaling fit needs >= {cap.MIN_BUDGETS} "
        f"over >= {cap.MIN_SPAN:g}x)"
    )
    return text if c.passed else f"{text}; give more or wider --budgets"


def _plateau(c: cap.Plateau) -> str:
    text = (
        f"{c.share:.0%} of {c.trials} trials plateaued (needs >= {cap.PLATEAU_SHARE:.0%}; "
        f"plateau: {criterion(c.rule, c.tol)})"
    )
    if c.least:
        text += "; least: " + ", ".join(f"{a} at {b} ({f:.0%})" for a, b, f in c.least)
    if not c.passed:
        text += "; train longer (--steps) or with a larger batch (--batch-size)"
    return text


def _monotone(c: cap.Monotone) -> str:
    if not c.rises:
        return "every arm's test loss falls or stays level with budget"
    return (
        "test loss rises with budget beyond the intervals (undertrained: more --steps, "
        "another --lr-grid): "
        + "; ".join(f"{a}: {m0:.4g} at {b0} -> {m1:.4g} at {b1}" for a, b0, m0, b1, m1 in c.rises)
    )


def _more(items: tuple, shown: int = 4) -> str:
    return f"; and {len(items) - shown} more" if len(items) > shown else ""


def _lr_edge(c: cap.LrEdge) -> str:
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


def _width(c: cap.WidthMatch) -> str:
    if c.width is None:
        return "depth mode: the width is solved per arm and budget"
    if not c.moved:
        return f"every arm within {cap.WIDTH_SLACK} of the nominal width {c.width}"
    listed = ", ".join(f"{a} at {b} (width {w})" for a, b, w in c.moved[:4])
    return (
        f"the budget solver moved widths more than {cap.WIDTH_SLACK} from {c.width} to meet a "
        f"budget within 2%: {listed}{_more(c.moved)}; choose --budgets or --width where every "
        "arm keeps the width"
    )


DETAIL = {
    cap.BudgetSpan: _budget_span,
    cap.Plateau: _plateau,
    cap.Monotone: _monotone,
    cap.LrEdge: _lr_edge,
    cap.WidthMatch: _width,
}


def detail(check: cap.Check) -> str:
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
    lines += _loss_table(capacity.stats)
    lines += _fit_table(capacity.fit)
    if capacity.fit.reference is None:
        return lines + [f"No parameter-efficiency multipliers: {REFERENCE} was not fitted.", ""]
    return lines + _efficiency_section(capacity)


def _loss_table(stats) -> list[str]:
    lines = [
        "## Test loss per budget",
        "",
        "Mean over (teacher, seed) with std and 95% Student-t interval; plateaued: share of "
        "trials that had stopped improving (the criterion is in the design checks). "
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
            f"{st['plateaued_fraction']:.0%}",
            fmt(st["within_teacher_std"]),
            fmt(st["between_teacher_std"]),
        )
        for arm, by_b in stats.items()
        for b, st in by_b.items()
    ]
    header = ("arm", "budget", "params", "test loss", "95% CI", "plateaued", "within", "between")
    return lines + markdown_table(header, body)


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


def _arm_key(capacity):
    return lambda a: (capacity.degrees.get(a) is None, capacity.degrees.get(a) or 0.0, a)


def _plain_log(ax, axes="xy"):
    """Log axes labelled 0.3, not 3 x 10^-1, at 1, 2 and 5 per decade (minor ticks unlabelled:
    over a wide range their labels overlap)."""
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for name in axes:
        axis = getattr(ax, f"{name}axis")
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(NullFormatter())


def scaling_curves(capacity, path, unit="MSE or cross-entropy in nats"):
    """Log-log test loss vs actual block parameters: per arm the means with 95% intervals and the
    fitted L(P) = L_inf + a P^-alpha, one colour per arm. `unit`: the loss's (`plots.loss_unit`)."""
    stats, fits = capacity.stats, capacity.fit.fits
    arms = sorted(stats, key=_arm_key(capacity))
    color = colors(arms)
    fig, ax = plt.subplots(figsize=(7, 4.8), layout="constrained")
    for arm in arms:
        pts = [s for _, s in sorted(stats[arm].items()) if math.isfinite(s["mean"])]
        if not pts:
            continue
        x = np.array([s["block_params"] for s in pts], dtype=float)
        y = np.array([s["mean"] for s in pts])
        lo = np.array([s["ci_low"] if math.isfinite(s["ci_low"]) else s["mean"] for s in pts])
        hi = np.array([s["ci_high"] if math.isfinite(s["ci_high"]) else s["mean"] for s in pts])
        lo = np.where(lo > 0, lo, y)  # a loss is positive: no bar below zero on a log axis
        c = color[arm]
        ax.errorbar(x, y, yerr=[y - lo, hi - y], color=c, marker="o", ls="none", capsize=3)
        if arm in fits:
            f = fits[arm]
            grid = np.geomspace(x.min() / 1.3, x.max() * 1.3, 100)
            label = f"{arm}: {f.L_inf:.3g} + {f.a:.3g} P^-{f.alpha:.2f}"
            ax.plot(grid, [f.predict(p) for p in grid], color=c, label=label)
        else:
            ax.plot([], [], color=c, marker="o", label=f"{arm} (no fit)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax)
    ax.set(
        xlabel="block parameters P (actual count)",
        ylabel=f"test loss ({unit}), mean and 95% CI",
    )
    ax.set_title("test loss vs budget, fitted L(P) = L_inf + a P^-alpha", fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, path)


def efficiency(capacity, path):
    """Each arm's parameter multiplier against d = 3 with its bootstrap interval, beside seed 000's
    prediction h(3) / h(d); above 1 the arm needs more parameters than d = 3 for the same loss.
    An infinite multiplier or bound is drawn at the top edge and marked."""
    eff = capacity.fit.efficiency
    arms = sorted(eff, key=_arm_key(capacity))
    values = [v for a in arms for v in (eff[a].multiplier, eff[a].ci_low, eff[a].ci_high)]
    shown = [v for v in values if math.isfinite(v) and v > 0]
    top = max(shown + [1.2]) * 1.15
    bottom = max(min(shown + [0.8]) / 1.15, 1e-3)  # a bound near 0 is cut at the frame
    fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    for i, arm in enumerate(arms):
        e = eff[arm]
        m = e.multiplier if math.isfinite(e.multiplier) else top
        lo = e.ci_low if math.isfinite(e.ci_low) else m
        hi = e.ci_high if math.isfinite(e.ci_high) else top
        bars = [[max(m - lo, 0.0)], [max(hi - m, 0.0)]]
        ax.errorbar([i], [m], yerr=bars, color="C0", marker="o", capsize=4, label="measured")
        if not math.isfinite(e.multiplier):
            ax.annotate("inf", (i, top), ha="center", va="bottom", fontsize=8)
        pred = predicted_multiplier(arm, capacity.degrees.get(arm))
        if pred is not None:
            ax.plot([i], [pred], color="C3", marker="x", ms=9, ls="none", label="h(3) / h(d)")
    ax.axhline(1.0, color="0.4", linestyle=":", linewidth=1)
    ax.set_xticks(range(len(arms)), arms)
    ax.set_yscale("log")
    ax.set_ylim(bottom, top * 1.1)
    _plain_log(ax, "y")
    ax.set(xlabel="arm", ylabel="parameters needed / those of d = 3 (ratio)")
    ax.set_title("multiplier vs d = 3 with 95% CI; > 1: needs more than d = 3", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))  # one entry per kind, not per arm
    ax.legend(unique.values(), unique.keys(), fontsize=8)
    return save(fig, path)

"""The capacity part of the degree sweep's report (`degree_sweep.analysis.capacity`): design
checks, verdict, test loss per budget, scaling fits and the parameter efficiency against d = 3,
and for second-order fits the referee's comparison (the figures are in `curves`).
"""

import math
from typing import Any

from blocklab.experiments.degree_sweep.analysis import design, fit_checks
from blocklab.experiments.degree_sweep.analysis.capacity import PREDICTED_EFFECT
from blocklab.experiments.degree_sweep.analysis.cells import BY_DESIGN, EDGE, FAILED, PASSED, Check
from blocklab.experiments.degree_sweep.report import answer, referee
from blocklab.experiments.degree_sweep.report.intervals import after, computed, spread
from blocklab.experiments.degree_sweep.report.loss_table import loss_table
from blocklab.experiments.degree_sweep.report.multipliers import (
    counts_json,
    fit_table,
    inf_or,
    multiplier_json,
    multiplier_section,
    other_count_lines,
)
from blocklab.experiments.degree_sweep.report.status_line import next_lines, status_line
from blocklab.reports.markdown import criterion


def digits(values, limit: float, at_least: bool, least: int = 2) -> int:
    """The fewest significant digits (`least` or more) at which every finite one of `values`
    and `limit`, each rounded, compare as they do unrounded (a value passes at >= `limit` where
    `at_least`, else at <= it): no figure a check prints rounds across its threshold."""

    def read(v: float, n: int) -> float:
        return float(f"{v:.{n}g}")

    def ok(v: float, lim: float) -> bool:
        return v >= lim if at_least else v <= lim

    kept = [v for v in values if math.isfinite(v)]
    for n in range(least, 17):
        if all(ok(read(v, n), read(limit, n)) == ok(v, limit) for v in kept):
            return n
    return 17


def _g(value: float, n: int) -> str:
    """`value` to `n` significant digits, without an exponent."""
    said = f"{value:.{n}g}"
    return f"{float(said):f}".rstrip("0").rstrip(".") if "e" in said else said


def _budget_span(c: design.BudgetSpan) -> str:
    n = digits([c.span], design.MIN_SPAN, at_least=True)
    need = f"a scaling fit needs >= {design.MIN_BUDGETS} over >= {_g(design.MIN_SPAN, n)}x"
    text = f"every arm at {c.budgets}+ budgets over {_g(c.span, n)}x+ in actual counts ({need})"
    return text if c.passed else f"{text}; give more or wider --budgets (or --depths)"


def _share_of_trials(c, what: str, need: float, rule: str, advice: str, unit="trials") -> str:
    """A check on the share of trials (or of `unit`: a ladder's fits, one per rung) that
    `what`: how many of how many and that share, to as many digits as keep it on its side of
    the threshold, the rule, the cells lowest in it, and when it failed what to change."""
    lo, hi = c.band or (c.share, c.share)  # a check built without a band: its figure
    n = digits([100 * c.share, 100 * lo, 100 * hi], 100 * need, at_least=True, least=3)
    method = c.method.replace("over the trials", f"over the {unit}")
    text = (
        f"{c.count} of {c.trials} ({_g(100 * c.share, n)}%, {method} "
        f"[{_g(100 * lo, n)}%, {_g(100 * hi, n)}%]) {unit} {what} "
        f"(needs >= {_g(100 * need, n)}% with the whole band; {rule})"
    )
    if c.least:  # each below every trial: never shown as 100%
        k = digits([100 * f for _, _, f in c.least], 100.0, at_least=True)
        text += "; least: " + ", ".join(f"{a} at {b} ({_g(100 * f, k)}%)" for a, b, f in c.least)
    return text if c.passed else f"{text}; {_at(c)}{advice}"


def _at(c: Check) -> str:
    """What a check that did not pass says first: at its edge, the band straddles the
    threshold (more trials narrow it; what the check asks for moves it)."""
    return "the band straddles the threshold: " if c.outcome == EDGE else ""


def _plateau(c: design.Plateau) -> str:
    rule = f"plateau: {criterion(c.rule, c.tol)}"
    advice = "train longer (--steps) or with a larger batch (--batch-size)"
    return _share_of_trials(c, "plateaued", design.PLATEAU_SHARE, rule, advice)


def _tied(alpha: float, resolution: float) -> str:
    if not math.isfinite(alpha):
        return "no exponent fitted"
    return (
        f"the loss slack that is {resolution:.1%} in parameters, the resolution the run claims, "
        f"at the shared exponent alpha = {alpha:.3g}"
    )


def _converged(c: fit_checks.Converged) -> str:
    rule = (
        f"converged: the last doubling of a fit's iterations lowered its training loss by at "
        f"most {c.tol:.3g} ({_tied(c.alpha, c.resolution)}); the fits stop at a gain below "
        f"{c.certificate_tol:g}"
    )
    advice = "fit longer (--steps)"
    return _share_of_trials(c, "converged", fit_checks.CONVERGED_SHARE, rule, advice, "fits")


def _generalization(c: design.Generalization) -> str:
    ratio = design.GENERALIZATION_RATIO
    cells = c.bands or tuple((a, b, r, r, r) for a, b, r in c.failing)  # built without bands
    shown = [v for _, _, *v in cells[:4]]
    band = c.band or (c.figure, c.figure)
    n = digits([c.worst, *band, *(x for v in shown for x in v)], ratio, at_least=False, least=3)
    limit = f"{_g(ratio, n)}x"
    if math.isnan(c.worst):
        return "no cell has both a test and a training loss to compare"
    x = lambda v: f"{_g(v, n)}x"  # noqa: E731 (a ratio as the check says it)
    method = c.method if spread(*band) else f"{c.method}: none from one unit"
    nearest = f"nearest the limit {x(c.figure)}, {method}{after(*band, x, spread)}; worst "
    nearest += x(c.worst)
    if c.passed:
        return (
            f"every cell's geometric-mean test / training loss within {limit}, the whole band "
            f"({nearest})"
        )
    listed = ", ".join(
        f"{a} at {b} ({x(r)}{after(lo, hi, x, spread)})" for a, b, r, lo, hi in cells[:4]
    )
    what = "above" if c.failing else "at its edge against"
    return (
        f"geometric-mean test / training loss {what} {limit}: {listed}{_more(cells)}; "
        f"{_at(c)}grow N (--data-ratio, --max-examples) or shrink P"
    )


def _input_rank(c: fit_checks.InputRank) -> str:
    seen = ", ".join(f"{a} {r} of {n}" for a, r, n, _, _ in c.arms)
    by: dict[tuple[int, str], list[str]] = {}  # a bound the design chose: stated, not failed
    for a, b, why in c.bounds:
        by.setdefault((b, why), []).append(a)
    every = len(by) == 1 and len(c.bounds) == len(c.arms)
    listed = "; ".join(
        f"{'every arm' if every else ', '.join(arms)} at most {b} ({why})"
        for (b, why), arms in by.items()
    )
    if c.passed:
        if not listed:
            return f"every arm sees every input ({seen})"
        said = f"every arm sees every input its design lets through ({seen})"
        return f"{said}; bounded by the design, stated, not refused: {listed}"
    text = f"input Jacobian rank at initialization, before any fit: {seen}"
    if listed:
        text += f"; bounded by the design: {listed}"
    lost = ", ".join(
        f"{a} {r} of {c.allowed(a, n)}" for a, r, n, _, _ in c.arms if r < c.allowed(a, n)
    )
    return (
        f"{text}; lost inside the network: {lost}; a hidden input caps every fit: "
        "RMSNorm for LayerNorm, or a block that keeps every direction"
    )


def _curve(c: fit_checks.Curve) -> str:
    bands = {a: (lo, hi) for a, lo, hi in c.bands}
    figures = [f for *_, f in c.falls] + [x for v in bands.values() for x in v]
    n = digits(figures, fit_checks.MIN_FALL, at_least=True, least=3)
    said = {a: after(lo, hi, lambda v: f"{_g(v, n)}x", spread) for a, (lo, hi) in bands.items()}
    falls = (
        ", ".join(f"{a} {_g(f, n)}x{said.get(a, '')}" for a, _, _, _, _, f in c.falls)
        or "no arm has two"
    )
    text = f"loss falls from the smallest budget to the largest: {falls} (needs >= "
    text += f"{_g(fit_checks.MIN_FALL, n)}x per arm with the whole band, {c.method}"
    one = not all(spread(*b) for b in bands.values()) or not all(
        computed(lo, hi) for _, al, lo, hi in c.exponents if math.isfinite(al)
    )
    text += "; none from one unit: the figure alone)" if one else ")"
    alphas = ", ".join(
        f"{a} {al:.3g}{after(lo, hi)}" for a, al, lo, hi in c.exponents if math.isfinite(al)
    )
    if alphas:
        text += f"; each arm's own exponent: {alphas}"
    if c.passed:
        return text
    why = []
    if c.flat:
        why.append(f"flat or rising: {', '.join(c.flat)}")
    if c.edge_arms:
        limit = _g(fit_checks.MIN_FALL, n)
        why.append(f"a fall's band straddles {limit}x: {', '.join(c.edge_arms)}")
    if c.unbounded:
        lo, hi = c.bounds
        why.append(f"exponent interval at the fit's bounds ({lo:g}, {hi:g}) or missing: "
                   f"{', '.join(c.unbounded)}")  # fmt: skip
    return (
        f"{text}; {'; '.join(why)}: the curve measures a floor, not what parameters buy "
        "(a hidden input, or fits stuck: more restarts or steps, or wider budgets)"
    )


def _search(c: fit_checks.Search) -> str:
    bands = {a: (lo, hi) for a, lo, hi in c.bands if spread(lo, hi) and math.isfinite(hi)}
    values = [g for _, g, _ in c.gaps] + [x for v in bands.values() for x in v]
    n = digits([100 * g for g in values], 100 * c.tol, at_least=False)
    gaps = ", ".join(
        (f"{a} {_g(100 * g, n)}%" + (f" [{_g(100 * bands[a][0], n)}%, {_g(100 * bands[a][1], n)}%]"
                                     if a in bands else ""))
        if math.isfinite(g) else f"{a} - ({k} restarts)"
        for a, g, k in c.gaps
    )  # fmt: skip
    text = (
        f"best of the first K/2 restarts (chains) above the best of all K by {gaps} "
        f"(needs <= {_g(100 * c.tol, n)}% per arm with the whole band, {c.method}: "
        f"{_tied(c.alpha, c.resolution)})"
    )
    if c.passed:
        return text
    if c.outcome == EDGE:
        return f"{text}; {_at(c)}more restarts, or more units, would tell"
    ran = max((k for _, _, k in c.gaps), default=0)
    more = f"raise --restarts above {ran}" if ran >= 2 else "give --restarts 2 or more"
    return f"{text}; more restarts would still move the losses: {more}"


def _resolution_check(c: fit_checks.Resolution) -> str:
    listed = ", ".join(f"{n} {inf_or(v)}{after(lo, hi)}" for n, v, lo, hi in c.intervals)
    none = [n for n, _, lo, hi in c.intervals if not computed(lo, hi)]  # too few units
    if c.passed:
        return f"every multiplier interval is bounded: {listed}"
    word, names = ("no interval (too few units)", none) if none else ("unbounded", c.unbounded)
    return (
        f"{word}: {', '.join(names)} ({listed or 'no shared fit'}): more seeds or teachers, or "
        "budgets where the arms' curves overlap"
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
    slack = c.slack
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
    fit_checks.Converged: _converged,
    design.Generalization: _generalization,
    fit_checks.InputRank: _input_rank,
    fit_checks.Curve: _curve,
    fit_checks.Search: _search,
    fit_checks.Resolution: _resolution_check,
    design.LrEdge: _lr_edge,
    design.WidthMatch: _width,
    design.Replicates: _replicates,
    **answer.DETAIL,
}


def detail(check: Check) -> str:
    """What a design check measured, and what to change where it failed."""
    return DETAIL[type(check)](check)


def check_lines(capacity) -> list[str]:
    """The design checks, one line each; with a matched answer, the checks it rests on and then
    the scaling view's, secondary (`answer.DETAIL` words the answer's own)."""
    out = [f"- {WORD[c.outcome]}: {c.name}: {detail(c)}" for c in capacity.checks]
    if capacity.scaling_checks:
        out += ["", "the scaling-law view's checks (secondary: they gate its own fit, not the "
                "answer):"]  # fmt: skip
        out += [f"- {WORD[c.outcome]}: {c.name}: {detail(c)}" for c in capacity.scaling_checks]
    return out


# each outcome as a check line says it
WORD = {PASSED: "passed", EDGE: "EDGE", FAILED: "FAILED", BY_DESIGN: "by design"}


def check_json(c: Check) -> dict[str, Any]:
    """A design check under the keys of `--json`: its outcome, and the figure it was decided
    on with its threshold and its 95% band (None: an exact figure), by `method`."""
    return {
        "name": c.name,
        "passed": c.passed,
        "outcome": c.outcome,
        "figure": c.figure if math.isfinite(c.figure) else None,
        "threshold": c.threshold if math.isfinite(c.threshold) else None,
        "band": list(c.band) if c.band is not None else None,
        "method": c.method,
        "detail": detail(c),
    }


def converged_line(capacity) -> str | None:
    """The terminal's one line on the fits' certificates; None for an Adam run."""
    c = next((c for c in capacity.checks if isinstance(c, fit_checks.Converged)), None)
    if c is None:
        return None
    return (
        f"converged fits: {c.count} of {c.trials} (their last doubling of the iterations "
        f"gained <= {c.tol:.3g}; a fit stops at a gain < {c.certificate_tol:g})"
    )


def capacity_json(capacity) -> dict[str, Any]:
    """The capacity analysis under the keys of `--json`, its checks and status in words."""
    verdict, said = status_line(capacity)
    return {
        "budgets": capacity.budgets,
        "design_checks": [check_json(c) for c in capacity.checks],
        # with a matched answer: the scaling view's own checks (secondary), else empty
        "scaling_checks": [check_json(c) for c in capacity.scaling_checks],
        **answer.json(capacity),
        "verdict": said if verdict else None,
        # the command to run next where the run reached no verdict (None: none to give)
        "next_command": capacity.decision.next.command if capacity.decision.next else None,
        "arms": capacity.arms_json(),
        **multiplier_json(capacity),
        **counts_json(capacity),
        "resolution": capacity.fit.resolution,
        "predicted_effect": PREDICTED_EFFECT,
        "reference": capacity.fit.reference,
    }


def capacity_section(capacity):
    """Markdown: the status, the scaling plot and the multipliers first, then the design checks,
    per-budget losses and each arm's own curve."""
    lines = []  # the status line leads the report already (`markdown.put_status`)
    if capacity.matched is not None:  # the answer first; the scaling law a secondary view
        lines += ["## The answer at equal counts", "", *answer.answer_lines(capacity, True), ""]
        lines += ["![each teacher's matched multipliers](contrasts.png)", ""]
        lines += ["## The scaling-law view (secondary)", ""]
    if capacity.model is not None:
        lines += ["![test loss against parameters](scaling.png)", ""]
        lines += multiplier_section(capacity)
        # its word, its model's line, its table; with an answer, H_fd words the functional count
        if capacity.matched is None and (other := other_count_lines(capacity)):
            lines += ["## Multipliers on the other count", "", other[1], "", other[2], "",
                      *other[3:], ""]  # fmt: skip
    lines += ["## Design checks", "", *check_lines(capacity), ""]
    if said := next_lines(capacity, markdown=True):
        lines += [*said, ""]
    lines += loss_table(capacity.stats, capacity.second_order)
    if capacity.second_order:
        lines += _fit_curves_text(capacity.referee is not None)
    if capacity.referee is not None:
        lines += referee.section(capacity.referee)
    return lines + fit_table(capacity.fit)


def _fit_curves_text(refereed: bool) -> list[str]:
    panels = " and of the referee's fit from the same start" if refereed else ""
    return [
        "",
        "Loss against iterations of each arm's first trial at its middle budget"
        f"{panels}, on a log axis: where a curve flattens the fit has converged.",
        "",
        "![loss against iterations](fit_curves.png)",
    ]

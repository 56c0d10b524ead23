"""Seed 001's depth-to-width experiment (section 5.2) as statistics beside its published claims:
the test loss over seeds per depth and width with its sizes, the transitions' fit, the best depth
per budget, the design's power, the transitions as `--json` gives them, and the outcome of each
claim's test (a transition where the paper's fit puts one, b > 0, the best depth growing with the
budget). The transitions themselves are searched in `blocklab.analysis.depth_width`; the report
(`blocklab.experiments.depth_width.report`) words these."""

from __future__ import annotations

import math
from typing import Any

from blocklab.analysis import depth_width as dw
from blocklab.analysis.power import design_power
from blocklab.analysis.summary import summarize
from blocklab.errors import UserError

Z_95 = 1.6449  # the one-sided 5% point of the standard normal: the fit's test of b > 0


def summaries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The test loss over seeds per (depth, width, nominal budget), with its sizes."""
    return with_sizes(summarize(rows, ("depth", "width", "nominal"), value="test_loss"), rows)


def with_sizes(summaries: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The test-loss summaries per (depth, width), with the size 12 L dx^2 and mean accuracy."""
    out = [dict(s) for s in summaries]
    for s in out:
        s["budget"] = 12 * s["depth"] * s["width"] ** 2
        shape = (s["depth"], s["width"])
        done = [r for r in rows if r["status"] == "done" and (r["depth"], r["width"]) == shape]
        s["accuracy"] = sum(r["test_metric"] for r in done) / len(done) if done else math.nan
    return sorted(out, key=lambda s: (s["depth"], s["width"]))


def searches(summaries: list[dict[str, Any]], alpha: float) -> list[dw.TransitionSearch]:
    """The transition search between each pair of adjacent depths over the measured points."""
    by: dict[int, list[dict[str, Any]]] = {}
    for s in summaries:
        if s["n"] >= 1:
            by.setdefault(s["depth"], []).append(s)
    points = {
        depth: [
            dw.Point(s["budget"], s["width"], s["mean"], s["std"], s["n"])
            for s in sorted(group, key=lambda s: s["budget"])
        ]
        for depth, group in sorted(by.items())
    }
    return dw.transitions(points, alpha=alpha)


def fit_found(searches: list[Any]) -> tuple[dw.Fit | None, str | None]:
    """The weighted fit over the transitions found; it needs two depths (three for chi2_red)."""
    found = [s.transition for s in searches if s.transition is not None]
    if len({t.depth_shallow for t in found}) < 2:
        return None, f"{len(found)} transition(s) found; a fit needs two depths or more"
    try:
        fit = dw.fit_transitions(
            [t.depth_shallow for t in found], [t.width for t in found], [t.error for t in found]
        )
    except UserError as exc:
        return None, str(exc)
    return fit, None


def best_depths(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per budget asked for: the depth of least mean test loss, as figure 3(c) colours each
    range of sizes by its best depth (the realized sizes 12 L dx^2 differ a little by depth)."""
    by_budget: dict[int, list[dict[str, Any]]] = {}
    for s in summaries:
        if s["n"] >= 1:
            by_budget.setdefault(s["nominal"], []).append(s)
    out = []
    for budget, group in sorted(by_budget.items()):
        if len({s["depth"] for s in group}) < 2:
            continue
        best = min(group, key=lambda s: s["mean"])
        out.append({"budget": budget, "depth": best["depth"], "loss": best["mean"]})
    return out


def power_json(cfg, summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """`--json`'s `power`: the chance that the design's weakest planned comparison, two adjacent
    depths at the largest budget, finds the planned effect at `alpha` with `seeds` per point; and
    the same at the seed std this run measured (pooled over its points: the root of their mean
    variance)."""
    stds = [s["std"] for s in summaries if s["n"] >= 2]
    power = design_power(
        cfg.planned_effect, cfg.planned_sd, cfg.seeds, cfg.alpha, measured_sds=stds
    )
    return power | {"comparison": f"adjacent depths at N = {max(cfg.budgets):.3g}"}


def first_significant(search) -> Any:
    """The comparison a found transition rests on: the first where the shallower net is worse."""
    return next((c for c in search.comparisons if c.significant), None)


def transitions_json(searches) -> list[dict]:
    """`--json`'s `transitions`: one entry per adjacent pair whose transition was found, with the
    p-value it rests on and the paper's width for it (eq. 11 at the shallower depth)."""
    out = []
    for s in searches:
        if (t := s.transition) is None:
            continue
        width, error = dw.transition_width(t.depth_shallow)
        out.append(
            {
                "depth_shallow": t.depth_shallow,
                "depth_deep": t.depth_deep,
                "width": t.width,
                "width_error": t.error,
                "params": t.n_params,
                "p": first_significant(s).p_value,
                "paper_width": width,
                "paper_width_error": error,
            }
        )
    return out


def claims(searches, fit, best, sizes: list[float]) -> dict[str, Any]:
    """The tests behind the published claims, with the figures each rests on. `sizes`: the
    design's sizes 12 L dx^2 (`lo`, `hi`: their range). Per adjacent pair (`transitions`): its
    search, the comparison a found transition rests on (`first`), where the paper's fit puts
    the transition (`n`, `dn`, `width`, `error`), whether that is `inside` the measured sizes,
    and whether finding one `agrees` with it. The fit's `z` = b / sigma_b and whether b > 0
    (`b_positive`, one-sided at 5%; None without a fit). Whether the best depth is
    non-decreasing in the budget (`best_grows`; None without a best depth)."""
    lo, hi = min(sizes), max(sizes)
    out = []
    for s in searches:
        # the paper's fit, extrapolated when L is outside its depths 6-30
        n, dn = dw.n_transition(s.depth_shallow)
        width, error = dw.transition_width(s.depth_shallow)
        inside = lo <= n + dn and n - dn <= hi
        out.append(
            {
                "search": s,
                "first": first_significant(s) if s.transition is not None else None,
                "n": n,
                "dn": dn,
                "width": width,
                "error": error,
                "inside": inside,
                "agrees": (s.transition is not None) == inside,
            }
        )
    z = None
    if fit is not None:
        z = fit.b / fit.sigma_b if fit.sigma_b > 0 else float("inf")
    order = [b["depth"] for b in best]
    return {
        "lo": lo,
        "hi": hi,
        "transitions": out,
        "z": z,
        "b_positive": None if z is None else z > Z_95,
        "best_grows": all(x <= y for x, y in zip(order, order[1:], strict=False)) if best else None,
    }

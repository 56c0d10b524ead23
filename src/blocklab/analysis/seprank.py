"""The seprank experiments (seeds 000 and 001) as statistics: grid ranks over seeds per degree
and depth or per width and depth, the slope of ln(rank - 1) per layer, the orders of degrees,
the growth per layer, and the outcomes of the tests of the bounds. The two experiments' reports
(`blocklab.experiments.seprank_degree.report`, `blocklab.experiments.seprank_depth_width.report`)
word them."""

from __future__ import annotations

import math
from typing import Any

from blocklab import theory
from blocklab.analysis.stats import slope_interval
from blocklab.analysis.summary import spread
from blocklab.specs import format_degree

# closed forms, not statistics: a report may call them while drawing
FORMULAS = ("log3",)

FLOOR = 1e-14  # sigma_i / sigma_1 below this is float64 rounding (about 45 eps): not resolved


def resolved(spectrum: list[float] | None) -> int | None:
    """How many singular values (sigma_i / sigma_1, as stored) stand above float64's rounding
    floor (`FLOOR`); None where the network overflowed (no spectrum)."""
    return sum(v > FLOOR for v in spectrum) if spectrum else None


def log3(x: float | None) -> float | None:
    return math.log(x, 3) if x else None


def float_test(summaries) -> dict[str, list]:
    """The float64 rank against the exact rank: (summary, float, exact) per point where both
    were measured, and those equal, above, and below at unsaturated points (`lost`)."""
    pairs = [
        (s, s["float"]["min"], s["exact"]["min"])
        for s in summaries
        if s["exact"]["min"] is not None and s["float"]["min"] is not None
    ]
    return {
        "pairs": pairs,
        "equal": [p for p in pairs if p[1] == p[2]],
        "over": [p for p in pairs if p[1] > p[2]],
        "lost": [p for p in pairs if p[1] < p[2] and not p[0]["exact_saturated"]],
    }


# seed 000: degree-d networks


def degree_summaries(cfg, rows) -> list[dict[str, Any]]:
    """Per degree and depth: both ranks over seeds beside d^p + 1."""
    out = []
    keys = sorted({(r["degree"], r["depth"]) for r in rows})
    for d, p in keys:
        group = [r for r in rows if r["degree"] == d and r["depth"] == p]
        poly = float(d).is_integer()
        out.append(
            {
                "arm": format_degree(d),
                "degree": d,
                "depth": p,
                "block_params": group[0]["block_params"],
                # the same count under the key the command's JSON contract pins
                "params": group[0]["block_params"],
                "polynomial": poly,
                "predicted": round(d) ** p + 1 if poly else None,
                "grid": cfg.templates,
                "exact": spread([r.get("exact_rank") for r in group]),
                "exact_saturated": any(r.get("exact_saturated") for r in group),
                "float": spread([r["float_rank"] for r in group]),
                "float_saturated": any(r.get("float_saturated") for r in group),
                "resolved": spread([resolved(r.get("spectrum")) for r in group]),
                "n": len(group),
            }
        )
    return out


def slope_fit(summaries, d: float, alpha: float) -> dict[str, Any] | None:
    """Least squares of ln(rank - 1) on p over every unsaturated exact rank (all seeds): rank - 1
    is the polynomial degree D for two scalar variables, so the slope estimates ln d (eq. 16)."""
    xs, ys = [], []
    for s in summaries:
        if s["degree"] == d and not s["exact_saturated"] and s["exact"]["min"] is not None:
            for r in s["exact"]["values"]:
                if r and r > 1:
                    xs.append(s["depth"])
                    ys.append(math.log(r - 1))
    fit = slope_interval(xs, ys, alpha)
    if fit is None:
        return None
    slope, half, points = fit
    return {"slope": slope, "half_width": half, "points": points, "depths": sorted(set(xs))}


def slope_agrees(fit: dict[str, Any], d: float) -> bool:
    """Whether the fitted slope per layer is within its interval of ln d."""
    return abs(fit["slope"] - math.log(d)) <= max(fit["half_width"], 1e-9)


def order(values: dict[str, float], tol: dict[str, float]) -> str:
    """'3 > 2 = 4': descending, ties where two values agree within their tolerances (or to 1e-9
    relative); names within a tie are sorted, so equal orders read the same."""
    names = sorted(values, key=lambda k: -values[k])
    groups = [[names[0]]]
    for a, b in zip(names, names[1:], strict=False):
        tie = abs(values[a] - values[b]) <= max(tol[a] + tol[b], 1e-9 * abs(values[a]))
        if tie:
            groups[-1].append(b)
        else:
            groups.append([b])
    return " > ".join(" = ".join(sorted(g, key=float_name)) for g in groups)


def float_name(name: str) -> float:
    return math.e if name == "e" else float(name)


def slopes_per_parameter(cfg, summaries) -> list[dict[str, Any]]:
    """Per polynomial degree: its slope fit (None where too few ranks), and that slope, its
    half-width and h(d) per block parameter (d w^2 per layer)."""
    w2 = cfg.width**2
    out = []
    for d in sorted({s["degree"] for s in summaries if s["polynomial"]}):
        fit = slope_fit(summaries, d, cfg.alpha)
        row = {"degree": d, "name": format_degree(d), "fit": fit}
        if fit is not None:
            row["slope"] = fit["slope"] / (d * w2)
            row["tol"] = fit["half_width"] / (d * w2)
            row["h"] = theory.h(d) / w2
            row["agrees"] = slope_agrees(fit, d)
        out.append(row)
    return out


def rank_law(summaries, d: float) -> tuple[list, list]:
    """The unsaturated points of degree d, and those whose exact ranks are not all d^p + 1."""
    group = [s for s in summaries if s["degree"] == d and not s["exact_saturated"]]
    return group, [s for s in group if set(s["exact"]["values"]) != {s["predicted"]}]


def equal_budgets(cfg, summaries) -> list[dict[str, Any]]:
    """Budgets B = 12 k w^2, where d = 2, 3, 4 all have integer depth p = 12 k / d: per k, the
    points, whether a rank saturated (the last then), and the measured and predicted ranks."""
    by = {(s["degree"], s["depth"]): s for s in summaries if s["polynomial"]}
    if not {2.0, 3.0, 4.0} <= {d for d, _ in by}:
        return []
    out = []
    for k in range(1, cfg.max_depth):
        points = {d: by.get((d, 12 * k // int(d))) for d in (2.0, 3.0, 4.0)}
        if any(s is None for s in points.values()):
            break
        if any(s["exact_saturated"] for s in points.values()):
            out.append({"k": k, "points": points, "saturated": True})
            break
        ranks = {format_degree(d): s["exact"]["min"] for d, s in points.items()}
        predicted = {format_degree(d): s["predicted"] for d, s in points.items()}
        out.append(
            {
                "k": k,
                "points": points,
                "saturated": False,
                "ranks": ranks,
                "predicted": predicted,
                "agrees": ranks == predicted,
            }
        )
    return out


# seed 001: depth and width


def monomials(dx: int, depth: int) -> int:
    """C(dx + C, dx), C = (3^L - 1)/2 (the inputs one output integrates, seed 001 eq. 4): the
    number of monomials of degree <= C in dx variables. A reference the N = 2 grid is compared
    with, not a bound from the seeds."""
    return math.comb(dx + (3**depth - 1) // 2, dx)


def depth_width_summaries(cfg, rows) -> list[dict[str, Any]]:
    """Per width and depth: both ranks over seeds beside the theorems' bounds."""
    out = []
    for dx in cfg.widths:
        for depth in cfg.depths:
            group = [r for r in rows if r["width"] == dx and r["depth"] == depth]
            lower, upper = theory.sep_rank_bounds(depth, dx, cfg.heads)
            exact = [r["exact_rank"] for r in group]
            floats = [r["float_rank"] for r in group]
            out.append(
                {
                    "width": dx,
                    "depth": depth,
                    "heads": cfg.heads,
                    "regime": theory.sep_rank_regime(depth, dx),
                    "log3_lower": lower,
                    "log3_upper": upper,
                    "grid": min(group[0]["shape"] or [cfg.templates] * 2),
                    "exact": spread(exact),
                    "exact_saturated": any(r["exact_saturated"] for r in group),
                    "float": spread(floats),
                    "float_saturated": any(r.get("float_saturated") for r in group),
                    "float_rank_at": group[0].get("float_rank_at"),
                    "monomials": monomials(dx, depth) if cfg.positions == 2 else None,
                    "n": len(group),
                }
            )
    return out


def growth_steps(summaries) -> list[dict[str, Any]]:
    """log3 rank(L') / log3 rank(L) between consecutive measured depths of one width, where both
    exact ranks are unsaturated: ~3^(L'-L) when log3 sep ~ 3^L (Theorem 1), (L'/L) when
    log3 sep ~ L (Theorem 2). A step is below the threshold when L' < log3 dx, above when
    L > log3 dx."""
    steps = []
    by_width: dict[int, list] = {}
    for s in summaries:
        by_width.setdefault(s["width"], []).append(s)
    for dx, group in by_width.items():
        group.sort(key=lambda s: s["depth"])
        for s, t in zip(group, group[1:], strict=False):
            if s["exact_saturated"] or t["exact_saturated"] or s["exact"]["min"] in (None, 1):
                continue
            side = (
                "below"
                if t["regime"] == "theorem 1"
                else "above"
                if s["regime"] == "theorem 2"
                else "across"
            )
            growth = math.log(t["exact"]["min"]) / math.log(s["exact"]["min"])
            steps.append({"width": dx, "from": s["depth"], "to": t["depth"], "side": side})
            steps[-1]["growth"] = growth
    return steps


def bounds(summaries) -> dict[str, Any]:
    """The tests of seed 001's bounds on the measured points: those over their upper bound,
    those whose lower bound the grid can reach and those of them under it, how many lower
    bounds are trivial (<= 0), the points whose seeds disagree, and the growth steps with
    whether every step below the threshold grows more than every step above (None: untestable)."""
    measured = [s for s in summaries if s["exact"]["max"] is not None]
    reach = [s for s in measured if s["log3_lower"] > 0 and 3 ** s["log3_lower"] <= s["grid"]]
    steps = growth_steps(summaries)
    below = [s["growth"] for s in steps if s["side"] == "below"]
    above = [s["growth"] for s in steps if s["side"] == "above"]
    return {
        "measured": measured,
        "over": [s for s in measured if log3(s["exact"]["max"]) > s["log3_upper"] + 1e-9],
        "reach": reach,
        "under": [s for s in reach if log3(s["exact"]["min"]) < s["log3_lower"] - 1e-9],
        "trivial": sum(s["log3_lower"] <= 0 for s in measured),
        "apart": [s for s in measured if s["exact"]["min"] != s["exact"]["max"]],
        "steps": steps,
        "threshold": min(below) > max(above) if below and above else None,
    }

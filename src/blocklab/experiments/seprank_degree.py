"""`blocklab seprank degree` (seed 000 eq. 16-17, Task 1): does the separation rank of a
degree-d network grow like d^p, and which d grows fastest per parameter?

Per-token polynomial networks of bias-free degree-d blocks (no norm, no residual, no
activation), a vector network on N = 2 scalar variables (x, y). There the separation rank is
known in closed form: a polynomial f = sum c_ab x^a y^b of degree D has sep = rank(C) <= D + 1,
and = D + 1 when every top coefficient c_(a, D-a) is nonzero (C is then triangular after
reversing its columns, with a nonzero diagonal). The network has degree
D = d^p (eq. 16) with generic, nonzero top coefficients, so sep = d^p + 1, and an M-template
grid sees it exactly when M > d^p (the Vandermonde of distinct templates has full rank). More
variables would only give monomial-count bounds; two variables make the prediction exact. The
real degree e (`fractional`) is not a polynomial: its grid rank is bounded by the grid alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from blocklab import theory
from blocklab.experiments import EXPERIMENTS, Command, Experiment, Findings
from blocklab.experiments._seprank import (
    build_net,
    check_grid,
    float_finding,
    help_text,
    measure,
    measured,
    spread_of,
    values_text,
)
from blocklab.numerics import RTOL
from blocklab.specs import format_degree
from blocklab.store import Store


@dataclass(frozen=True)
class DegreeConfig:
    degrees: tuple[str, ...] = field(
        default=("2", "e", "3", "4"), metadata=help_text("layer degrees d (integer: poly, real: e)")
    )
    width: int = field(default=8, metadata=help_text("width w of every layer"))
    templates: int = field(default=512, metadata=help_text("templates M per variable (M x M grid)"))
    max_depth: int = field(
        default=12, metadata=help_text("deepest p; each degree stops at its first saturated depth")
    )
    seeds: int = field(default=3, metadata=help_text("weight and template draws per point"))
    rtol: float = field(default=RTOL, metadata=help_text("relative tolerance of the float64 rank"))
    alpha: float = field(default=0.05, metadata=help_text("1 - level of the slope intervals"))

    def __post_init__(self):
        if not self.degrees:
            raise ValueError("give at least one degree")
        for d in self.degrees:
            _degree(d)  # a single degree: 2, e, 3, ...
        if min(self.width, self.seeds, self.max_depth, self.templates) < 1:
            raise ValueError("width, seeds, max_depth and templates must be >= 1")
        check_grid(2, self.templates)
        if not self.rtol > 0 or not 0 < self.alpha < 1:
            raise ValueError("rtol must be > 0 and alpha in (0, 1)")

    @classmethod
    def full(cls) -> DegreeConfig:
        return cls(width=16, templates=2048, seeds=5)


def _degree(text: str) -> float:
    from blocklab.models import parse_arm

    arm = parse_arm(text)
    if arm.block != "poly" or len(arm.degrees) != 1:
        raise ValueError(f"degrees must be single layer degrees such as 2, e or 3, got {text!r}")
    return arm.degrees[0]


def degree_depths(d: float, cfg: DegreeConfig) -> list[int]:
    """1, 2, ... up to the first depth whose degree d^p reaches the grid (rank >= M there)."""
    depths = []
    for p in range(1, cfg.max_depth + 1):
        depths.append(p)
        if d**p + 1 > cfg.templates:
            break
    return depths


def run(cfg: DegreeConfig, store: Store, *, resources=None, progress=True) -> Findings:
    """Every point in this process, on the CPU: the exact rank is CPU arithmetic (`resources` is
    not used)."""
    from blocklab.measures.exact_rank import PRIME
    from blocklab.models import parse_arm

    rows = []
    for text in cfg.degrees:
        arm, d = parse_arm(text), _degree(text)
        for p in degree_depths(d, cfg):
            point = {"block": arm.label, "depth": p, "width": cfg.width, "positions": 2}
            point |= {"templates": cfg.templates, "rtol": cfg.rtol, "prime": PRIME}
            for seed in range(cfg.seeds):

                def compute(arm=arm, p=p, seed=seed, d=d):
                    net = build_net(arm, p, cfg.width, 2, 1, seed)
                    poly = float(d).is_integer()
                    return measure(net, 2, 1, cfg.templates, seed, cfg.rtol, exact=poly)

                rec = measured(store, "seprank-degree", point, seed, compute, progress)
                row = {"arm": format_degree(d), "degree": d, "depth": p, "seed": seed}
                rows.append(row | {"params": arm.block_params(p, cfg.width)} | rec["metrics"])
    summaries = degree_summaries(cfg, rows)
    return Findings(rows, summaries, degree_findings(cfg, summaries))


def degree_summaries(cfg: DegreeConfig, rows) -> list[dict[str, Any]]:
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
                "params": group[0]["params"],
                "polynomial": poly,
                "predicted": round(d) ** p + 1 if poly else None,
                "grid": cfg.templates,
                "exact": spread_of([r.get("exact_rank") for r in group]),
                "exact_saturated": any(r.get("exact_saturated") for r in group),
                "float": spread_of([r["float_rank"] for r in group]),
                "float_saturated": any(r.get("float_saturated") for r in group),
                "n": len(group),
            }
        )
    return out


def slope_fit(summaries, d: float, alpha: float) -> dict[str, Any] | None:
    """Least squares of ln(rank - 1) on p over every unsaturated exact rank (all seeds): rank - 1
    is the polynomial degree D for two scalar variables, so the slope estimates ln d (eq. 16)."""
    from scipy import stats

    xs, ys = [], []
    for s in summaries:
        if s["degree"] == d and not s["exact_saturated"] and s["exact"]["min"] is not None:
            for r in s["exact"]["values"]:
                if r and r > 1:
                    xs.append(s["depth"])
                    ys.append(math.log(r - 1))
    if len(set(xs)) < 2:
        return None
    fit = stats.linregress(xs, ys)
    half = stats.t.ppf(1 - alpha / 2, len(xs) - 2) * fit.stderr if len(xs) > 2 else math.inf
    return {"slope": fit.slope, "half_width": half, "points": len(xs), "depths": sorted(set(xs))}


def _order(values: dict[str, float], tol: dict[str, float]) -> str:
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


def degree_findings(cfg: DegreeConfig, summaries) -> list[dict[str, Any]]:
    out = []
    w2 = cfg.width**2
    slopes, tols, h = {}, {}, {}
    for d in sorted({s["degree"] for s in summaries if s["polynomial"]}):
        name = format_degree(d)
        group = [s for s in summaries if s["degree"] == d and not s["exact_saturated"]]
        wrong = [s for s in group if set(s["exact"]["values"]) != {s["predicted"]}]
        out.append(
            {
                "part": "rank = d^p + 1",
                "setting": f"d={name}, p={','.join(str(s['depth']) for s in group)}",
                "predicted": "sep = d^p + 1: degree d^p (seed 000 eq. 16), two scalar variables",
                "measured": "exact ranks "
                + ", ".join(values_text(s["exact"]) for s in group)
                + f"; float64 rank equal at p = {_float_reach(group)}",
                "verdict": "exact agreement at every unsaturated depth and seed"
                if group and not wrong
                else "not testable at this grid"
                if not group
                else "DIFFERS at " + ", ".join(f"p={s['depth']}" for s in wrong),
            }
        )
        fit = slope_fit(summaries, d, cfg.alpha)
        if fit is None:
            continue
        slopes[name] = fit["slope"] / (d * w2)
        tols[name], h[name] = fit["half_width"] / (d * w2), theory.h(d) / w2
        agrees = abs(fit["slope"] - math.log(d)) <= max(fit["half_width"], 1e-9)
        out.append(
            {
                "part": "slope per layer",
                "setting": f"d={name}, p={fit['depths'][0]}..{fit['depths'][-1]}, "
                f"{fit['points']} ranks",
                "predicted": f"ln(rank - 1) grows by ln d = {math.log(d):.4f} per layer",
                "measured": f"{fit['slope']:.4f} ± {fit['half_width']:.2g} "
                f"({1 - cfg.alpha:.0%} interval); per parameter {slopes[name] * w2:.4f} / w^2",
                "verdict": "agrees" if agrees else "DIFFERS",
            }
        )
    if len(slopes) >= 2:
        measured_order, predicted_order = _order(slopes, tols), _order(h, dict.fromkeys(h, 0.0))
        out.append(
            {
                "part": "per parameter",
                "setting": f"slope of ln(rank - 1) per block parameter (d w^2 per layer, w = "
                f"{cfg.width})",
                "predicted": f"ordered by h(d) = ln d / d: {predicted_order} (seed 000 eq. 5, 17)",
                "measured": measured_order
                + " ("
                + ", ".join(f"d={k}: {v * w2:.4f}/w^2" for k, v in slopes.items())
                + ")",
                "verdict": "matches h(d)" if measured_order == predicted_order else "differs",
            }
        )
    out += _equal_budget(cfg, summaries)
    out.append(float_finding([s for s in summaries if s["polynomial"]], cfg.rtol))
    for s in [s for s in summaries if not s["polynomial"]][:1]:
        group = [t for t in summaries if t["degree"] == s["degree"]]
        out.append(
            {
                "part": "real degree",
                "setting": f"d={s['arm']} (fractional block), p=1..{group[-1]['depth']}",
                "predicted": "not a polynomial: no d^p law; the grid (M) is its only bound",
                "measured": "float64 ranks "
                + ", ".join(
                    values_text(t["float"]) + (" (sat.)" if t["float_saturated"] else "")
                    for t in group
                ),
                "verdict": "kept out of the polynomial comparison",
            }
        )
    return out


def _equal_budget(cfg: DegreeConfig, summaries) -> list[dict[str, Any]]:
    """Budgets B = 12 k w^2, where d = 2, 3, 4 all have integer depth p = 12 k / d."""
    by = {(s["degree"], s["depth"]): s for s in summaries if s["polynomial"]}
    degrees = sorted({d for d, _ in by})
    if not {2.0, 3.0, 4.0} <= set(degrees):
        return []
    out = []
    for k in range(1, cfg.max_depth):
        points = {d: by.get((d, 12 * k // int(d))) for d in (2.0, 3.0, 4.0)}
        if any(s is None for s in points.values()):
            break
        budget = f"B = {12 * k} w^2"
        if any(s["exact_saturated"] for s in points.values()):
            out.append(
                {
                    "part": "equal budget",
                    "setting": budget,
                    "predicted": "d = 3 highest",
                    "measured": "saturated grid",
                    "verdict": "not testable at this grid",
                }
            )
            break
        ranks = {format_degree(d): s["exact"]["min"] for d, s in points.items()}
        predicted = {format_degree(d): s["predicted"] for d, s in points.items()}
        order = _order(ranks, dict.fromkeys(ranks, 0.0))
        out.append(
            {
                "part": "equal budget",
                "setting": f"{budget}: p = " + ", ".join(f"{12 * k // int(d)}" for d in points),
                "predicted": "d^p + 1 = "
                + ", ".join(f"{v} (d={d})" for d, v in predicted.items())
                + f": {_order(predicted, dict.fromkeys(predicted, 0.0))}",
                "measured": ", ".join(f"{v} (d={d})" for d, v in ranks.items()) + f": {order}",
                "verdict": "agrees" if ranks == predicted else "DIFFERS",
            }
        )
    return out


def _float_reach(group) -> str:
    ok = [str(s["depth"]) for s in group if s["float"]["values"] == s["exact"]["values"]]
    return ",".join(ok) if ok else "none"


@EXPERIMENTS.register
class SeprankDegree(Experiment):
    Config = DegreeConfig
    run = staticmethod(run)
    report = "blocklab.reports.seprank_degree"
    commands = (
        Command(
            "seprank degree",
            "seed 000: rank of degree-d networks vs depth",
            "runs/seprank-degree",
        ),
    )
    pool = False  # the exact rank is CPU arithmetic: one process, no workers or devices

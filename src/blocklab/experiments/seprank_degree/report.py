"""Report of `blocklab seprank degree` (seed 000, eq. 16-17): grid ranks of degree-d networks
against d^p + 1, per depth and per parameter."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from blocklab.analysis import seprank
from blocklab.analysis.seprank import FLOOR, order
from blocklab.reports import Findings, Report, markdown
from blocklab.reports._seprank import (
    EXACT_NOTE,
    FLOAT_NOTE,
    float_finding,
    ranks,
    values_text,
)
from blocklab.reports.figures import arm_color, save_figure
from blocklab.reports.markdown import findings_table

QUESTION = (
    "Seed 000 (eq. 16-17, Task 1): a stack of p degree-d layers is a polynomial of degree d^p, "
    "and at a budget B = d p N_dx its degree (d^(1/d))^(B / N_dx) is largest for d = e, d = 3 "
    "among integers. Does the separation rank grow like d^p, and which degree grows it fastest "
    "per parameter? Here: bias-free per-token polynomial networks (norm none, no residual, no "
    "activation) on two scalar variables (x, y), where sep = degree + 1 exactly, measured on an "
    "M x M grid; exact ranks over F_p and float64 numerical ranks."
)


def analyze(cfg, trials) -> Findings:
    """The ranks over seeds per degree and depth, and the findings."""
    summaries = seprank.degree_summaries(cfg, trials.rows)
    return Findings(trials.rows, summaries, degree_findings(cfg, summaries), trials.failed)


def write(out_dir, cfg, trials) -> Report:
    result = analyze(cfg, trials)
    out = Path(out_dir)
    figs = [
        _degree_plot(result.summaries, cfg, out / "seprank_degree.png"),
        _budget_plot(result.summaries, out / "seprank_degree_params.png"),
    ]
    resolved = f"float64 resolves (sigma > {FLOOR:g} sigma_1)"
    header = ["d", "p", "block params", "d^p + 1", "exact rank (F_p)", "float64 rank", resolved]
    header.append("seeds")
    rows = [
        [
            s["arm"],
            str(s["depth"]),
            str(s["block_params"]),
            str(s["predicted"] or "- (not a polynomial)"),
            ranks(s["exact"], s["exact_saturated"])
            if s["polynomial"]
            else "none (not a polynomial)",
            ranks(s["float"], s["float_saturated"]),
            values_text(s["resolved"]),
            str(s["n"]),
        ]
        for s in result.summaries
    ]
    notes = [
        "Why d^p + 1: for two scalar variables a polynomial f = sum c_ab x^a y^b has sep = "
        "rank(C); at degree D = d^p with nonzero top coefficients C is triangular after reversing "
        "its columns, so sep = D + 1, and an M-template grid shows it exactly when M > D. The "
        "rank does not depend on the width here (even width 1 gives D + 1): this tests eq. 16's "
        "degree count through the separation rank, not width effects.",
        "Slopes: least squares of ln(rank - 1) (the degree) on p over every unsaturated exact "
        f"rank and seed, with a {1 - cfg.alpha:.0%} t-interval; per parameter divides by "
        "the block parameters of one layer, d w^2. h(3) > h(2) = h(4) exactly (ln 4 / 4 = "
        "ln 2 / 2), so 2 and 4 must tie.",
        "Equal budgets B = 12 k w^2 give integer depths p = 6k, 4k, 3k for d = 2, 3, 4; only "
        "budgets whose three ranks fit the grid are compared.",
        "d = e is the `fractional` block, whose factor spow(z, e - 2) is not a polynomial: "
        "there is no exact rank (F_p arithmetic computes polynomials only) and no d^p law; its "
        "float64 grid rank is bounded by the grid only, and falls with depth for float64's "
        "dynamic range (below), not for the function's.",
        f"float64 resolves: how many singular values stand above float64's rounding floor, "
        f"{FLOOR:g} of the largest: a float64 rank at an rtol above that floor cannot exceed "
        "it, whatever the exact rank.",
        EXACT_NOTE,
        FLOAT_NOTE.format(rtol=cfg.rtol),
    ]
    return markdown.report(
        out,
        cfg,
        result,
        title="Separation rank of degree-d polynomial networks (seed 000)",
        question=QUESTION,
        findings=findings_table(result.findings),
        results=(header, rows),
        figures=figs,
        notes=notes,
    )


def degree_findings(cfg, summaries) -> list[dict[str, Any]]:
    """The d^p + 1 law per degree, its slope per layer and per parameter, equal budgets, the
    float64 rank, and the real degree kept apart: the tests of `analysis.seprank`, worded."""
    out, slopes, tols, h = [], {}, {}, {}
    for row in seprank.slopes_per_parameter(cfg, summaries):
        d, name, fit = row["degree"], row["name"], row["fit"]
        out.append(_rank_law(*seprank.rank_law(summaries, d), name))
        if fit is None:
            continue
        slopes[name], tols[name], h[name] = row["slope"], row["tol"], row["h"]
        per_w2 = slopes[name] * cfg.width**2
        out.append(_slope_per_layer(fit, row["agrees"], d, name, per_w2, cfg.alpha))
    if len(slopes) >= 2:
        out.append(_per_parameter(slopes, tols, h, cfg.width))
    out += _equal_budget(seprank.equal_budgets(cfg, summaries))
    polynomial = [s for s in summaries if s["polynomial"]]
    out.append(float_finding(seprank.float_test(polynomial), cfg.rtol))
    return out + _real_degree(summaries)


def _rank_law(group, wrong, name: str) -> dict[str, Any]:
    return {
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


def _slope_per_layer(fit, agrees: bool, d: float, name: str, per_w2: float, alpha: float):
    """The fitted growth of ln(rank - 1) per layer against ln d; `per_w2`: that slope per
    block parameter, times w^2."""
    return {
        "part": "slope per layer",
        "setting": f"d={name}, p={fit['depths'][0]}..{fit['depths'][-1]}, {fit['points']} ranks",
        "predicted": f"ln(rank - 1) grows by ln d = {math.log(d):.4f} per layer",
        "measured": f"{fit['slope']:.4f} ± {fit['half_width']:.2g} "
        f"({1 - alpha:.0%} interval); per parameter {per_w2:.4f} / w^2",
        "verdict": "agrees" if agrees else "DIFFERS",
    }


def _per_parameter(slopes, tols, h, width: int) -> dict[str, Any]:
    """The degrees ordered by their slope per block parameter, against the order of h(d)."""
    w2 = width**2
    measured_order, predicted_order = order(slopes, tols), order(h, dict.fromkeys(h, 0.0))
    return {
        "part": "per parameter",
        "setting": f"slope of ln(rank - 1) per block parameter (d w^2 per layer, w = {width})",
        "predicted": f"ordered by h(d) = ln d / d: {predicted_order} (seed 000 eq. 5, 17)",
        "measured": measured_order
        + " ("
        + ", ".join(f"d={k}: {v * w2:.4f}/w^2" for k, v in slopes.items())
        + ")",
        "verdict": "matches h(d)" if measured_order == predicted_order else "differs",
    }


def _real_degree(summaries) -> list[dict[str, Any]]:
    """The fractional block (d = e), which has no d^p law: its float64 ranks, apart."""
    real = [s for s in summaries if not s["polynomial"]]
    if not real:
        return []
    group = [t for t in summaries if t["degree"] == real[0]["degree"]]
    measured = ", ".join(
        values_text(t["float"]) + (" (sat.)" if t["float_saturated"] else "") for t in group
    )
    return [
        {
            "part": "real degree",
            "setting": f"d={real[0]['arm']} (fractional block), p=1..{group[-1]['depth']}",
            "predicted": "not a polynomial: no exact rank over F_p, no d^p law; the grid (M) "
            "is its only bound",
            "measured": f"float64 ranks {measured}; they fall with depth for float64's dynamic "
            "range, not the function's rank: its values grow like abs(z)^(e^p), spanning more "
            "orders of magnitude than float64's 16 digits",
            "verdict": "kept out of the polynomial comparison",
        }
    ]


def _equal_budget(budgets) -> list[dict[str, Any]]:
    """Budgets B = 12 k w^2 (`analysis.seprank.equal_budgets`), worded."""
    out = []
    for b in budgets:
        k, points = b["k"], b["points"]
        budget = f"B = {12 * k} w^2"
        if b["saturated"]:
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
        ranks, predicted = b["ranks"], b["predicted"]
        out.append(
            {
                "part": "equal budget",
                "setting": f"{budget}: p = " + ", ".join(f"{12 * k // int(d)}" for d in points),
                "predicted": "d^p + 1 = "
                + ", ".join(f"{v} (d={d})" for d, v in predicted.items())
                + f": {order(predicted, dict.fromkeys(predicted, 0.0))}",
                "measured": ", ".join(f"{v} (d={d})" for d, v in ranks.items())
                + f": {order(ranks, dict.fromkeys(ranks, 0.0))}",
                "verdict": "agrees" if b["agrees"] else "DIFFERS",
            }
        )
    return out


def _float_reach(group) -> str:
    ok = [str(s["depth"]) for s in group if s["float"]["values"] == s["exact"]["values"]]
    return ",".join(ok) if ok else "none"


def _degree_plot(summaries, cfg, path: Path) -> str:
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in dict.fromkeys(s["arm"] for s in summaries):
        group = [s for s in summaries if s["arm"] == arm]
        color = arm_color(f"d={arm}")  # the degree sweep's arm of this degree
        ps = [s["depth"] for s in group]
        if group[0]["polynomial"]:
            ax.plot(ps, [s["predicted"] for s in group], color=color, ls="--", lw=0.8)
            _points(ax, ps, group, "exact", color, "o", f"d={arm} exact (dashed: d^p + 1)")
        _points(ax, ps, group, "float", color, "x", f"d={arm} float64")
    ax.axhline(cfg.templates, color="k", ls=":", lw=0.8, label="grid limit M")
    ax.set_yscale("log")
    ax.set(xlabel="depth p (layers)", ylabel="grid rank (count)", title="rank vs depth")
    ax.legend(fontsize=6)
    return save_figure(fig, path)


def _points(ax, ps, group, key, color, marker, label) -> None:
    """Mean rank with min-max bars over seeds; saturated points open."""
    xs = [p for p, s in zip(ps, group, strict=True) if s[key]["min"]]
    vals = [s[key] for s in group if s[key]["min"]]
    if not xs:
        return
    means = [v["mean"] for v in vals]
    err = [[m - v["min"] for m, v in zip(means, vals, strict=True)]]
    err.append([v["max"] - m for m, v in zip(means, vals, strict=True)])
    ls = "-" if key == "exact" else ":"
    ax.errorbar(xs, means, yerr=err, color=color, ls=ls, lw=0.8, marker="none", capsize=2)
    sat = [s[f"{key}_saturated"] for s in group if s[key]["min"]]
    for x, m, o in zip(xs, means, sat, strict=True):
        ax.plot(x, m, marker="o" if o else marker, mfc="none" if o else color, mec=color, ms=5)
        if o:
            ax.annotate(">=", (x, m), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.plot([], [], color=color, marker=marker, ls=ls, label=label)


def _budget_plot(summaries, path: Path) -> str:
    """ln rank against the budgeted layer parameters d p w^2: the slope is the growth per
    parameter, h(d) / w^2 when rank = d^p + 1."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in dict.fromkeys(s["arm"] for s in summaries):
        group = [s for s in summaries if s["arm"] == arm]
        color = arm_color(f"d={arm}")
        key = "exact" if group[0]["polynomial"] else "float"
        pts = [
            (s["block_params"], math.log(s[key]["mean"]), s[f"{key}_saturated"])
            for s in group
            if s[key]["min"]
        ]
        if group[0]["polynomial"]:
            ax.plot(
                [s["block_params"] for s in group],
                [math.log(s["predicted"]) for s in group],
                color=color,
                ls="--",
                lw=0.8,
            )
        label = f"d={arm}" + ("" if key == "exact" else " (float64, not a polynomial)")
        ax.plot(
            [p for p, _, _ in pts],
            [y for _, y, _ in pts],
            color=color,
            ls="-" if key == "exact" else ":",
            marker="o",
            label=label,
        )
        for x, y, sat in pts:
            if sat:
                ax.plot(x, y, marker="o", mfc="white", mec=color, ms=6)
    ax.set(
        xlabel="budgeted layer parameters d p w^2 (count)",
        ylabel="ln rank (dimensionless)",
        title="rank vs parameters (dashed: ln(d^p + 1))",
    )
    ax.legend(fontsize=7)
    return save_figure(fig, path)

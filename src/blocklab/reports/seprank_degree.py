"""Report of `blocklab seprank degree` (seed 000, eq. 16-17): grid ranks of degree-d networks
against d^p + 1, per depth and per parameter."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt

from blocklab.reports import Report, markdown
from blocklab.reports._seprank import EXACT_NOTE, FLOAT_NOTE, ranks
from blocklab.reports.figures import save_figure
from blocklab.reports.markdown import findings_table

QUESTION = (
    "Seed 000 (eq. 16-17, Task 1): a stack of p degree-d layers is a polynomial of degree d^p, "
    "and at a budget B = d p N_dx its degree (d^(1/d))^(B / N_dx) is largest for d = e, d = 3 "
    "among integers. Does the separation rank grow like d^p, and which degree grows it fastest "
    "per parameter? Here: bias-free per-token polynomial networks (norm none, no residual, no "
    "activation) on two scalar variables (x, y), where sep = degree + 1 exactly, measured on an "
    "M x M grid; exact ranks over F_p and float64 numerical ranks."
)


def write(out_dir, cfg, result) -> Report:
    out = Path(out_dir)
    figs = [
        _degree_plot(result.summaries, cfg, out / "seprank_degree.png"),
        _budget_plot(result.summaries, out / "seprank_degree_params.png"),
    ]
    header = ["d", "p", "block params", "d^p + 1", "exact rank", "float64 rank", "seeds"]
    rows = [
        [
            s["arm"],
            str(s["depth"]),
            str(s["params"]),
            str(s["predicted"] or "- (not a polynomial)"),
            ranks(s["exact"], s["exact_saturated"]),
            ranks(s["float"], s["float_saturated"]),
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
        "there is no exact rank and no d^p law; its float64 grid rank is bounded by the grid only.",
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


def _degree_plot(summaries, cfg, path: Path) -> str:
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, arm in enumerate(dict.fromkeys(s["arm"] for s in summaries)):
        group = [s for s in summaries if s["arm"] == arm]
        color = f"C{i}"
        ps = [s["depth"] for s in group]
        if group[0]["polynomial"]:
            ax.plot(ps, [s["predicted"] for s in group], color=color, ls="--", lw=0.8)
            _points(ax, ps, group, "exact", color, "o", f"d={arm} exact (dashed: d^p + 1)")
        _points(ax, ps, group, "float", color, "x", f"d={arm} float64")
    ax.axhline(cfg.templates, color="k", ls=":", lw=0.8, label="grid limit M")
    ax.set_yscale("log")
    ax.set(xlabel="depth p", ylabel="grid rank", title="rank vs depth")
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
    for i, arm in enumerate(dict.fromkeys(s["arm"] for s in summaries)):
        group = [s for s in summaries if s["arm"] == arm]
        key = "exact" if group[0]["polynomial"] else "float"
        pts = [
            (s["params"], math.log(s[key]["mean"]), s[f"{key}_saturated"])
            for s in group
            if s[key]["min"]
        ]
        if group[0]["polynomial"]:
            ax.plot(
                [s["params"] for s in group],
                [math.log(s["predicted"]) for s in group],
                color=f"C{i}",
                ls="--",
                lw=0.8,
            )
        label = f"d={arm}" + ("" if key == "exact" else " (float64, not a polynomial)")
        ax.plot(
            [p for p, _, _ in pts],
            [y for _, y, _ in pts],
            color=f"C{i}",
            ls="-" if key == "exact" else ":",
            marker="o",
            label=label,
        )
        for x, y, sat in pts:
            if sat:
                ax.plot(x, y, marker="o", mfc="white", mec=f"C{i}", ms=6)
    ax.set(
        xlabel="budgeted layer parameters d p w^2",
        ylabel="ln rank",
        title="rank vs parameters (dashed: ln(d^p + 1))",
    )
    ax.legend(fontsize=7)
    return save_figure(fig, path)

"""The depth-to-width report: loss per depth and size, transitions, the fit and its projection,
drawn in the manner of seed 001's figures 2, 3 and 4 from the run's own trials (`loss_plot`,
`fit_plot`, `projection_plot`, from the report's `Result`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from blocklab.analysis import depth_width as dw
from blocklab.experiments.depth_width import analysis as claims
from blocklab.experiments.depth_width.experiment import FIT_FILE, width_for
from blocklab.formatting import number
from blocklab.reports import Report, markdown
from blocklab.reports.figures import save_figure
from blocklab.reports.markdown import findings_table

QUESTION = (
    "Seed 001 (Levine et al. 2020): at a fixed non-embedding size N = 12 L dx^2, is a deeper "
    "transformer better than a shallower and wider one? The theory predicts depth pays only once "
    "the width exceeds a threshold exponential in depth (L_th ~ log dx): the transition width "
    "between adjacent depths follows log dx = a + b L with b > 0. The paper fits a = 5.039, "
    "b = 0.0555 on language models of depth 6-48; this run measures its own transitions."
)


@dataclass
class Result:
    rows: list[dict[str, Any]]
    summaries: list[dict[str, Any]]  # per (depth, width): test loss over seeds
    searches: list[dw.TransitionSearch]  # per adjacent pair of depths
    fit: dw.Fit | None
    fit_error: str | None  # why there is no fit
    best: list[dict[str, Any]]  # per budget: the depth of least mean test loss
    findings: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    corpus: dict[str, Any]  # the text task's facts (files, tokens, vocabulary)
    power: dict[str, Any]  # the weakest planned comparison's power (`power_json`)
    transitions: list[dict[str, Any]]  # `--json`'s transitions, the paper's width beside each


def analyze(cfg, trials) -> Result:
    """The test loss over seeds per depth and width, the transitions between adjacent depths,
    their fit, the best depth per budget and the findings."""
    summaries = claims.summaries(trials.rows)
    searches = claims.searches(summaries, cfg.alpha)
    fit, fit_error = claims.fit_found(searches)
    best = claims.best_depths(summaries)
    found = findings(claims.claims(searches, fit, best, design_sizes(cfg)), fit, best)
    return Result(
        trials.rows,
        summaries,
        searches,
        fit,
        fit_error,
        best,
        found,
        trials.failed,
        trials.corpus,
        claims.power_json(cfg, summaries),
        claims.transitions_json(searches),
    )


def design_sizes(cfg) -> list[int]:
    """The sizes 12 L dx^2 the design asks for: each depth at each budget."""
    return [12 * d * width_for(n, d, cfg.heads) ** 2 for d in cfg.depths for n in cfg.budgets]


def write(out_dir, cfg, trials) -> Report:
    """The report, and FIT_FILE for `blocklab advise --fit` when the run found a fit."""
    markdown.require_finished(trials)
    result = analyze(cfg, trials)
    out = Path(out_dir)
    fit_path = out / FIT_FILE
    if result.fit is not None:
        fit_path.write_text(json.dumps(result.fit.to_dict(), indent=2) + "\n")
    elif fit_path.exists():
        fit_path.unlink()  # a fit from an earlier, different run must not pass for this one's
    figs = [loss_plot(result, out / "depth_width_loss.png")]
    figs.append(fit_plot(result, out / "depth_width_fit.png"))
    figs.append(projection_plot(result, out / "depth_width_projection.png"))
    header = ["L", "dx", "N = 12 L dx^2", "all parameters", "test loss (nats/token)", "std"]
    header += ["accuracy", "seeds"]
    rows = [
        [
            str(s["depth"]),
            str(s["width"]),
            f"{s['budget']:,}",
            f"{s['total_params']:,}" if s["total_params"] else "-",
            number(s["mean"], 4),
            number(s["std"], 2),
            number(s["accuracy"], 3),
            f"{s['n']}" + (f" (+{s['diverged']} diverged)" if s["diverged"] else ""),
        ]
        for s in result.summaries
    ]
    fit = result.fit.to_dict() if result.fit else None
    return markdown.report(
        out,
        cfg,
        result,
        extra={
            "transitions": result.transitions,
            "fit": fit,
            "fit_error": result.fit_error,
            "power": result.power,
        },
        title="Depth-to-width transitions (seed 001, section 5.2)",
        question=QUESTION,
        findings=findings_table(result.findings),
        results=(header, rows),
        figures=figs,
        notes=_notes(result),
    )


NO_TRANSITION = {
    dw.Reason.TOO_FEW: "fewer than 2 comparable points",
    dw.Reason.ALREADY_BETTER: "deeper already better at the smallest size",
    dw.Reason.NEVER_WORSE: "never significantly worse in the measured range",
}


def findings(tested: dict[str, Any], fit, best) -> list[dict[str, Any]]:
    """Each adjacent pair's transition beside where the paper's fit puts it, the fit's slope b,
    and the best depth per budget: the tests of the home's `analysis.claims`, worded."""
    lo, hi = tested["lo"], tested["hi"]
    out = []
    for c in tested["transitions"]:
        s, first = c["search"], c["first"]
        t = s.transition
        measured = (
            f"transition at dx = {t.width:g} +- {t.error:g} (N ~ {t.n_params:.3g}; "
            f"p = {first.p_value:.2g} at N = {first.n_params:.3g})"
            if t is not None
            else f"no transition: {NO_TRANSITION[s.reason]}"
        )
        out.append(
            {
                "part": "transition",
                "setting": f"L = {s.depth_shallow} vs {s.depth_deep}",
                "predicted": f"deeper no better below a size, better above; eq. 10-11 put it at "
                f"dx = {c['width']:.0f} +- {c['error']:.0f}, N = {c['n']:.2g} +- {c['dn']:.1g}, "
                + ("inside" if c["inside"] else "outside")
                + f" the measured sizes {lo:.2g}-{hi:.2g}",
                "measured": measured,
                "verdict": "as the paper's fit places it"
                if c["agrees"]
                else "unlike the paper's fit",
            }
        )
    if fit is not None:
        out.append(
            {
                "part": "fit",
                "setting": f"{fit.n_points} transitions",
                "predicted": "log dx = a + b L with b > 0 (paper: a = 5.039, b = 0.0555)",
                "measured": f"a = {fit.a:.3f} +- {fit.sigma_a:.3f}, b = {fit.b:.4f} +- "
                f"{fit.sigma_b:.4f}, chi2_red = {fit.chi2_red:.3g}, R^2 = {fit.r2:.3f}",
                "verdict": "b > 0 (one-sided z test, 5%)"
                if tested["b_positive"]
                else "b not significantly above 0",
            }
        )
    if best:
        out.append(
            {
                "part": "best depth",
                "setting": "per budget",
                "predicted": "the best depth grows with the budget (figure 3(c))",
                "measured": ", ".join(f"N~{b['budget']:.2g}: L={b['depth']}" for b in best),
                "verdict": "non-decreasing" if tested["best_grows"] else "not monotone",
            }
        )
    return out


def _notes(result) -> list[str]:
    corpus = result.corpus
    notes = [
        "Transition (section 5.2.2): scanning the shallower depth's sizes upward, the first size "
        "where it is worse than the deeper depth (one-sided Welch t-test across seeds; the "
        "deeper loss interpolated in log N at the shallower net's size) and the size before it; "
        "the transition width is their mean, the error half their spacing (as Table 4(a)).",
        "Fit (appendix D.1): weighted least squares of log dx on L with sigma = delta dx / dx; "
        "the covariance is (X^T W X)^-1, chi2_red per eq. 58, R^2 per eq. 59 with the weighted "
        "mean of log dx.",
        f"Corpus: {_corpus(corpus)}.",
    ]
    share = [s["budget"] / s["total_params"] for s in result.summaries if s["total_params"]]
    if share and min(share) < 0.8:
        notes.append(
            "N counts the layers only, as in the paper, where a 2000-token vocabulary at widths "
            "of 128 and more made the embedding a small share. Here the token and position "
            "embeddings and the readout, (2 V + T) dx, are a large share of all parameters "
            f"(N is {min(share):.0%}-{max(share):.0%} of them) and grow with the width, so at "
            "equal N the shallower, wider network has more parameters in all."
        )
    for s in result.searches:
        lines = [
            f"N={c.n_params:.3g}: {c.shallow_mean:.4f} vs {c.deep_mean:.4f} (p={c.p_value:.3g})"
            for c in s.comparisons
        ]
        if lines:
            notes.append(f"L = {s.depth_shallow} vs {s.depth_deep}: " + "; ".join(lines))
    if result.fit_error:
        notes.append(f"No fit: {result.fit_error}.")
    pw = result.power
    design = (
        f"the weakest planned comparison ({pw['comparison']}) detects a loss difference of "
        f"{pw['effect']:g} with a seed std of {pw['sd']:g}, {pw['n']} seeds per point and a "
        f"one-sided t-test at level {pw['alpha']:g}"
    )
    return [*notes, markdown.power_note(pw, design, "seed std, pooled over its points,")]


def _corpus(info: dict[str, Any]) -> str:
    keys = [k for k in sorted(info) if isinstance(info[k], (int, float, str))]
    return ", ".join(f"{k} {info[k]}" for k in keys)


def loss_plot(result, path: Path) -> str:
    """Figure 2: test loss against size per depth, one panel per adjacent pair, transitions
    marked at the size of the shallower net."""
    depths = sorted({s["depth"] for s in result.summaries})
    pairs = list(zip(depths, depths[1:], strict=False)) or [(depths[0], depths[0])]
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 3.6), squeeze=False)
    found = {(s.depth_shallow, s.depth_deep): s.transition for s in result.searches}
    for ax, (lo, hi) in zip(axes[0], pairs, strict=True):
        for depth, colour in ((lo, "tab:blue"), (hi, "tab:red")):
            group = [s for s in result.summaries if s["depth"] == depth and s["n"] >= 1]
            xs = [s["budget"] for s in group]
            ax.errorbar(
                xs,
                [s["mean"] for s in group],
                yerr=[0 if math.isnan(s["std"]) else s["std"] for s in group],
                marker="o",
                ms=3,
                capsize=2,
                color=colour,
                label=f"L = {depth}",
            )
        t = found.get((lo, hi))
        if t is not None:
            ax.axvline(t.n_params, color="grey", ls="--", lw=1, label=f"transition dx={t.width:g}")
        ax.set_xscale("log")
        ax.set_xlabel("non-embedding parameters N (count)")
        ax.set_ylabel("test loss (nats/token)")
        ax.set_title(f"L = {lo} vs {hi}")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def fit_plot(result, path: Path) -> str:
    """Figure 3(a, b): log transition width against depth with the fit, and N_transition(L)
    with its 1-sigma band."""
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(9, 3.6))
    # the paper's fit over this run's depths, and the sizes the run measured, for reference
    depths = sorted({s["depth"] for s in result.summaries})
    sizes = [s["budget"] for s in result.summaries]
    ref = np.linspace(min(depths), max(depths), 50)
    paper_n, _ = dw.n_transition(ref)
    ax_a.plot(ref, dw.PAPER_FIT.a + dw.PAPER_FIT.b * ref, "--", color="grey", label="paper")
    ax_b.plot(ref, paper_n, "--", color="grey", label="paper (eq. 10-11)")
    ax_b.axhspan(min(sizes), max(sizes), color="orange", alpha=0.2, label="sizes measured")
    found = [s.transition for s in result.searches if s.transition is not None]
    if found:
        ls = np.array([t.depth_shallow for t in found], dtype=float)
        ws = np.array([t.width for t in found])
        errs = np.array([t.error for t in found])
        ax_a.errorbar(ls, np.log(ws), yerr=errs / ws, fmt="kx", ecolor="red", capsize=3)
        ax_b.plot(ls, 12 * ls * ws**2, "kx", label="measured transitions")
    if result.fit is not None:
        fit = result.fit
        grid = np.linspace(min(fit.depths) - 0.5, max(fit.depths) + 0.5, 100)
        ax_a.plot(grid, fit.a + fit.b * grid, "b-", label=f"a={fit.a:.2f}, b={fit.b:.3f}")
        n, dn = dw.n_transition(grid, fit)
        ax_b.plot(grid, n, "b-", label="fit (eq. 10)")
        ax_b.fill_between(grid, n - dn, n + dn, color="green", alpha=0.3, label="+- delta N")
    else:
        ax_a.set_title(f"no fit: {result.fit_error}", fontsize=7, wrap=True)
    ax_a.legend(fontsize=7)
    ax_a.set_xlabel("depth L (layers)")
    ax_a.set_ylabel("ln dx at the transition (dimensionless)")
    ax_b.set_yscale("log")
    ax_b.set_xlabel("depth L (layers)")
    ax_b.set_ylabel("N_transition (non-embedding parameters)")
    ax_b.legend(fontsize=7)
    return save_figure(fig, path)


def projection_plot(result, path: Path, depth_max: int = 100) -> str:
    """Figure 4: N_transition(L) extrapolated to depth 100, the paper's fit beside this run's."""
    fig, ax = plt.subplots(figsize=(5, 3.6))
    grid = np.linspace(1, depth_max, 200)
    fits = [(dw.PAPER_FIT, "paper (eq. 11)", "tab:green")]
    if result.fit is not None and result.fit.b > 0:
        fits.append((result.fit, "this run", "tab:blue"))
    for fit, label, colour in fits:
        n, dn = dw.n_transition(grid, fit)
        ax.plot(grid, n, color=colour, label=label)
        ax.fill_between(grid, np.maximum(n - dn, 1), n + dn, color=colour, alpha=0.25)
    ax.set_yscale("log")
    ax.set_xlabel("depth L (layers)")
    ax.set_ylabel("N_transition, optimal size at depth L\n(non-embedding parameters)")
    ax.legend(fontsize=7)
    return save_figure(fig, path)

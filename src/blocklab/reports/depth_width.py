"""The depth-to-width report: loss per depth and size, transitions, the fit and its projection,
drawn in the manner of seed 001's figures 2, 3 and 4 from the run's own trials."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blocklab.analysis import depth_width as dw
from blocklab.analysis.power import design_power
from blocklab.analysis.summary import summarize
from blocklab.errors import UserError
from blocklab.experiments.depth_width import FIT_FILE, width_for
from blocklab.formatting import number
from blocklab.reports import Report, markdown
from blocklab.reports import depth_width_plots as plots
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
    summaries = summarize(trials.rows, ("depth", "width", "nominal"), value="test_loss")
    summaries = with_sizes(summaries, trials.rows)
    points = {
        depth: [dw.Point(s["budget"], s["width"], s["mean"], s["std"], s["n"]) for s in group]
        for depth, group in _by_depth(summaries).items()
    }
    searches = dw.transitions(points, alpha=cfg.alpha)
    fit, fit_error = fit_found(searches)
    best = best_depths(summaries)
    found = findings(cfg, searches, fit, best)
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
        power_json(cfg, summaries),
        transitions_json(searches),
    )


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
    figs = [plots.loss_plot(result, out / "depth_width_loss.png")]
    figs.append(plots.fit_plot(result, out / "depth_width_fit.png"))
    figs.append(plots.projection_plot(result, out / "depth_width_projection.png"))
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


def with_sizes(summaries: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The test-loss summaries per (depth, width), with the size 12 L dx^2 and mean accuracy."""
    out = [dict(s) for s in summaries]
    for s in out:
        s["budget"] = 12 * s["depth"] * s["width"] ** 2
        shape = (s["depth"], s["width"])
        done = [r for r in rows if r["status"] == "done" and (r["depth"], r["width"]) == shape]
        s["accuracy"] = sum(r["test_metric"] for r in done) / len(done) if done else math.nan
    return sorted(out, key=lambda s: (s["depth"], s["width"]))


def _by_depth(summaries: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for s in summaries:
        if s["n"] >= 1:
            out.setdefault(s["depth"], []).append(s)
    return {d: sorted(g, key=lambda s: s["budget"]) for d, g in sorted(out.items())}


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


NO_TRANSITION = {
    dw.Reason.TOO_FEW: "fewer than 2 comparable points",
    dw.Reason.ALREADY_BETTER: "deeper already better at the smallest size",
    dw.Reason.NEVER_WORSE: "never significantly worse in the measured range",
}


def findings(cfg, searches, fit, best) -> list[dict[str, Any]]:
    """Each adjacent pair's transition beside where the paper's fit puts it, the fit's slope b,
    and the best depth per budget."""
    sizes = [12 * d * width_for(n, d, cfg.heads) ** 2 for d in cfg.depths for n in cfg.budgets]
    lo, hi = min(sizes), max(sizes)
    out = []
    for s in searches:
        t = s.transition
        measured = (
            f"transition at dx = {t.width:g} +- {t.error:g} (N ~ {t.n_params:.3g}; "
            f"p = {first_significant(s).p_value:.2g} at N = {first_significant(s).n_params:.3g})"
            if t is not None
            else f"no transition: {NO_TRANSITION[s.reason]}"
        )
        # the paper's fit, extrapolated when L is outside its depths 6-30
        n, dn = dw.n_transition(s.depth_shallow)
        width, error = dw.transition_width(s.depth_shallow)
        inside = lo <= n + dn and n - dn <= hi
        out.append(
            {
                "part": "transition",
                "setting": f"L = {s.depth_shallow} vs {s.depth_deep}",
                "predicted": f"deeper no better below a size, better above; eq. 10-11 put it at "
                f"dx = {width:.0f} +- {error:.0f}, N = {n:.2g} +- {dn:.1g}, "
                + ("inside" if inside else "outside")
                + f" the measured sizes {lo:.2g}-{hi:.2g}",
                "measured": measured,
                "verdict": "as the paper's fit places it"
                if (t is not None) == inside
                else "unlike the paper's fit",
            }
        )
    if fit is not None:
        z = fit.b / fit.sigma_b if fit.sigma_b > 0 else float("inf")
        out.append(
            {
                "part": "fit",
                "setting": f"{fit.n_points} transitions",
                "predicted": "log dx = a + b L with b > 0 (paper: a = 5.039, b = 0.0555)",
                "measured": f"a = {fit.a:.3f} +- {fit.sigma_a:.3f}, b = {fit.b:.4f} +- "
                f"{fit.sigma_b:.4f}, chi2_red = {fit.chi2_red:.3g}, R^2 = {fit.r2:.3f}",
                "verdict": "b > 0 (one-sided z test, 5%)"
                if z > 1.6449
                else "b not significantly above 0",
            }
        )
    if best:
        order = [b["depth"] for b in best]
        grows = all(x <= y for x, y in zip(order, order[1:], strict=False))
        out.append(
            {
                "part": "best depth",
                "setting": "per budget",
                "predicted": "the best depth grows with the budget (figure 3(c))",
                "measured": ", ".join(f"N~{b['budget']:.2g}: L={b['depth']}" for b in best),
                "verdict": "non-decreasing" if grows else "not monotone",
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

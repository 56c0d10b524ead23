"""Report of the rank-collapse experiment (seed 003, after Dong et al. 2021): the predictions
beside the measured verdicts, the per-variant curves with their spread over seeds, the seed 003
bound as a reference curve and the path shares of Theorem 2.1.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from blocklab.analysis import learned
from blocklab.analysis.summary import summarize
from blocklab.experiments.collapse import analysis as stats
from blocklab.experiments.collapse.analysis import LOG_FLOOR, STAGES, depth_mean, slope
from blocklab.formatting import number, spread
from blocklab.reports import Report, figures, markdown
from blocklab.reports.learned import flagged
from blocklab.reports.learned import note as learning_note

QUESTION = (
    "Seed 003 (after Dong et al. 2021, 'Attention is not all you need'): does a stack of "
    "self-attention layers lose rank with depth, i.e. do its tokens converge to one vector, and "
    "what stops it? The measure is the per-layer ratio ||res(X_l)|| / ||res(X_0)|| with "
    "res(X) = X - 1 x^T (x the column mean, the Frobenius-optimal choice) in the composite norm "
    "||X||_{1,inf} = sqrt(||X||_1 ||X||_inf), median over the task's first test sequences, at "
    "initialization and after training. Pure attention is predicted to collapse doubly "
    "exponentially (Theorem 2.2); skip connections keep it from collapsing (a network with skips "
    "is a sum over (H+1)^L paths, most of them short: Theorem 2.1); an MLP slows the collapse; "
    "layer norm does not stop it."
)


@dataclass
class Result:
    rows: list[dict[str, Any]]  # one per finished trial, with its measures
    summaries: list[dict[str, Any]]  # log10 ratio over seeds per (variant, stage, norm, layer)
    accuracy: list[dict[str, Any]]  # test metric over seeds per variant
    paths: dict[str, Any]  # seed 003 Theorem 2.1: path shares by length
    bound: dict[str, Any]  # seed 003 Theorem 2.2 for pure single-head softmax attention
    findings: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    # per variant: its trained networks' test metric against chance, and losses that never moved
    learning: list[learned.Check] = field(default_factory=list)
    # (variant, stage) -> each seed's composite curve read two ways: its mean log10 ratio over
    # the layers, and its slope in decades per layer
    per_seed: dict[tuple[str, str], tuple[list[float], list[float]]] = field(default_factory=dict)


def analyze(cfg, trials) -> Result:
    """The curves' summaries over seeds, the accuracy per variant, the check against seed 003's
    bound, the findings with their tests (`blocklab.experiments.collapse.analysis`) and whether
    the trained networks learned (`analysis.learned`)."""
    logs = stats.curves(trials.rows)
    bound = stats.bound_check(trials.rows, cfg.depth)
    return Result(
        rows=trials.rows,
        summaries=stats.summarize_curves(logs),
        accuracy=summarize(trials.rows, ("variant",)),
        paths=trials.paths,
        bound=bound,
        findings=finding_dicts(stats.findings(cfg, logs), bound),
        failed=trials.failed,
        learning=learned.checks(trials.rows, ("variant",)),
        per_seed={
            (variant, stage): (
                [depth_mean(c) for c in seeds.values()],
                [slope(c) for c in seeds.values()],
            )
            for (variant, stage, norm), seeds in logs.items()
            if norm == "composite"
        },
    )


# what seed 003 and Dong et al. predict, by what the prediction rests on (`stats.cause`)
TREND = {
    "pure": "pure attention loses rank doubly exponentially (seed 003 Thm 2.2)",
    "mlp": "an MLP slows the collapse, without skips it does not stop it",
    "norm": "layer norm does not stop the collapse (Dong et al.)",
}
WHY = {
    "skip": "the skip keeps short paths (seed 003 Thm 2.1: (H+1)^L paths, most of them short)",
    "mlp": "the MLP slows the collapse (Dong et al.)",
    "norm": "layer norm does not stop the collapse (Dong et al.)",
}
VERDICT = {
    "slope": {-1: "falls with depth", 1: "rises with depth", 0: "no significant trend"},
    "paired": {1: "above pure", -1: "below pure", 0: "no significant difference"},
}
AGREES = {
    stats.Agreement.YES: "yes",
    stats.Agreement.NO: "no",
    stats.Agreement.NOT_SHOWN: "not shown",
    stats.Agreement.CONSISTENT: "consistent",
    stats.Agreement.UNTESTED: "not tested",
}


def _mean_text(m: stats.SeedMean) -> str:
    return f"{m.mean:.2f}" + (f" ± {m.std:.2f}" if m.n > 1 else "")


def finding_dict(f: stats.Finding) -> dict[str, Any]:
    """A tested finding as report.md's row and `--json` give it: prediction, measurement and
    verdict in words beside the test's numbers."""
    if f.test == "slope":
        setting, predicted = f"{f.variant}: trend with depth", f"falls with depth: {TREND[f.cause]}"
        measured = (
            f"slope {_mean_text(f.measured)} decades/layer; log10 ratio at layer {f.depth}: "
            f"{_mean_text(f.beside)}"
        )
    else:
        setting, predicted = f"{f.variant} vs pure", f"{f.expect} pure: {WHY[f.cause]}"
        measured = (
            f"mean log10 ratio over layers: {f.variant} {_mean_text(f.measured)}, pure "
            f"{_mean_text(f.beside)}"
        )
    untested = f.agrees is stats.Agreement.UNTESTED
    return {
        "part": f.stage,
        "setting": setting,
        "variant": f.variant,
        "test": f.test,
        "predicted": predicted,
        "expect": f.expect,
        "measured": measured,
        "statistic": f.statistic,
        "n": f.n,
        "p": f.p,
        "p_holm": f.p_holm,
        "verdict": "untestable (fewer than 2 seeds)" if untested else VERDICT[f.test][f.direction],
        "agrees": AGREES[f.agrees],
    }


def bound_dicts(bound: dict[str, Any]) -> list[dict[str, Any]]:
    """(e) seed 003 Thm 2.2 as a check: the measured curve must lie below the bound."""
    out = []
    for stage, b in bound.items():
        logs = b["log10_bound"]
        holds = not b["violations"]
        vacuous = len(b["vacuous_layers"]) == len(logs)
        verdict = "holds" if holds else f"VIOLATED at {b['violations'][:3]}"
        if vacuous:
            verdict += "; vacuous (bound >= 1) at every layer"
        elif b["vacuous_layers"]:
            verdict += f"; vacuous at layers {b['vacuous_layers']}"
        out.append(
            {
                "part": stage,
                "setting": "pure: seed 003 bound",
                "variant": "pure",
                "test": "check",
                "predicted": "ratio <= (4 beta res0^2 / sqrt(d_qk))^((3^L - 1)/2) at every layer "
                "(Thm 2.2); it shrinks only if 4 beta res0^2 / sqrt(d_qk) < 1",
                "expect": "below bound",
                "measured": f"log10 bound from {logs[0]:.3g} (layer 1) to {logs[-1]:.3g} (layer "
                f"{len(logs)}); measured below it in {b['seeds']} seeds x {len(logs)} layers"
                if holds
                else f"{len(b['violations'])} (seed, layer) pairs above the bound",
                "statistic": None,
                "n": b["seeds"],
                "p": None,
                "p_holm": None,
                "verdict": verdict,
                "agrees": "yes" if holds else "no",
                "vacuous": vacuous,
            }
        )
    return out


def finding_dicts(found: list[stats.Finding], bound: dict[str, Any]) -> list[dict[str, Any]]:
    """The tested findings, then the bound's checks."""
    return [finding_dict(f) for f in found] + bound_dicts(bound)


def write(out_dir, cfg, trials) -> Report:
    markdown.require_finished(trials)
    result = analyze(cfg, trials)
    out = Path(out_dir)
    figures = [curves_figure(result, out / "collapse_ratio_vs_layer.png")]
    figures.append(paths_figure(result.paths, out / "collapse_path_shares.png"))
    findings = (
        ["stage", "claim", "prediction (Dong et al. / seed 003)", "measured", "verdict (Holm p)"]
        + ["agrees"],
        [
            [
                f["part"],
                f["setting"],
                f["predicted"],
                f["measured"],
                f["verdict"] + (f" ({number(f['p_holm'], 3)})" if f["p"] is not None else ""),
                f["agrees"],
            ]
            for f in result.findings
        ],
    )
    extra = {"accuracy": result.accuracy, "paths": result.paths, "bound": result.bound}
    report = markdown.report(
        out,
        cfg,
        result,
        extra=extra,
        title="Rank collapse through depth",
        question=QUESTION,
        findings=findings,
        results=results_table(result, cfg.depth),
        figures=figures,
        notes=notes(result, cfg),
    )
    return flagged(report, result.learning, _variant)


def _variant(group: dict[str, Any]) -> str:
    return group["variant"]


def results_table(result, depth: int):
    """(header, rows): one row per (variant, stage) with the statistics the tests use."""
    last = {
        (s["variant"], s["stage"], s["norm"]): s for s in result.summaries if s["layer"] == depth
    }
    accuracy = {s["variant"]: s for s in result.accuracy}
    header = [
        "variant",
        "stage",
        f"log10 ratio at layer {depth} (mean ± std [95% CI])",
        "seeds at floor",
        "mean log10 ratio over layers",
        "slope (decades/layer)",
        f"frobenius log10 ratio at layer {depth}",
        "test metric after training",
    ]
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in result.rows):
        for stage in STAGES:
            comp = last.get((variant, stage, "composite"))
            if comp is None:
                continue
            means, slopes = result.per_seed.get((variant, stage), ([], []))
            acc = accuracy.get(variant)
            rows.append(
                [
                    variant,
                    stage,
                    spread(comp),
                    f"{comp['at_floor']}/{comp['n']}",
                    _mean(means),
                    _mean(slopes),
                    spread(last[(variant, stage, "frobenius")]),
                    spread(acc) if stage == "trained" and acc else "-",
                ]
            )
    return header, rows


def _mean(values) -> str:
    values = list(values)
    return f"{sum(values) / len(values):.2f}" if values else "-"


def notes(result, cfg) -> list[str]:
    p = result.paths
    shares = ", ".join(f"k={k}: {s:.3g}" for k, s in enumerate(p["shares"]))
    out = [
        f"Ratios below float32 machine epsilon ({10**LOG_FLOOR:.3g}, log10 {LOG_FLOOR:.2f}) are "
        "set to it before taking log10: the networks compute in float32, so a smaller relative "
        "residual is rounding, and pure attention reaches exactly identical tokens (ratio 0). "
        "'Seeds at floor' counts them. Clipping only shrinks the measured slopes and differences. "
        "A plateau a little above the floor is rounding too (layer norm rescales each token and "
        "so amplifies it).",
        "The ratio is not scale-free: a layer that shrinks or grows its tokens (the feed-forward's "
        "default-initialized linear maps shrink them, layer norm sets them to norm sqrt(D)) "
        "changes the softmax temperature of the next attention layer, and with it the speed of "
        "the collapse.",
        "Tests: a variant without skips 'falls with depth' when the least-squares slope of its "
        "log10 ratio against the layer (layers 0..L) is below 0 (two-sided one-sample t-test "
        "across seeds); a variant is 'above pure' when its mean log10 ratio over layers 1..L "
        "exceeds pure's (two-sided paired t-test across seeds: the same seeds give every variant "
        f"the same embedding and attention weights at init). Holm over all tests, alpha = "
        f"{cfg.alpha:g}. The bound is a check (it must hold), not a test.",
        f"Seed 003 Theorem 2.1 with skips as dummy heads, L = {p['depth']}, H = {p['heads']}: "
        f"the share of the (H+1)^L paths through k attention layers is C(L, k) H^k / (H+1)^L "
        f"({shares}); mean length {p['mean_length']:.3g}. Short paths collapse little.",
    ]
    for stage, b in result.bound.items():
        vacuous = "vacuous (>= 1)" if len(b["vacuous_layers"]) == len(b["log10_bound"]) else ""
        out.append(
            f"Seed 003 Theorem 2.2 bound on pure attention's ratio ({stage}; beta = "
            "max_l ||W_QK||_1 ||W_V||_{1,inf} read from the weights; median over sequences, mean "
            "over seeds), log10 per layer: "
            + ", ".join(f"{v:.3g}" for v in b["log10_bound"])
            + (f": {vacuous} at every layer" if vacuous else "")
            + ". It shrinks with depth only when 4 beta res0^2 / sqrt(d_qk) < 1, which needs an "
            "input residual below 1 (seed 003 section 2.4 asks why it would be); at ordinary "
            "input scales it grows, so it says nothing about the measured collapse."
        )
    if not result.bound:
        out.append(
            "Seed 003 Theorem 2.2's bound is defined for pure single-head softmax attention only; "
            "this configuration has none."
        )
    out.append(learning_note(result.learning, _variant))
    return out + markdown.failures(result)


def curves_figure(result, path: Path) -> str:
    """log10 ratio against the layer per variant, mean over seeds with its 95% interval; init
    and trained side by side; the seed 003 bound dashed where it is defined."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True, squeeze=False)
    groups = defaultdict(list)
    for s in result.summaries:
        if s["norm"] == "composite":
            groups[(s["stage"], s["variant"])].append(s)
    lowest = LOG_FLOOR
    highest = max((s["hi"] if s["n"] > 1 else s["mean"] for s in result.summaries), default=0.0)
    for ax, stage in zip(axes[0], STAGES, strict=True):
        for (st, variant), group in groups.items():
            if st != stage:
                continue
            group.sort(key=lambda s: s["layer"])
            xs = [s["layer"] for s in group]
            color = figures.arm_color(variant)
            figures.errorbar(ax, xs, group, label=variant, ms=4, color=color)
        bound = result.bound.get(stage)
        if bound:
            b = bound["log10_bound"]
            label = f"seed 003 bound (pure; log10 {b[0]:.3g} .. {b[-1]:.3g})"
            ax.plot(range(1, len(b) + 1), b, "k--", lw=1, label=label)
        ax.axhline(LOG_FLOOR, color="grey", lw=0.8, ls=":", label="float32 eps (floor)")
        ax.set(
            xlabel="layer l (layer index)",
            ylabel="log10 ||res(X_l)|| / ||res(X_0)|| (dimensionless)",
            title=f"{stage} (mean over seeds, 95% CI)",
        )
        ax.legend(fontsize=7)
    # the bound leaves any useful range within a layer or two: keep the data in view
    axes[0][0].set_ylim(lowest - 0.5, max(highest, 0.0) + 0.5)
    return figures.save_figure(fig, path)


def paths_figure(paths: dict[str, Any], path: Path) -> str:
    fig, ax = plt.subplots(figsize=(4.2, 3.0))
    shares = paths["shares"]
    ax.bar(range(len(shares)), shares, color="tab:blue")
    ax.set(
        xlabel="path length k (attention layers on the path)",
        ylabel="share of paths (fraction)",
        title=f"seed 003 Thm 2.1: L={paths['depth']}, H={paths['heads']}",
    )
    return figures.save_figure(fig, path)

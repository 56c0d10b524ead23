"""Report of `blocklab mad`: every sequence block at one parameter budget on the MAD and MQAR token
tasks, per difficulty level, with intervals, an aggregate per block, paired tests, the degree of
each block beside its aggregate, and the published findings the run can test."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from blocklab.analysis import learned
from blocklab.analysis.summary import summarize
from blocklab.experiments.mad.analysis import suite
from blocklab.experiments.mad.experiment import ladder
from blocklab.experiments.mad.report import width_sweep
from blocklab.experiments.mad.report.published import published, time_note
from blocklab.formatting import markdown_table, number, plain
from blocklab.reports import Findings, Report, Status, markdown
from blocklab.reports.figures import arm_color, save_figure
from blocklab.reports.learned import flagged, note
from blocklab.reports.markdown import require_finished

QUESTION = (
    "Seed 000 says attention is a degree-3 block and that degree 3 is the most expressive per "
    "parameter. Does a sequence block's degree predict its recall, copying, compression and "
    "memorization at an equal parameter budget? Every causal token-mixing block in one backbone, "
    "its width set by the budget, its learning rate chosen per task on validation, over seeds, "
    "on mad-lab's tasks (Poli et al. 2024) and zoology's MQAR (Arora et al. 2023)."
)


@dataclass
class SuiteResult(Findings):
    """The suite analyzed: per-cell results, per-block aggregate scores, the degree correlations
    (against d and against h(d)), the paired tests, where the training time went, and the
    published findings (`findings`) with the summaries over seeds."""

    cells: list[dict[str, Any]] = field(default_factory=list)
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)
    correlation: dict[str, Any] = field(default_factory=dict)
    correlation_h: dict[str, Any] = field(default_factory=dict)
    paired: list[dict[str, Any]] = field(default_factory=list)
    timing: dict[str, Any] = field(default_factory=dict)
    # per (block, task, level): its test accuracy against chance, and losses that never moved
    learning: list[learned.Check] = field(default_factory=list)


def analyze(cfg, trials) -> SuiteResult:
    summaries = summarize(trials.rows, ("block", "task", "level"))
    scores = suite.scores(trials.rows, trials.degrees)
    return SuiteResult(
        trials.rows,
        summaries,
        published(cfg, trials),
        trials.failed,
        cells=suite.results(trials.rows),
        scores=scores,
        correlation=suite.correlation(scores),
        correlation_h=suite.correlation(scores, against="h(degree)"),
        paired=suite.paired(trials.rows, cfg.alpha),
        timing=suite.trial_time(trials.rows, trials.lr_choice),
        learning=learned.checks(trials.rows, ("block", "task", "level")),
    )


def heat_map(results: list[dict[str, Any]], path: Path) -> str:
    """Blocks x tasks, each cell the mean accuracy over the task's levels."""
    blocks = sorted({r["block"] for r in results})
    tasks = list(dict.fromkeys(r["task"] for r in results))
    grid = np.full((len(blocks), len(tasks)), np.nan)
    for i, b in enumerate(blocks):
        for j, t in enumerate(tasks):
            means = [r["mean"] for r in results if (r["block"], r["task"]) == (b, t) and r["n"]]
            if means:
                grid[i, j] = np.mean(means)
    fig, ax = plt.subplots(figsize=(1.2 * len(tasks) + 3, 0.5 * len(blocks) + 1.6))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for i in range(len(blocks)):
        for j in range(len(tasks)):
            if np.isfinite(grid[i, j]):
                color = "black" if grid[i, j] > 0.6 else "white"
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=8, c=color)
    ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right")
    ax.set_yticks(range(len(blocks)), blocks)
    ax.set_xlabel("task (mean over its difficulty levels)")
    ax.set_ylabel("block")
    fig.colorbar(im, ax=ax, label="test accuracy\n(fraction correct)")
    return save_figure(fig, path)


def curves(results: list[dict[str, Any]], ladders: dict[str, list[str]], path: Path) -> str:
    """Accuracy against difficulty level, one panel per task, one line per block, with each
    mean's 95% interval (clipped to [0, 1])."""
    tasks = list(dict.fromkeys(r["task"] for r in results))
    cols = min(4, len(tasks))
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.3 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks, strict=False):
        for block in sorted({r["block"] for r in results}):
            group = sorted(
                (r for r in results if (r["block"], r["task"]) == (block, task) and r["n"]),
                key=lambda r: r["level"],
            )
            xs = [r["level"] for r in group]
            ys = np.array([r["mean"] for r in group])
            lo = np.array([r["ci_low"] if r["n"] > 1 else r["mean"] for r in group])
            hi = np.array([r["ci_high"] if r["n"] > 1 else r["mean"] for r in group])
            ax.errorbar(xs, ys, yerr=[ys - lo, hi - ys], marker="o", capsize=3, label=block,
                        color=arm_color(block))  # fmt: skip
        ax.set_xticks(range(len(ladders[task])), ladders[task], fontsize=7)
        ax.set_title(task)
        ax.set_xlabel("difficulty level")
        ax.set_ylabel("test accuracy (fraction correct)")
        ax.set_ylim(-0.02, 1.02)
    for ax in list(axes.flat)[len(tasks) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    return save_figure(fig, path)


def write(out_dir, cfg, trials) -> Report:
    if cfg.mode == "width-sweep":
        return width_sweep.write(out_dir, cfg, trials)
    require_finished(trials)
    result = analyze(cfg, trials)
    out = Path(out_dir)
    cell_results, scores, pairs = result.cells, result.scores, result.paired
    corr, corr_h = result.correlation, result.correlation_h
    rungs = {t: [_rung(o) for o in ladder(t, cfg.levels)] for t in cfg.tasks}
    figures = [heat_map(cell_results, out / "mad_heat_map.png")]
    figures.append(curves(cell_results, rungs, out / "mad_accuracy_vs_level.png"))
    results = (
        ["block", "task", "level", "width", "lr", "test accuracy (mean ± std [95% CI])", "seeds"],
        [
            [r["block"], r["task"], f"{r['level']} ({rungs[r['task']][r['level']]})"]
            + [str(_width(trials, r)), _lr(trials, r)]
            + [_spread(r), str(r["n"]) + (f" ({r['diverged']} diverged)" if r["diverged"] else "")]
            for r in cell_results
        ],
    )
    notes = [_score_table(scores), _correlations(corr, corr_h), _paired_table(pairs, cfg.alpha)]
    notes.append(
        f"Aggregate: the mean over a block's (task, level) cells of its mean accuracy over seeds; "
        f"95% percentile bootstrap over seeds within each cell ({suite.BOOTSTRAP} draws). Cell "
        f"intervals: Student-t over seeds, clipped to [0, 1]. Degree: the block's "
        f"`nominal_degree` (attention's q k v counts 3, as seed 000 reads it; softmax and "
        f"feature maps as the identity). Published findings: 'agrees' needs the stated test "
        f"at level {cfg.alpha:g}."
    )
    notes.append(_edges(cfg, trials.lr_choice))
    notes.append(note(result.learning, _cell_name))
    timing = result.timing
    notes.append(time_note(timing))
    notes += markdown.failures(result)
    extra = {
        "results": [{k: r[k] for k in ("block", "task", "level", "mean", "ci_low", "ci_high", "n")}
                    for r in cell_results],
        "scores": {b: {k: s[k] for k in ("score", "ci_low", "ci_high", "degree")}
                   for b, s in scores.items()},
        "correlation": {k: corr[k] for k in ("rho", "p", "against")},
        "correlation_h": {k: corr_h[k] for k in ("rho", "p", "against")},
        "paired": pairs,
        "published": result.findings,
        "lr_choice": trials.lr_choice,
        "trial_time": timing,
    }  # fmt: skip
    findings = (
        ["source", "claim", "status", "evidence"],
        [[f["source"], f["claim"], f["status"], f["evidence"]] for f in result.findings],
    )
    path = markdown.write(
        out,
        cfg,
        title="The token-manipulation suite: sequence blocks at one budget",
        question=QUESTION,
        findings=findings,
        results=results,
        figures=figures,
        notes=notes,
    )
    lines = [
        f"{b}: score {number(s['score'], 3)} [{number(s['ci_low'], 3)}, "
        f"{number(s['ci_high'], 3)}], degree {s['degree']}"
        for b, s in sorted(scores.items(), key=lambda kv: -(kv[1]["score"] or -1))
    ]
    lines.append(_correlations(corr, corr_h))
    lines += [f"{f['status']}: {f['claim']} ({f['source']}): {f['evidence']}"
              for f in result.findings]  # fmt: skip
    payload = {**extra, "summaries": result.summaries, "failed": result.failed}
    best = max(scores.items(), key=lambda kv: kv[1]["score"] or -1, default=None)
    counts = Counter(f["status"] for f in result.findings)
    line = f"FINDINGS: best score {best[0]} ({number(best[1]['score'], 3)}); " if best else ""
    line += "published findings: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    report = Report(path, plain(payload), lines + markdown.failures(result), Status(False, line))
    return flagged(report, result.learning, _cell_name)


def _cell_name(group: dict[str, Any]) -> str:
    return f"{group['block']} on {group['task']} level {group['level']}"


def _rung(options: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items()) or "defaults"


def _row_of(trials, r: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (x for x in trials.rows if (x["block"], x["task"], x["level"]) == (r["block"], r["task"],
                                                                              r["level"])),
        None,
    )  # fmt: skip


def _width(trials, r) -> int | str:
    row = _row_of(trials, r)
    return "-" if row is None else row["width"]


def _lr(trials, r) -> str:
    c = trials.lr_choice.get(f"{r['block']}/{r['task']}")
    return "-" if c is None else f"{c['lr']:.3g}" + (" (edge)" if c["at_edge"] else "")


def _edges(cfg, lr_choice: dict[str, dict[str, Any]]) -> str:
    """How many (block, task) rate choices stayed at an edge of what was tried: a choice there
    may be short of the block's best rate."""
    edge = sorted(key for key, c in lr_choice.items() if c["at_edge"])
    named = f": {', '.join(edge)}" if edge else ""
    return (
        f"Learning rates: {len(edge)} of {len(lr_choice)} (block, task) choices at an edge of the "
        f"rates tried (the grid {list(cfg.lr_grid)}, extended up to {cfg.lr_extend} time(s) past "
        f"an edge){named}."
    )


def _spread(r: dict[str, Any]) -> str:
    if not r["n"]:
        return "-"
    if r["n"] == 1:
        return f"{r['mean']:.3f}"
    return f"{r['mean']:.3f} ± {r['std']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"


def _score_table(scores: dict[str, dict[str, Any]]) -> str:
    body = [
        [b, number(s["score"], 3), f"[{number(s['ci_low'], 3)}, {number(s['ci_high'], 3)}]"]
        + [str(s["degree"]), str(s["cells"])]
        for b, s in sorted(scores.items(), key=lambda kv: -(kv[1]["score"] or -1))
    ]
    table = markdown_table(["block", "score", "95% bootstrap CI", "degree", "cells"], body)
    return "Aggregate score per block:\n\n  " + "\n  ".join(table)


def _correlations(corr: dict[str, Any], corr_h: dict[str, Any]) -> str:
    def one(c):
        if c["rho"] is None:
            return f"against {c['against']}: not computable ({c['n']} blocks with a degree)"
        return f"against {c['against']}: rho = {c['rho']:.3f}, p = {c['p']:.3g} ({c['n']} blocks)"

    return f"Degree vs aggregate score ({suite.CORRELATION}): {one(corr)}; {one(corr_h)}"


def _paired_table(pairs: list[dict[str, Any]], alpha: float) -> str:
    body = [
        [p["a"], p["b"], str(p["cells"]), number(p["difference"], 3), number(p["p"], 3)]
        + [number(p["p_holm"], 3), p["better"] or "no significant difference"]
        for p in pairs
    ]
    header = ["block a", "block b", "cells", "mean a - b", "p", "Holm p", f"better (at {alpha:g})"]
    return f"Paired tests ({suite.PAIRED}):\n\n  " + "\n  ".join(markdown_table(header, body))

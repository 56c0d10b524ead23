"""Report of `blocklab mad --sweep-width`: zoology's figure (MQAR accuracy against width, one panel
per setting, one line per block), the smallest width that solves each setting, and zoology's
claim marked from them. Its JSON keeps every key of the suite's report (the suite's parts empty:
the suite did not run) and adds `width_sweep` and `min_solving_width`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from blocklab.analysis import learned
from blocklab.analysis.summary import summarize
from blocklab.experiments.mad.analysis import suite
from blocklab.experiments.mad.analysis import width_sweep as ws
from blocklab.experiments.mad.report.published import GATED_CLAIM, ZOOLOGY, published, time_note
from blocklab.formatting import number, plain
from blocklab.reports import Report, Status, markdown
from blocklab.reports.figures import arm_color, save_figure
from blocklab.reports.learned import flagged, note
from blocklab.reports.markdown import require_finished

QUESTION = (
    "Zoology (Arora et al. 2023) finds that gated convolutions (H3, Hyena) need a model width "
    "that grows with the number of key-value pairs to solve multi-query associative recall "
    "(MQAR), while attention solves it at a small width whatever the pairs. Each block, causal, "
    "in one backbone at each width, on MQAR at each setting of pairs and sequence length, its "
    "learning rate chosen per (block, width) on validation, over seeds."
)
UNTESTED_BY_SWEEP = "the width sweep ran instead of the suite"
# summaries over seeds by the suite's keys (block, task, level: the setting, easiest first) and
# the sweep's
SUMMARY_KEYS = ("block", "task", "level", "width", "pairs", "seq_len")
# a cell of the sweep: a block at a width on one setting
CELL_KEYS = ("block", "width", "pairs", "seq_len")


def figure(table: list[dict[str, Any]], solved: float, path: Path) -> str:
    """Accuracy against width, one panel per (pairs, seq_len), one line per block, with each
    mean's 95% interval."""
    settings = sorted({(c["seq_len"], c["pairs"]) for c in table})
    fig, axes = plt.subplots(1, len(settings), figsize=(4 * len(settings), 3.4), squeeze=False)
    for ax, (seq_len, pairs) in zip(axes.flat, settings, strict=True):
        for block in sorted({c["block"] for c in table}):
            group = sorted(
                (c for c in table if (c["block"], c["pairs"], c["seq_len"]) == (block, pairs,
                 seq_len) and c["n"]), key=lambda c: c["width"])  # fmt: skip
            xs = [c["width"] for c in group]
            ys = np.array([c["mean"] for c in group])
            lo = np.array([c["ci_low"] if c["n"] > 1 else c["mean"] for c in group])
            hi = np.array([c["ci_high"] if c["n"] > 1 else c["mean"] for c in group])
            ax.errorbar(xs, ys, yerr=[ys - lo, hi - ys], marker="o", capsize=3, label=block,
                        color=arm_color(block))  # fmt: skip
        ax.axhline(solved, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({c["width"] for c in table}))
        ax.xaxis.set_major_formatter(plt.ScalarFormatter())
        ax.set_title(f"{pairs} key-value pairs, {seq_len} tokens")
        ax.set_xlabel("model width (features)")
        ax.set_ylabel("MQAR test accuracy (fraction correct)")
        ax.set_ylim(-0.02, 1.02)
    axes.flat[-1].legend(fontsize=7, loc="center right")
    return save_figure(fig, path)


def claim(cfg, grown: list[ws.Growth], blocks: list[str]) -> dict[str, Any]:
    """Zoology's claim in the published-findings table, marked from the smallest widths."""
    status, why = ws.zoology_claim(grown, blocks)
    said = [
        f"{g.block} at {g.seq_len} tokens: {_w(g.widths[0])} for {g.pairs[0]} pairs, "
        f"{_w(g.widths[1])} for {g.pairs[1]}"
        for g in grown
    ]
    evidence = "; ".join(said) or "-"
    evidence = f"smallest width with mean accuracy >= {cfg.solved:g} ({evidence})"
    return {"claim": GATED_CLAIM, "source": ZOOLOGY, "status": status,
            "evidence": f"{why}; {evidence}" if why else evidence}  # fmt: skip


def _w(width: int | None) -> str:
    return "unsolved" if width is None else f"width {width}"


@dataclass
class WidthResult:
    """The width sweep analyzed: each (block, setting, width) cell, the smallest solving width
    per setting, how it grew with the pairs, zoology's claim marked from it beside the suite's
    (untested), each block's plateau, where the training time went, and each cell's accuracy
    against chance with the losses that never moved (`analysis.learned`)."""

    table: list[dict[str, Any]]
    minimal: list[dict[str, Any]]
    grown: list[ws.Growth]
    gated: dict[str, Any]
    found: list[dict[str, Any]]
    plateau: dict[str, dict[str, Any]]
    timing: dict[str, Any]
    summaries: list[dict[str, Any]]
    learning: list[learned.Check]


def analyze(cfg, trials) -> WidthResult:
    table = ws.cells(trials.rows)
    minimal = ws.min_solving_widths(table, cfg.solved)
    grown = ws.growth(minimal)
    gated = claim(cfg, grown, list(trials.degrees))
    # the suite's claims read tasks the sweep did not train: untested; zoology's from the sweep
    found = [
        gated if f["claim"] == gated["claim"] else {**f, "evidence": UNTESTED_BY_SWEEP}
        for f in published(cfg, dataclasses.replace(trials, rows=[], degrees={}))
    ]
    return WidthResult(
        table,
        minimal,
        grown,
        gated,
        found,
        ws.plateau(trials.rows, cfg.plateau_tol),
        suite.trial_time(trials.rows, trials.lr_choice, by="width"),
        summarize(trials.rows, SUMMARY_KEYS),
        learned.checks(trials.rows, CELL_KEYS),
    )


def write(out_dir, cfg, trials) -> Report:
    require_finished(trials)
    out = Path(out_dir)
    result = analyze(cfg, trials)
    table, minimal, gated, found = result.table, result.minimal, result.gated, result.found
    results = (
        ["block", "pairs", "sequence length", "width", "lr", "test accuracy (mean [95% CI])", "n"],
        [
            [c["block"], str(c["pairs"]), str(c["seq_len"]), str(c["width"])]
            + [_lr(trials, c), _cell(c), str(c["n"])]
            for c in table
        ],
    )
    smallest = (
        ["block", "pairs", "sequence length", f"smallest width with accuracy >= {cfg.solved:g}"],
        [[m["block"], str(m["pairs"]), str(m["seq_len"]), str(m["width"] or "-")] for m in minimal],
    )
    findings = (
        ["source", "claim", "status", "evidence"],
        [[f["source"], f["claim"], f["status"], f["evidence"]] for f in found],
    )
    edges = sum(bool(c["at_edge"]) for c in trials.lr_choice.values())
    plateau, timing = result.plateau, result.timing
    notes = [
        f"Learning rates: one per (block, width), chosen on validation at the easiest setting; "
        f"{edges} of {len(trials.lr_choice)} choices lie at an edge of the rates tried.",
        f"Training (plateaued: twice the steps gained less than {cfg.plateau_tol:g} of the "
        "validation loss): "
        + "; ".join(
            f"{b} {p['plateaued']} of {p['trials']} trials plateaued, median gain "
            f"{_pct(p['median_gain'])}"
            for b, p in plateau.items()
        )
        + ". A block that solves nothing while far from a plateau is undertrained, not shown "
        "unable: train longer (--steps).",
        time_note(timing, by="width"),
        note(result.learning, _cell_name),
        "Smallest solving width: the least width of the sweep whose mean test accuracy over "
        f"seeds reaches {cfg.solved:g}. Intervals: Student-t over seeds, clipped to [0, 1].",
        *markdown.failures(trials),
    ]
    path = markdown.write(
        out, cfg, title="The MQAR width sweep: accuracy against model width",
        question=QUESTION, findings=findings, results=results,
        figures=[figure(table, cfg.solved, out / "mad_width_sweep.png")],
        notes=[_md_table(smallest), *notes],
    )  # fmt: skip
    payload = {
        "results": [], "scores": {}, "paired": [], "published": found,
        "correlation": {"rho": None, "p": None, "against": "degree"},
        "correlation_h": {"rho": None, "p": None, "against": "h(degree)"},
        "lr_choice": trials.lr_choice, "width_sweep": table, "min_solving_width": minimal,
        "plateau": plateau, "trial_time": timing,
        "summaries": result.summaries,
        "failed": trials.failed,
    }  # fmt: skip
    lines = [
        f"{m['block']}, {m['pairs']} pairs of {m['seq_len']} tokens: "
        + ("unsolved at every width" if m["width"] is None else f"solved from width {m['width']}")
        for m in minimal
    ]
    lines.append(f"{gated['status']}: {gated['claim']} ({gated['source']}): {gated['evidence']}")
    lines += notes[:2]
    status = Status(False, f"FINDINGS: zoology's gated-convolution claim: {gated['status']}")
    report = Report(path, plain(payload), lines + markdown.failures(trials), status)
    return flagged(report, result.learning, _cell_name)


def _cell_name(group: dict[str, Any]) -> str:
    g = group
    return f"{g['block']} at width {g['width']}, {g['pairs']} pairs of {g['seq_len']} tokens"


def _md_table(table) -> str:
    from blocklab.formatting import markdown_table

    return "Smallest solving width:\n\n  " + "\n  ".join(markdown_table(*table))


def _pct(x: float | None) -> str:
    if x is None:
        return "-"
    # a solved task's loss, near 0, still halves with twice the steps: say so in a factor
    return f"{x:.0%}" if x < 10 else f"{x:.3g}x (a solved task's loss near 0 still falls)"


def _cell(c: dict[str, Any]) -> str:
    if c["n"] < 2:
        return number(c["mean"], 3)
    return f"{c['mean']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]"


def _lr(trials, c: dict[str, Any]) -> str:
    choice = trials.lr_choice.get(f"{c['block']}/{c['width']}")
    if choice is None:
        return "-"
    return f"{choice['lr']:.3g}" + (" (edge)" if choice["at_edge"] else "")

"""Report of `blocklab sanford match` (seed 002): standard vs tensor attention on Match2 and
Match3 at equal parameters, beside what the seed predicts each solves."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from blocklab.analysis.stats import holm, paired_p
from blocklab.analysis.summary import summarize
from blocklab.reports import Findings, Report, markdown
from blocklab.reports.figures import lines_plot
from blocklab.reports.markdown import (
    failures,
    number,
    require_finished,
    results_table,
)
from blocklab.tasks import make_task

QUESTION = (
    "Seed 002: standard attention represents Match2 with O(1) embedding dimension but needs "
    "m H = Omega(N / log N) for Match3; third-order (tensor) attention represents Match3 "
    "efficiently. Here: one layer of each at equal parameters (same width, embedding, "
    "feed-forward and readout; the tensor block's attention dimension is 2/3 of the width so "
    "that both blocks cost 4 W^2), trained per position; chance is the label balance."
)


# the keys the trials differ by besides the seed: accuracy is summarized over the seeds of each
KEYS = ("task", "width", "model")


def analyze(cfg, trials) -> Findings:
    """The summaries over seeds and, per task, width and block, what the seed predicts beside
    what was measured, with the paired test of tensor against standard attention."""
    summaries = summarize(trials.rows, KEYS)
    return Findings(trials.rows, summaries, findings(cfg, summaries), trials.failed)


def write(out_dir, cfg, trials) -> Report:
    require_finished(trials)
    result = analyze(cfg, trials)
    out = Path(out_dir)
    fig = lines_plot(
        result.summaries,
        out / "match_accuracy_vs_width.png",
        x="width",
        series=("model",),
        panels="task",
        ylabel="test accuracy",
        hline=cfg.solved,
    )
    table = (
        [
            "task",
            "width",
            "block",
            "seed 002 predicts",
            "measured",
            "agrees",
            "tensor vs standard (Holm p)",
        ],
        [
            [
                f["task"],
                str(f["width"]),
                f["model"],
                f["predicted"],
                f["measured"],
                "yes" if f["agrees"] else "no",
                number(f["p_holm"], 3),
            ]
            for f in result.findings
        ],
    )
    results = results_table(result.summaries, {"task": "task", "width": "width", "model": "block"})
    notes = [
        f"{t}: modulus M = {b['modulus']}, fraction of positive labels {b['balance']:.3f} "
        "(chance level of a constant prediction)"
        for t, b in _balance(cfg).items()
    ]
    notes.append(
        "'solved' means a mean test accuracy of at least "
        f"{cfg.solved:.0%}; the p-value is a paired t-test across seeds "
        "(tensor vs standard), Holm-corrected over widths and tasks."
    )
    notes += failures(result)
    return markdown.report(
        out,
        cfg,
        result,
        title="Sanford Match2 / Match3: standard vs tensor attention",
        question=QUESTION,
        findings=table,
        results=results,
        figures=[fig],
        notes=notes,
    )


def _balance(cfg) -> dict[str, dict[str, float]]:
    """Per task, the modulus M chosen for the sequence length and the share of positive labels:
    the accuracy of a constant prediction."""
    out = {}
    for t in cfg.tasks:
        info = make_task(t, seq_len=cfg.seq_len, n_train=cfg.n_train).make(0).info
        out[t] = {"modulus": info["modulus"], "balance": info["balance"]}
    return out


PREDICTIONS = {
    ("match2", "standard"): True,
    ("match2", "tensor"): True,
    ("match3", "standard"): False,  # at small width: m H = Omega(N / log N) is needed
    ("match3", "tensor"): True,
}


def findings(cfg, summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {(s["task"], s["width"], s["model"]): s for s in summaries}
    findings, pvals = [], []
    for task in cfg.tasks:
        for width in cfg.widths:
            std, ten = by.get((task, width, "standard")), by.get((task, width, "tensor"))
            if not std or not ten:
                continue
            seeds = sorted(set(std["values"]) & set(ten["values"]))
            p = (
                paired_p([ten["values"][s] for s in seeds], [std["values"][s] for s in seeds])
                if len(seeds) >= 2
                else float("nan")
            )
            pvals.append(p)
            for model, s in (("standard", std), ("tensor", ten)):
                solved = bool(s["n"]) and s["mean"] >= cfg.solved
                predicted = PREDICTIONS[(task, model)]
                findings.append(
                    {
                        "task": task,
                        "width": width,
                        "model": model,
                        "predicted": "solves" if predicted else "does not solve (small width)",
                        "measured": f"{s['mean']:.3f} accuracy "
                        + ("(solved)" if solved else "(not solved)"),
                        "agrees": solved == predicted,
                        "p_tensor_vs_standard": p,
                    }
                )
    finite = [p for p in pvals if not math.isnan(p)]
    adjusted = iter(holm(finite)) if finite else iter(())
    adj = {i: next(adjusted) for i, p in enumerate(pvals) if not math.isnan(p)}
    for i, f in enumerate(findings):
        f["p_holm"] = adj.get(i // 2, float("nan"))
    return findings

"""Report of `blocklab sanford match` (seed 002): standard vs tensor attention on Match2 and
Match3 at equal parameters, beside what the seed predicts each solves."""

from __future__ import annotations

from pathlib import Path

from blocklab.reports import Report, markdown
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


def write(out_dir, cfg, result) -> Report:
    require_finished(result)
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
    findings = (
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
        findings=findings,
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

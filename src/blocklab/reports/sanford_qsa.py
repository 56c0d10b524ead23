"""Report of `blocklab sanford qsa` (seed 002): the embedding dimension qSA needs at each q,
beside the seed's range and a fully connected network of equal parameters."""

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

QUESTION = (
    "Seed 002 (Sanford, Hsu, Telgarsky): one softmax attention unit approximates q-sparse "
    "averaging iff its embedding dimension m is about q or more (m >= q / log N is necessary, "
    "m = O(d + q log N) suffices), while a fully connected network needs width ~ N d. Here: one "
    "attention layer (query, key and value dimension m) trained on qSA for several q, beside a "
    "fully connected network with the same total number of parameters that sees the flattened "
    "sequence. Accuracy is the fraction of positions whose output lies within 1/(2q) of the "
    "target (the seed's approximation level)."
)


def write(out_dir, cfg, result) -> Report:
    require_finished(result)
    out = Path(out_dir)
    fig = lines_plot(
        result.summaries,
        out / "qsa_accuracy_vs_m.png",
        x="m",
        series=("model",),
        panels="q",
        ylabel="test accuracy (within 1/(2q))",
        hline=cfg.solved,
    )
    findings = (
        [
            "q",
            "seed 002 predicts",
            "measured",
            "successes respect m >= q/log2 N",
            "fully connected (best mean)",
        ],
        [
            [
                str(f["q"]),
                f["predicted"],
                f["measured"],
                "yes" if f["consistent_with_lower_bound"] else "no",
                number(f["fully_connected_best"]),
            ]
            for f in result.findings
        ],
    )
    results = results_table(result.summaries, {"q": "q", "m": "m", "model": "model"})
    notes = failures(result)
    return markdown.report(
        out,
        cfg,
        result,
        title="Sanford qSA: attention embedding dimension vs sparsity",
        question=QUESTION,
        findings=findings,
        results=results,
        figures=[fig],
        notes=notes,
    )

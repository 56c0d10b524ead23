"""Report of `blocklab sanford qsa` (seed 002): the embedding dimension qSA needs at each q,
beside the seed's range and a fully connected network of equal parameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blocklab.analysis import learned
from blocklab.experiments.sanford_qsa import analysis as qsa
from blocklab.formatting import number
from blocklab.reports import Findings, Report, Status, markdown
from blocklab.reports.figures import lines_plot
from blocklab.reports.learned import flagged, note
from blocklab.reports.markdown import failures, require_finished, results_table

QUESTION = (
    "Seed 002 (Sanford, Hsu, Telgarsky): one softmax attention unit approximates q-sparse "
    "averaging iff its embedding dimension m is about q or more (m >= q / log N is necessary, "
    "m = O(d + q log N) suffices), while a fully connected network needs width ~ N d. Here: one "
    "attention layer (query, key and value dimension m) trained on qSA for several q, beside a "
    "fully connected network with the same total number of parameters that sees the flattened "
    "sequence. Accuracy is the fraction of positions whose output lies within 1/(2q) of the "
    "target (the seed's approximation level)."
)


@dataclass
class QsaResult(Findings):
    """The run analyzed: the summaries and findings, the thresholds per q they word
    (`analysis.thresholds`), and whether each (q, m, model) learned (`analysis.learned`)."""

    tested: dict[str, Any] = field(default_factory=dict)
    learning: list[learned.Check] = field(default_factory=list)


def analyze(cfg, trials) -> QsaResult:
    """The summaries over seeds, the findings per q and the learning check per (q, m, model)."""
    summaries = qsa.summaries(trials.rows)
    tested = qsa.thresholds(cfg, summaries)
    learning = learned.checks(trials.rows, qsa.KEYS)
    return QsaResult(trials.rows, summaries, findings(cfg, tested), trials.failed, tested, learning)


def write(out_dir, cfg, trials) -> Report:
    require_finished(trials)
    result = analyze(cfg, trials)
    out = Path(out_dir)
    fig = lines_plot(
        result.summaries,
        out / "qsa_accuracy_vs_m.png",
        x="m",
        series=("model",),
        arm="model",
        panels="q",
        xlabel="embedding dimension m (hidden units)",
        ylabel="test accuracy (fraction within 1/(2q))",
        hline=cfg.solved,
    )
    table = (
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
    notes = [note(result.learning, _setting), *failures(result)]
    report = markdown.report(
        out,
        cfg,
        result,
        title="Sanford qSA: attention embedding dimension vs sparsity",
        question=QUESTION,
        findings=table,
        results=results,
        figures=[fig],
        notes=notes,
    )
    report.status = status(cfg, result.tested)
    return flagged(report, result.learning, _setting)


def _setting(group: dict[str, Any]) -> str:
    return f"{group['model']} q={group['q']} m={group['m']}"


def status(cfg, tested: dict[str, Any]) -> Status:
    """The first m reaching `solved` at each q, labelled with its q ("none" where no m up to
    the largest does), whether it grows with q, and whether the successes respect the seed's
    lower bound (`analysis.thresholds`)."""
    firsts = ", ".join(
        f"q={t['q']}: {'none' if t['first_m'] is None else t['first_m']}" for t in tested["per_q"]
    )
    grows = "non-decreasing" if tested["grows"] else "NOT non-decreasing"
    bound = "respect" if tested["consistent_with_lower_bound"] else "VIOLATE"
    return Status(
        False,
        f"FINDINGS: first m reaching {cfg.solved:.0%} (of m up to {max(cfg.dims)}): {firsts}; "
        f"{grows} in q; the successes {bound} m >= q/log2 N",
    )


def findings(cfg, tested: dict[str, Any]) -> list[dict[str, Any]]:
    """Per q: the smallest m reaching `solved` beside the seed's range, and its growth with q
    (`analysis.thresholds`), worded."""
    findings = []
    for t in tested["per_q"]:
        q, first = t["q"], t["first_m"]
        findings.append(
            {
                "q": q,
                "predicted": f"success iff m >~ q = {q} (necessary: m >= q/log2 N = "
                f"{t['bound']:.2f}; sufficient: m = O(d + q log N))",
                "measured": (
                    f"first m reaching {cfg.solved:.0%}: {first}"
                    + ("" if t["monotone"] else " (not every larger m reaches it)")
                    if first is not None
                    else f"no m up to {max(cfg.dims)} reaches {cfg.solved:.0%}"
                ),
                "first_m": first,
                "consistent_with_lower_bound": t["consistent_with_lower_bound"],
                "fully_connected_best": t["fully_connected_best"],
            }
        )
    firsts = [f["first_m"] for f in findings]
    findings.append(
        {
            "q": "all",
            "predicted": "the m needed grows with q",
            "measured": "first m per q: "
            + ", ".join(f"q={q}: {m}" for q, m in zip(cfg.qs, firsts, strict=True))
            + ("; non-decreasing in q" if tested["grows"] else "; NOT non-decreasing in q"),
            "first_m": None,
            "consistent_with_lower_bound": tested["consistent_with_lower_bound"],
            "fully_connected_best": None,
        }
    )
    return findings

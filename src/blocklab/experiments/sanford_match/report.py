"""Report of `blocklab sanford match` (seed 002): what the seed's constructions compute, beside
what one trained layer of standard or tensor attention reaches at equal parameters, per task,
sequence length and width."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blocklab.analysis import learned
from blocklab.analysis.plateau import plateau_rule
from blocklab.experiments.sanford_match import analysis as match
from blocklab.formatting import markdown_table, number
from blocklab.reports import Findings, Report, Status, markdown
from blocklab.reports.figures import lines_plot
from blocklab.reports.learned import flagged, note
from blocklab.reports.markdown import criterion, require_finished, results_table

QUESTION = (
    "Seed 002: standard attention represents Match2 with O(1) embedding dimension but needs "
    "m H = Omega(N / log N) for Match3; third-order (tensor) attention represents Match3 at "
    "O(1). Here: the seed's constructions, executed as registered blocks with explicit weights "
    "and scored on fresh data; and one trained layer of each block at equal parameters (same "
    "width, embedding, feed-forward and readout; the tensor block's attention dimension is 2/3 of "
    "the width so that both blocks cost 4 W^2), each with its learning rate chosen on validation, "
    "trained per position; chance is the label balance."
)

COLUMNS = {"task": "task", "seq_len": "N", "width": "width", "model": "block"}


@dataclass
class MatchResult(Findings):
    """The run analyzed: the summaries and findings, the paired tests of tensor against standard
    per (task, N, width) with their power, and the plateau rule the rows were read by."""

    tested: list[dict[str, Any]] = field(default_factory=list)
    power: dict[str, Any] = field(default_factory=dict)
    plateau: str = ""
    widths: list[dict[str, Any]] = field(default_factory=list)
    # per (task, N, width, block): its test accuracy against chance, and losses that never moved
    learning: list[learned.Check] = field(default_factory=list)


def analyze(cfg, trials) -> MatchResult:
    """The summaries over seeds and, per task, N, width and block, what the seed predicts beside
    what was constructed and trained, with the paired test of tensor against standard, the
    smallest solving widths, and whether the trained layers learned (`analysis.learned`)."""
    summaries = match.summaries(cfg, trials.rows)
    tested = match.tests(cfg, summaries)
    found = match.findings(cfg, trials, summaries)
    return MatchResult(
        trials.rows,
        summaries,
        [_worded(f) for f in found],
        trials.failed,
        tested,
        match.power_json(cfg, tested),
        plateau_rule(trials.rows),
        match.solving_widths(cfg, found),
        learned.checks(trials.rows, match.KEYS),
    )


def _worded(f: dict[str, Any]) -> dict[str, Any]:
    """One finding of `analysis.findings` with its prediction and measure in words."""
    out = dict(f)
    out["predicted"] = "solves" if f["predicted"] else "does not solve (small width)"
    out = {k: out[k] for k in ("task", "seq_len", "width", "model", "predicted")} | {
        "constructed": f["constructed"],
        "constructed_width": f["constructed_width"],
        "measured": f"{f['mean']:.3f} accuracy " + ("(solved)" if f["solved"] else "(not solved)"),
    }
    return out | {k: v for k, v in f.items() if k not in out}


def scaling(cfg, widths: list[dict[str, Any]]) -> list[str]:
    """Standard attention on Match3 at two or more N: how its solving width grows, against the
    growth of N / log N."""
    rows = [w for w in widths if (w["task"], w["model"]) == ("match3", "standard")]
    if len(rows) < 2:
        return ["one sequence length: the Omega(N / log N) scaling needs two (`--full`)"]
    lines = []
    for a, b in zip(rows, rows[1:], strict=False):
        bound = b["n_over_log_n"] / a["n_over_log_n"]
        if a["width"] is None or b["width"] is None:
            missing = [str(r["seq_len"]) for r in (a, b) if r["width"] is None]
            lines.append(
                f"standard attention on Match3: not solved within widths {list(cfg.widths)} at "
                f"N = {', '.join(missing)}, so its width cannot be compared with N / log N "
                f"(which grows {bound:.2f}x from N = {a['seq_len']} to {b['seq_len']})"
            )
        else:
            grew = b["width"] / a["width"]
            lines.append(
                f"standard attention on Match3 solves from width {a['width']} at N = "
                f"{a['seq_len']} and {b['width']} at N = {b['seq_len']}: {grew:.2f}x, "
                f"against {bound:.2f}x for N / log N (widths are a grid of doublings)"
            )
    return lines


def statement(cfg, trials, result: Findings, widths: list[dict[str, Any]]) -> list[str]:
    """The finding in the seed's terms: constructed, then trained, with the numbers."""
    lines = []
    for c in trials.constructions:
        name = "tensor attention" if c["block"] == "tensor_attention" else "standard attention"
        lines.append(
            f"constructed: {name} solves {c['task'].capitalize()} at m = {c['width']} "
            f"(N = {c['seq_len']}, M = {c['modulus']}): accuracy {c['accuracy']:.4f} on "
            f"{c['n_test']} fresh sequences"
        )
    if "match3" in cfg.tasks:
        lines.append(
            "constructed: standard attention has no construction for Match3 (the seed proves "
            "m H = Omega(N / log N))"
        )
    for w in widths:
        best = max(
            (
                f
                for f in result.findings
                if (f["task"], f["seq_len"], f["model"]) == (w["task"], w["seq_len"], w["model"])
            ),
            key=lambda f: f["mean"],
        )
        got = (
            f"solves from width {w['width']}"
            if w["width"] is not None
            else f"does not solve at widths {list(cfg.widths)} (best {best['mean']:.3f} at "
            f"width {best['width']})"
        )
        where = f"{w['task'].capitalize()} (N = {w['seq_len']})"
        lines.append(f"trained: {w['model']} attention on {where} {got}")
    return lines


def write(out_dir, cfg, trials) -> Report:
    require_finished(trials)
    result = analyze(cfg, trials)
    widths = result.widths
    said = statement(cfg, trials, result, widths)
    out = Path(out_dir)
    extra = {"constructions": trials.constructions, "solving_widths": widths}
    extra |= {"lr_choice": trials.lr_choice, "statement": said}
    tested = result.tested
    said += [f"trained: {line}" for line in separation(cfg, tested)]
    extra |= {"tests": tested, "power": result.power}
    report = markdown.report(
        out,
        cfg,
        result,
        extra,
        title="Sanford Match2 / Match3: constructed and trained, standard vs tensor attention",
        question=QUESTION,
        findings=_findings_table(result.findings),
        results=results_table(result.summaries, COLUMNS),
        figures=[_accuracy_plot(cfg, result.summaries, out / "match_accuracy_vs_width.png")],
        notes=_notes(cfg, trials, result, said, widths) + _test_notes(tested, extra["power"]),
    )
    report.text[:0] = said
    report.status = Status(False, "FINDINGS: " + "; ".join(separation(cfg, tested)))
    return flagged(report, result.learning, _setting)


def _setting(group: dict[str, Any]) -> str:
    return f"{group['model']} on {group['task']} N={group['seq_len']} width {group['width']}"


def separation(cfg, tested: list[dict[str, Any]]) -> list[str]:
    """Per task: at which widths tensor attention is significantly ahead of standard attention,
    or behind, after Holm at `alpha`."""
    out = []
    for task in cfg.tasks:
        family = [t for t in tested if t["task"] == task]
        if not family:
            continue
        ahead, behind = (
            [t for t in family if t["p_holm"] < cfg.alpha and side(t)]
            for side in (
                lambda t: t["mean_tensor"] > t["mean_standard"],
                lambda t: t["mean_tensor"] < t["mean_standard"],
            )
        )
        if any(math.isnan(t["p_holm"]) for t in family):
            out.append(f"{task.capitalize()}: not tested here (fewer than 2 seeds at a width)")
            continue
        parts = [
            f"tensor ahead at {', '.join(str(t['width']) for t in ahead)}" if ahead else "",
            f"tensor behind at {', '.join(str(t['width']) for t in behind)}" if behind else "",
        ]
        said = "; ".join(p for p in parts if p) or "none differs"
        out.append(
            f"{task.capitalize()}, {len(family)} widths: {said} "
            f"(Holm p < {cfg.alpha:g}, {min(t['n'] for t in family)} seeds)"
        )
    return out


def _accuracy_plot(cfg, summaries, path: Path) -> str:
    several = len(cfg.seq_len) > 1
    return lines_plot(
        summaries,
        path,
        x="width",
        series=("model", "seq_len") if several else ("model",),
        arm="model",
        panels="task",
        xlabel="model width (hidden units)",
        ylabel="test accuracy (fraction correct)",
        hline=cfg.solved,
    )


def _findings_table(findings: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["task", "N", "width", "block", "seed 002 predicts", "constructed", "trained"]
    header += ["plateaued", "lr", "agrees", "tensor vs standard (Holm p)"]
    rows = [
        [
            f["task"],
            str(f["seq_len"]),
            str(f["width"]),
            f["model"],
            f["predicted"],
            "-"
            if f["constructed"] is None
            else f"{f['constructed']:.4f} (m = {f['constructed_width']})",
            f["measured"],
            f"{f['plateaued']:.0%}",
            "-" if f["lr"] is None else f"{f['lr']:.3g}" + (" (edge)" if f["lr_at_edge"] else ""),
            "yes" if f["agrees"] else "no",
            number(f["p_holm"], 3),
        ]
        for f in findings
    ]
    return header, rows


def _notes(cfg, trials, result: MatchResult, said: list[str], widths) -> list[str]:
    """The finding in words, the scaling with N, the constructions, how 'solved' and the
    learning rate were decided, chance per task and the failed trials."""
    notes = [f"Finding: {line}" for line in said] + [note(result.learning, _setting)]
    notes += scaling(cfg, widths)
    built = markdown_table(
        ["task", "block", "m", "N", "M", "accuracy", "fresh sequences"],
        [
            [c["task"], c["block"], str(c["width"]), str(c["seq_len"]), str(c["modulus"])]
            + [f"{c['accuracy']:.4f}", str(c["n_test"])]
            for c in trials.constructions
        ],
    )
    notes.append(
        "Constructions (`blocklab.constructions`): the block alone on the one-hot input with the "
        "STOP token, a residue predicted positive when its output exceeds 1/2:\n\n  "
        + "\n  ".join(built)
    )
    notes.append(
        "'solved' means a mean test accuracy of at least "
        f"{cfg.solved:.0%}; the p-value is a paired t-test across seeds (tensor vs standard), "
        "Holm-corrected within each task. The learning rate is the best of "
        f"{list(cfg.lr_grid)} on validation (seed 0), '(edge)' when it stayed at an edge after "
        f"{cfg.lr_extend} extension(s). Plateaued: the share of seeds where "
        f"{criterion(result.plateau, cfg.plateau_tol)}."
    )
    notes += [
        f"{t} (N = {b['seq_len']}): modulus M = {b['modulus']}, fraction of positive labels "
        f"{b['balance']:.3f} (chance level of a constant prediction)"
        for t, b in _balance(cfg)
    ]
    return notes + markdown.failures(result)


def _test_notes(tested: list[dict[str, Any]], power: dict[str, Any]) -> list[str]:
    """The paired tests as a table, and the power the design had for them."""
    table = markdown_table(
        ["task", "N", "width", "standard", "tensor", "gap (sd)", "p", "p (Holm)", "seeds"],
        [
            [t["task"], str(t["seq_len"]), str(t["width"])]
            + [number(t["mean_standard"], 3), number(t["mean_tensor"], 3)]
            + [f"{t['mean_tensor'] - t['mean_standard']:+.3f} ({number(t['gap_sd'], 2)})"]
            + [number(t["p"], 3), number(t["p_holm"], 3), str(t["n"])]
            for t in tested
        ],
    )
    said = [
        "Tensor against standard attention, paired t-test per width (two-sided), Holm-corrected "
        "within the task:\n\n  " + "\n  ".join(table)
    ]
    design = (
        f"with {power['n']} seeds, a paired test at Holm's strictest level (alpha / "
        f"{power['comparisons']}, two-sided) finds a Match3 gap of {power['effect']:g} with a "
        f"per-seed gap std of {power['sd']:g}"
    )
    return [*said, markdown.power_note(power, design, "Match3 gap std, pooled over widths,")]


def _balance(cfg) -> list[tuple[str, dict[str, Any]]]:
    """Per task and N, the modulus M chosen and the share of positive labels: the accuracy of a
    constant prediction."""
    from blocklab.tasks import make_task

    out = []
    for t in cfg.tasks:
        for n in cfg.seq_len:
            info = make_task(t, seq_len=n, n_train=cfg.n_train).make(0).info
            out.append((t, {"seq_len": n, "modulus": info["modulus"], "balance": info["balance"]}))
    return out

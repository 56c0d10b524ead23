"""What every report shares: Markdown tables, the report's skeleton (question, prediction and
measurement, results, figures, notes, configuration, provenance), plain JSON, and the findings an
experiment prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blocklab.errors import UserError
from blocklab.formatting import config_json, markdown_table, spread
from blocklab.reports import Report
from blocklab.reports.base import finding_label
from blocklab.rundir import RunDir


def write(
    out_dir: str | Path,
    cfg: Any,
    *,
    title: str,
    question: str,
    findings: tuple[list[str], list[list[str]]],
    results: tuple[list[str], list[list[str]]],
    figures: list[str],
    notes: list[str],
) -> Path:
    """report.md: the question, prediction beside measurement, the results, figures and notes,
    then the configuration and the provenance of the run."""
    from blocklab.engine.provenance import provenance

    config = config_json(cfg)
    lines = [f"# {title}", "", "## Question", "", question, "", "## Prediction and measurement", ""]
    lines += markdown_table(*findings)
    lines += ["", "## Results", ""]
    lines += markdown_table(*results)
    lines += [""] + [f"![{Path(f).stem}]({f})" for f in figures]
    if notes:
        lines += ["", "## Notes", ""]
        for n in notes:
            lines.append(f"- {n}")
            if n.rstrip().splitlines()[-1].lstrip().startswith("|"):
                lines.append("")  # a note ending in a table: the blank line ends the table
    lines += ["", "## Configuration", "", "```json", json.dumps(config, indent=2), "```", ""]
    lines += ["## Provenance", ""] + [f"- {k}: {v}" for k, v in provenance().items()]
    path = RunDir(out_dir).report
    path.write_text("\n".join(lines) + "\n")
    return path


FINDING_HEADER = ["part", "setting", "predicted", "measured", "verdict"]


def findings_table(findings: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The findings of an experiment whose findings carry FINDING_HEADER's keys, one row each."""
    return FINDING_HEADER, [[str(f.get(k, "-")) for k in FINDING_HEADER] for f in findings]


def results_table(summaries: list[dict[str, Any]], keys: dict[str, str]):
    """(header, rows): one row per configuration, sorted by `keys` (summary key -> column)."""
    header = [*keys.values(), "parameters", "test accuracy (mean ± std [95% CI])", "seeds"]
    ordered = sorted(summaries, key=lambda s: tuple(s[k] for k in keys))
    rows = [
        [
            *(f"{s[k]:g}" if isinstance(s[k], float) else str(s[k]) for k in keys),
            str(s["total_params"]),
            spread(s),
            str(s["n"]),
        ]
        for s in ordered
    ]
    return header, rows


def put_status(report: Path, status) -> None:
    """The run's status line (`reports.Status`) as report.md's first line under its title, in
    bold, so the verdict or its refusal is the first thing read."""
    lines = report.read_text().splitlines()
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("# ")), 0)
    lines[at:at] = ["", f"**{status.line}**"]
    report.write_text("\n".join(lines) + "\n")


def failures(result) -> list[str]:
    return [f"failed: {f['trial']}: {f['error'].splitlines()[0]}" for f in result.failed]


def power_note(power: dict[str, Any], design: str, spread: str) -> str:
    """One note on a design's power (`analysis.power.design_power`): `design` says what the
    planned test finds and `spread` names the std the run measured."""
    if power["power"] is None:
        return f"Power: none: {power['why']}."
    df = "n - 1" if power["paired"] else "2n - 2"
    line = f"Power: {design}, with probability {power['power']:.4g} (noncentral t, df = {df})."
    if power["power_at_measured_sd"] is not None:
        line += (
            f" At the {spread} this run measured ({power['measured_sd']:.3g}) the power is "
            f"{power['power_at_measured_sd']:.3g}."
        )
    return line


def require_finished(result) -> None:
    """A run of trained trials with none finished has nothing to report: say where the failures
    are instead."""
    if not result.rows:
        raise UserError("no trial finished; see `blocklab runs --out DIR list --status failed`")


def findings_report(path: Path, result, **extra: Any) -> Report:
    """An experiment's findings: one line each (what was predicted beside what was measured), or
    as JSON its findings, summaries, `extra` and failures."""
    payload = {"findings": result.findings, "summaries": result.summaries, **extra}
    payload["failed"] = result.failed
    lines = []
    for f in result.findings:
        verdict = f" -> {f['verdict']}" if "verdict" in f else ""
        lines.append(
            f"{finding_label(f)}: predicted {f['predicted']}; measured {f['measured']}{verdict}"
        )
    return Report(path, payload, lines + failures(result))


def report(
    out_dir: str | Path, cfg: Any, result, extra: dict[str, Any] | None = None, **sections
) -> Report:
    """The report of an experiment that tests predictions: report.md (`write`, with `sections`)
    and its findings as the command prints them (`findings_report`, with `extra`)."""
    return findings_report(write(out_dir, cfg, **sections), result, **(extra or {}))


def criterion(rule: str, tol: float) -> str:
    """The plateau criterion (`analysis.plateau.plateau_rule`) in words."""
    if rule == "wsd":
        return (
            f"the annealed validation loss of the run of half the steps lies < {tol:g} above "
            "the full run's: doubling the steps gained less than that"
        )
    return (
        f"smoothed validation loss fell by < {tol:g} of its final value over the last quarter "
        "of training"
    )

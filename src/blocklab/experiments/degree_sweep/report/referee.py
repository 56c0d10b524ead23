"""The referee's part of the degree sweep's report: each cell's first trial fitted from one
initialization by both second-order optimizers (`degree_sweep.analysis.referee.referee_summary`), in
a Markdown section and as plain data for `--json`.
"""

import dataclasses
import math
from typing import Any

from blocklab.experiments.degree_sweep.analysis.referee import RefereeSummary
from blocklab.formatting import markdown_table
from blocklab.formatting import short as fmt


def summary_json(summary: RefereeSummary | None) -> dict[str, Any] | None:
    """The referee's comparison as plain data (`degree_sweep.analysis.referee.referee_summary`)."""
    return None if summary is None else dataclasses.asdict(summary)


def section(summary: RefereeSummary) -> list[str]:
    """Each cell's first trial fitted from one initialization by both optimizers: where they
    agree, the training loss is the network's, not one optimizer's."""
    cells = summary.cells
    main, ref = cells[0].main or "main", cells[0].referee
    lines = [
        "",
        "## Referee",
        "",
        f"Each cell's first trial (teacher 0, seed 0) fitted again by {ref} from {main}'s first "
        "initialization on the same training set; gap: (referee - main) / main training loss. "
        "Where the two optimizers agree, the loss is the network's, not one optimizer's.",
        "",
    ]
    body = [
        (
            c.arm,
            str(c.budget),
            fmt(c.main_train),
            _flag(c.main_converged),
            fmt(c.referee_train),
            _flag(c.referee_converged),
            _percent(c.gap),
        )
        for c in cells
    ]
    header = ("arm", "budget", f"{main} train", "converged", f"{ref} train", "converged", "gap")
    lines += markdown_table(header, body)
    if math.isnan(summary.median_gap):
        return lines + ["", "No cell has both training losses to compare.", ""]
    said = (
        f"The two optimizers' training losses differ by a median of {summary.median_gap:.1%} "
        f"and at most {summary.max_gap:.1%} (|gap| over the cells)."
    )
    return lines + ["", said, ""]


def _flag(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def _percent(x: float) -> str:
    return f"{x:.1%}" if math.isfinite(x) else "-"

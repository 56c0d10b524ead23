"""The degree sweep's tables: the rows' summaries over seeds, the paired tests per (task, budget)
and each budget's ranking beside theory's, computed once (`tabulate`), their Results rows
(`COLUMNS`, `cells`) and their JSON (`to_json`)."""

import dataclasses
from dataclasses import dataclass
from typing import Any

from blocklab.analysis.summary import drawn_interval
from blocklab.experiments.degree_sweep.analysis.arms import (
    TEST,
    Summary,
    Verdict,
    compare,
    ranking_vs_theory,
    summarize_arms,
)
from blocklab.experiments.degree_sweep.report.loss_table import _metric_cell
from blocklab.experiments.degree_sweep.report.verdicts import verdict_json
from blocklab.formatting import plain, short

COLUMNS = (
    "task",
    "budget",
    "arm",
    "depth",
    "width",
    "block params",
    "embed+readout",
    "test metric",
    "diverged",
    "steps to threshold",
)


def _steps_cell(s):
    if s.n == 0:
        return "-"
    reached = f"reached {s.n_reached}/{s.n}"
    if s.n_reached == 0:
        return f"never ({reached})"
    spread = f" ± {short(s.steps_std)}" if s.n_reached > 1 else ""
    return f"{short(s.steps_mean)}{spread} ({reached})"


def cells(s, steps=True):
    """A Results row; `steps`: with its steps to the loss threshold (Adam runs only)."""
    shape = (str(s.budget), s.arm, str(s.depth), str(s.width), str(s.block_params))
    counts = (str(s.other_params), _metric_cell(s), f"{s.n_diverged}/{s.n_seeds}")
    return (s.task, *shape, *counts, *(_steps_cell(s),) * steps)


@dataclass
class Tables:
    """The sweep's tables, computed once (`tabulate`) and worded by `write_report` and `to_json`:
    the rows, their summaries over seeds, the paired tests per (task, budget) at level `alpha`,
    and each budget's ranking beside theory's."""

    rows: list[dict[str, Any]]
    summaries: list[Summary]
    verdicts: list[Verdict]
    rankings: list[Any]
    alpha: float
    # (task, budget, arm) -> the interval the figures draw (`analysis.summary.drawn_interval`)
    bands: dict[tuple[str, int, str], tuple[float, float]]


def tabulate(rows, alpha=0.05) -> Tables:
    summaries = summarize_arms(rows)
    bands = {(s.task, s.budget, s.arm): drawn_interval(s) for s in summaries}
    return Tables(rows, summaries, compare(rows, alpha), ranking_vs_theory(summaries), alpha, bands)


def to_json(tables: Tables):
    """Summaries, verdicts and rankings as JSON-serializable dicts (NaN -> None)."""
    return plain(
        {
            "summaries": [dataclasses.asdict(s) for s in tables.summaries],
            "verdicts": [verdict_json(v) for v in tables.verdicts],
            "ranking": [dataclasses.asdict(r) for r in tables.rankings],
            "test": TEST,
            # the paired tests' level; `alpha` is the shared scaling model's exponent
            "test_level": tables.alpha,
        }
    )

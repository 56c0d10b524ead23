"""The degree sweep's Markdown report, report.md, with its figures (`write_report`): the capacity
analysis's sections first where there is one, the exact measures, the question, the paired
tests, the Results table, theory's ranking, the configuration and the provenance."""

import json
from pathlib import Path

import blocklab.reports  # noqa: F401  (files only: its backend is set before plots import pyplot)
from blocklab.experiments.degree_sweep.analysis.arms import TEST
from blocklab.experiments.degree_sweep.report import exact, plots
from blocklab.experiments.degree_sweep.report.capacity import capacity_section
from blocklab.experiments.degree_sweep.report.curves import (
    contrasts,
    efficiency,
    fit_curves,
    scaling_curves,
)
from blocklab.experiments.degree_sweep.report.tables import COLUMNS, Tables, cells
from blocklab.experiments.degree_sweep.report.theory import question, theory_section
from blocklab.experiments.degree_sweep.report.verdicts import claim
from blocklab.formatting import markdown_table
from blocklab.rundir import RunDir


def write_report(
    out_dir,
    tables: Tables,
    *,
    title,
    config,
    provenance,
    capacity=None,
    referee_rows=(),
    exact_measures=None,
    width=None,
):
    """Write report.md and its figures into out_dir; return the report's path. With `capacity`
    (`degree_sweep.analysis.capacity`) the design checks, verdict, fits and efficiency
    lead; second-order fits add their loss curves, the referee's (`referee_rows`) beside them."""
    rows, alpha = tables.rows, tables.alpha
    if not rows:
        raise ValueError("no finished trials to report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summaries, verdicts, rankings = tables.summaries, tables.verdicts, tables.rankings
    plots.metric_vs_degree(summaries, tables.bands, out / "metric_vs_degree.png")
    plots.learning_curves(rows, out / "learning_curves.png")
    plots.ranking_vs_theory(summaries, out / "ranking_vs_theory.png")
    if capacity is not None:
        scaling_curves(capacity, out / "scaling.png", plots.loss_unit({r["task"] for r in rows}))
        if capacity.matched is not None:
            contrasts(capacity, out / "contrasts.png")
        if capacity.model is not None:
            efficiency(capacity, out / "efficiency.png")
        if capacity.second_order:
            fit_curves(rows, referee_rows, out / "fit_curves.png")

    lines = [f"# {title}", ""]
    if capacity is not None:  # the scaling plot and the multipliers first, then the question
        lines += capacity_section(capacity)
    if exact_measures:
        lines += ["## Exact measures", "", *exact.lines(exact_measures, width, markdown=True), ""]
    lines += ["## Question", "", question(), ""]
    lines += [
        "## Paired tests per budget",
        "",
        f"Test: {TEST} over the comparisons of the best arm with each other arm within a "
        f"task and budget, pairing (teacher, seed)s that both arms finished; alpha = {alpha:g}; "
        "the p-values shown are Holm-adjusted.",
        "",
    ]
    lines += [f"- {claim(v)} ({v.n_seeds} pair{'s' * (v.n_seeds != 1)})" for v in verdicts]
    lines += [
        "",
        "## Results",
        "",
        "Test metric over the seeds that finished (mean ± std, 95% "
        "Student-t interval); diverged seeds are excluded and counted.",
        "",
    ]
    # steps to the loss threshold: an Adam run's measure; a second-order fit stops at its
    # certificate, and every one of its rows would read "0 (reached n/n)"
    steps = not all(plots.second_order(r) for r in rows)
    columns = COLUMNS if steps else COLUMNS[:-1]
    lines += markdown_table(columns, [cells(s, steps) for s in summaries])
    lines += [""] + theory_section(summaries, rankings)
    lines += [
        "",
        "![test metric vs degree](metric_vs_degree.png)",
        "",
        "![learning curves](learning_curves.png)",
        "",
        "![ranking vs theory](ranking_vs_theory.png)",
        "",
        "## Configuration",
        "",
        "```json",
        json.dumps(config, indent=2, default=str),
        "```",
        "",
        "## Provenance",
        "",
    ]
    lines += [f"- {key}: {value}" for key, value in provenance.items()]
    path = RunDir(out).report
    path.write_text("\n".join(lines) + "\n")
    return path

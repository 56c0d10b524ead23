"""Report of the degree sweep (`blocklab degree-sweep`, `blocklab demo`): its analysis (summaries,
paired tests and the capacity analysis), a terminal table, a Markdown report with figures, and a
JSON dict.

Every number comes from the rows (one per finished trial) or from blocklab.theory; nothing else.
"""

import dataclasses
import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blocklab.reports  # noqa: F401  (files only: its backend is set before plots import pyplot)
from blocklab.analysis.stats import (
    TEST,
    Summary,
    Verdict,
    compare,
    ranking_vs_theory,
    summarize_arms,
)
from blocklab.analysis.summary import drawn_interval
from blocklab.engine.progress import current
from blocklab.engine.provenance import provenance
from blocklab.experiments.degree_sweep import EXPERIMENT, DegreeSweep, sizing
from blocklab.experiments.degree_sweep.analysis.capacity import (
    PREDICTED_EFFECT,
    CapacityResult,
    Invocation,
    Outcome,
)
from blocklab.experiments.degree_sweep.analysis.capacity import analyze as analyze_capacity
from blocklab.experiments.degree_sweep.analysis.claims import Claim
from blocklab.experiments.degree_sweep.analysis.claims import claims as word_claims
from blocklab.experiments.degree_sweep.analysis.pilot import Pilot, Sizing, Spreads
from blocklab.experiments.degree_sweep.analysis.pilot import pilot as measure_spreads
from blocklab.experiments.degree_sweep.analysis.pilot import size as size_for
from blocklab.experiments.degree_sweep.report import (
    answer,
    claims,
    exact,
    plots,
    referee,
    roundings,
)
from blocklab.experiments.degree_sweep.report.capacity import (
    capacity_json,
    capacity_section,
    check_lines,
    converged_line,
)
from blocklab.experiments.degree_sweep.report.claims import DECIDING
from blocklab.experiments.degree_sweep.report.curves import (
    contrasts,
    efficiency,
    fit_curves,
    scaling_curves,
)
from blocklab.experiments.degree_sweep.report.loss_table import _metric_cell, table
from blocklab.experiments.degree_sweep.report.multipliers import multiplier_lines, other_count_lines
from blocklab.experiments.degree_sweep.report.pilot import pilot_json, pilot_lines

# the command line's --target-resolution and --plan (`Experiment.sized`)
from blocklab.experiments.degree_sweep.report.pilot import plan_lines as plan_lines
from blocklab.experiments.degree_sweep.report.pilot import size as size
from blocklab.experiments.degree_sweep.report.status import status as run_status
from blocklab.experiments.degree_sweep.report.status_line import next_lines
from blocklab.experiments.degree_sweep.report.theory import question, theory_section
from blocklab.formatting import config_json, markdown_table, plain, short
from blocklab.reports import Report
from blocklab.reports.markdown import failures, require_finished
from blocklab.reports.verdicts import claim, verdict_json
from blocklab.rundir import RunDir

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


def _cells(s, steps=True):
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
    lines += markdown_table(columns, [_cells(s, steps) for s in summaries])
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


@dataclass
class Result:
    rows: list[dict[str, Any]]
    lr_choice: dict[str, dict[str, Any]]  # "budget/arm" -> the rate chosen and those tried
    failed: list[dict[str, Any]]
    # per (task, budget, arm) the test metric over seeds; per (task, budget) the paired tests
    tables: Tables
    capacity: CapacityResult  # design checks, scaling fits, efficiency and the verdict
    pilot: Pilot  # the spreads a larger run is sized by
    # second-order fits: each cell's first trial refitted by the other optimizer
    referee: list[dict[str, Any]] = field(default_factory=list)
    # arm -> the rank of its input Jacobian measured before the fits (`input_ranks`)
    input_rank: dict[str, dict[str, Any]] = field(default_factory=dict)
    # arm -> its exact per-parameter measures at the run's width (`exact`)
    exact: dict[str, dict[str, Any]] = field(default_factory=dict)
    # with roundings K: the capacity analysis of each other rounding, 1 to K-1 (the run's own is
    # `capacity`)
    roundings: tuple[CapacityResult, ...] = ()
    # seed 000's predictions worded at `resolution` (`degree_sweep.analysis.claims`), and where one
    # is undecided the run that would decide it at +-3%, from this run's spreads
    claims: list[Claim] = field(default_factory=list)
    resolution: float = PREDICTED_EFFECT
    deciding: Sizing | None = None


def _capacity(cfg, trials, rows, verdicts, command, on_draw=None, referee=()):
    """The capacity analysis (`degree_sweep.analysis.capacity`) of `rows`, one rounding's."""
    return analyze_capacity(
        rows,
        trials.lr_choice,
        list(cfg.budgets) or sorted({int(r["budget"]) for r in rows}),
        tol=cfg.plateau_tol,
        n_boot=cfg.n_boot,
        paired=verdicts,
        width=cfg.shape.width if cfg.mode == "width" else None,
        converge_tol=cfg.train.converge_tol,
        referee=referee,
        input_rank=getattr(trials, "input_rank", None),
        run=Invocation(cfg, command, EXPERIMENT, DegreeSweep.no_flags, DegreeSweep.defaults),
        on_draw=on_draw,
        count=cfg.count,
    )


def analyze(cfg, trials, command: str | None = None) -> Result:
    """The summaries over seeds, the paired tests, the capacity analysis
    (`degree_sweep.analysis.capacity`) and the pilot's spreads of the sweep's rows; with
    roundings, the capacity analysis of each other rounding's rows too. `command`: the run's own as
    `run.json` recorded it, which a next command repeats (None: not known)."""
    by_rounding: dict[int, list] = {}
    for r in trials.rows:  # rows stored before roundings existed are the run's own
        by_rounding.setdefault(int(r.get("rounding") or 0), []).append(r)
    rows = by_rounding.pop(0, [])
    tables = tabulate(rows, alpha=cfg.alpha)
    refitted = getattr(trials, "referee", [])  # trials built before referees have none
    draw = current().counter("analysis: {} intervals", "fit")  # the command's display
    cap = _capacity(cfg, trials, rows, tables.verdicts, command, draw, refitted)
    others = tuple(
        _capacity(cfg, trials, got, compare(got, cfg.alpha), command)
        for _, got in sorted(by_rounding.items())
    )
    seen = getattr(trials, "input_rank", {})
    d = cap.decision  # sized by the widest decisive interval over every count
    widths = [c.decision.widest for c in cap.counts.values() if not math.isnan(c.decision.widest)]
    spreads = measure_spreads(rows, cap.model, max(widths, default=math.nan), d.df, d.level)
    r = cfg.target_resolution or PREDICTED_EFFECT
    worded = word_claims(cap, r, others)
    deciding = None
    if any(c.word == "undecided" for c in worded):
        deciding = size_for(Spreads.of(spreads, "this run"), DECIDING, cfg.seeds, len(cfg.arms()))
    return Result(
        rows, trials.lr_choice, trials.failed, tables, cap, spreads, refitted, seen,
        getattr(trials, "exact", {}), others, worded, r, deciding,
    )  # fmt: skip


def write(out_dir, cfg, trials) -> Report:
    """The analysis (`analyze`), the report, and what the command prints: the table, the design
    checks, the efficiency against d = 3 and the verdict, which exists only when the run passes
    its design checks."""
    require_finished(trials)
    command = RunDir(out_dir).record().get("command")
    result = analyze(cfg, trials, command)
    cap = result.capacity
    # what a later --target-resolution in this directory is sized by
    sizing.record(out_dir, cfg, result.pilot, f"the run in {out_dir}")
    path = write_report(
        out_dir,
        result.tables,
        title="Degree sweep",
        config=config_json(cfg),
        provenance=provenance(),
        capacity=cap,
        referee_rows=result.referee,
        exact_measures=result.exact,
        width=cfg.shape.width,
    )
    payload = to_json(result.tables)
    payload.update(capacity_json(cap))
    payload.update(
        lr_choice=result.lr_choice,
        failed=result.failed,
        # what the fits ran: the config's optimizer, or L-BFGS where a fit's cost moved it there
        # (`fitting.estimate`); both, joined, when the cells differ
        optimizer="+".join(
            sorted({r.get("optimizer") or cfg.train.optimizer for r in result.rows})
        ),
        referee=referee.summary_json(cap.referee),
    )
    payload.update(ladder=cfg.ladder if cfg.staged else "off", input_rank=result.input_rank)
    payload["exact"] = exact.json(result.exact)
    spreads = result.pilot
    payload["pilot"] = pilot_json(spreads)
    if cfg.target_resolution is not None:
        payload["claims"] = claims.json(result.claims)
    if result.roundings:
        payload["roundings"] = roundings.Across(cap, result.roundings).json()
    lines = [table(result.tables.summaries)]
    if cap.matched is not None:  # the answer at equal counts first; the scaling law beside it
        lines += ["", *answer.answer_lines(cap)]
        if cap.model is not None:
            lines += ["", "the scaling-law view (secondary):"]
    if cap.model is not None:  # with an answer, the functional count is H_fd's, worded there
        lines += ["", *multiplier_lines(cap)]
        lines += other_count_lines(cap) if cap.matched is None else []
    if result.exact:
        lines += ["", *exact.lines(result.exact, cfg.shape.width)]
    if cap.second_order:
        lines += pilot_lines(spreads)
    lines += ["\ndesign checks:", *check_lines(cap)]
    if converged := converged_line(cap):
        lines.append(converged)
    if result.roundings:
        lines += ["", *roundings.Across(cap, result.roundings).lines()]
    lines += next_lines(cap)
    # each prediction's word, and the +-3% run that would decide an undecided one
    words = shlex.split(command) if command else ["blocklab", "degree-sweep"]
    given = cfg.target_resolution is not None
    lines += ["", *claims.lines(result.claims, result.resolution, given, result.deciding, words)]
    if cap.decision.outcome is not Outcome.NO_VERDICT and cap.paired:
        lines.append("\npaired tests per budget (Holm-corrected):")
        lines += [f"- {claim(p)}" for p in cap.paired]
    # one line for the terminal and the index; its parts apart for the page's banner
    status = run_status(cap, result.roundings, result.exact)
    return Report(path, payload, lines + failures(result), status)

"""What the degree sweep's command writes and prints (`write`): the analysis (`result.analyze`),
report.md (`document.write_report`), the JSON payload, the spreads a later sized run reads
(`sizing.record`), and the lines for the terminal with the run's status."""

import shlex

from blocklab.engine.provenance import provenance
from blocklab.experiments.degree_sweep import pricing, sizing
from blocklab.experiments.degree_sweep.analysis.capacity import Outcome
from blocklab.experiments.degree_sweep.report import answer, claims, exact, referee, roundings
from blocklab.experiments.degree_sweep.report.capacity import (
    capacity_json,
    check_lines,
    converged_line,
)
from blocklab.experiments.degree_sweep.report.document import write_report
from blocklab.experiments.degree_sweep.report.loss_table import table
from blocklab.experiments.degree_sweep.report.multipliers import multiplier_lines, other_count_lines
from blocklab.experiments.degree_sweep.report.pilot import pilot_json, pilot_lines
from blocklab.experiments.degree_sweep.report.result import analyze
from blocklab.experiments.degree_sweep.report.status import status as run_status
from blocklab.experiments.degree_sweep.report.status_line import next_lines
from blocklab.experiments.degree_sweep.report.tables import to_json
from blocklab.experiments.degree_sweep.report.verdicts import claim
from blocklab.formatting import config_json
from blocklab.reports import Report
from blocklab.reports.markdown import failures, require_finished
from blocklab.rundir import RunDir


def write(out_dir, cfg, trials) -> Report:
    """The analysis (`analyze`), the report, and what the command prints: the table, the design
    checks, the efficiency against d = 3 and the verdict, which exists only when the run passes
    its design checks."""
    require_finished(trials)
    command = RunDir(out_dir).record().get("command")
    # the next command priced against this run's store, as `--plan` on it prices it
    result = analyze(cfg, trials, command, pricing.pricer(cfg, out_dir))
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

"""Report of the degree sweep (`blocklab degree-sweep`, `blocklab demo`): its analysis (summaries,
paired tests and the capacity analysis), a terminal table, a Markdown report with figures, and a
JSON dict.

Every number comes from the rows (one per finished trial) or from blocklab.theory; nothing else.

The package: `result` (`analyze`: the analysis of a run's rows, one `Result`), `tables` (the
summaries, paired tests and rankings, `tabulate`, and their JSON, `to_json`), `document`
(report.md and its figures, `write_report`), `output` (`write`: what the command writes and
prints); the sections and lines they word: `capacity`, `answer`, `multipliers`, `claims`,
`exact`, `theory`, `referee`, `roundings`, `pilot`, `loss_table`, `intervals`, `edges`, `status`,
`status_line`; the figures: `plots` and `curves`. This file names what callers import.
"""

from blocklab.experiments.degree_sweep.report.document import write_report
from blocklab.experiments.degree_sweep.report.loss_table import table
from blocklab.experiments.degree_sweep.report.output import write
from blocklab.experiments.degree_sweep.report.result import Result, analyze
from blocklab.experiments.degree_sweep.report.tables import COLUMNS, Tables, tabulate, to_json

__all__ = [
    "COLUMNS",
    "Result",
    "Tables",
    "analyze",
    "table",
    "tabulate",
    "to_json",
    "write",
    "write_report",
]

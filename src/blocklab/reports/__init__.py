"""Reports: what every experiment's report shares. Each experiment's report lives in its home
(`blocklab.experiments.NAME.report`, found by `Experiment.report_module`): its `analyze(cfg,
trials)` turns what the run returned (`blocklab.experiments.Trials`) into its summaries over
seeds, tests, fits and findings, and its `write(out_dir, cfg, trials)` analyzes, writes report.md
and its figures into the run directory and returns a `Report`, what the command line prints.
Here: `base` (`Report`, `Status` and `Findings`); `markdown` and `figures`, the pieces the
reports share; `_seprank`, the two seprank reports' tables; and the run's page (`html`,
`page_trials`), which the run path writes for every experiment.
"""

import matplotlib

# files only, no display (servers, worker processes): set before any report imports pyplot
matplotlib.use("Agg")

from blocklab.reports.base import Findings, Report, Status  # noqa: E402

__all__ = ["Findings", "Report", "Status"]

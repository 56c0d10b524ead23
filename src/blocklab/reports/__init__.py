"""Reports, one module per experiment (named by its manifest's `report`): `analyze(cfg, trials)`
turns what the experiment's run returned (`blocklab.experiments.Trials`) into its summaries over
seeds, tests, fits and findings, with the statistics of `blocklab.analysis`; `write(out_dir, cfg,
trials)` analyzes, writes report.md and its figures into the run directory and returns a
`Report`, what the command line prints. `markdown`, `figures` and `plots` are the pieces they
share.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

# files only, no display (servers, worker processes): set before any report imports pyplot
matplotlib.use("Agg")


@dataclass
class Report:
    """A written report: its path, the run's JSON (the command line adds `report` and `config`)
    and the lines it prints without --json."""

    path: Path
    json: dict[str, Any]
    text: list[str]


@dataclass
class Findings:
    """An analyzed run of an experiment that tests predictions: its rows, their summaries over
    seeds, one finding per prediction (what the seed predicts beside what was measured), and the
    trials that raised."""

    rows: list[dict[str, Any]]
    summaries: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    failed: list[dict[str, Any]]

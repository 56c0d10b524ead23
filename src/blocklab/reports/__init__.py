"""Reports, one module per experiment (named by its manifest's `report`): `write(out_dir, cfg,
result)` writes report.md and its figures into the run directory and returns a `Report`, what the
command line prints. `markdown`, `figures` and `plots` are the pieces they share.
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

"""A run directory: the files one command writes into `--out`, and the status line it ends on.

    run.json          what the command was (experiment, command, config), written before any
                      trial runs; the report's status line added once the report is written
    report.md         the report, its status line at the top (`reports.markdown.put_status`)
    index.html        the run's self-contained page (`reports.html`)
    blocklab.sqlite   the store (`store.DB_NAME`)

Everything that names these files, or reads a run's status, asks `RunDir`: the page and the
index of runs read the status from `run.json`, never from a heading of the report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blocklab.store import DB_NAME

RUN_FILE = "run.json"
REPORT = "report.md"
PAGE = "index.html"


class RunDir:
    """One run directory, `path`: its files' paths, its record, its status."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def report(self) -> Path:
        return self.path / REPORT

    @property
    def page(self) -> Path:
        return self.path / PAGE

    @property
    def store(self) -> Path:
        return self.path / DB_NAME

    def write_record(
        self, experiment: str, command: str, config: dict[str, Any], status: dict | None = None
    ) -> None:
        """What the run's page shows of how it was made: the experiment, the command, the
        config, and once the report is written its status (`reports.Status.as_json`)."""
        record = {"experiment": experiment, "command": command, "config": config}
        if status is not None:
            record["status"] = status
        self.run_file.write_text(json.dumps(record, indent=2) + "\n")

    def record(self) -> dict[str, Any]:
        """run.json as written; {} where there is none (or it cannot be read)."""
        try:
            return json.loads(self.run_file.read_text())
        except (OSError, ValueError):
            return {}

    def status(self) -> dict[str, Any]:
        """The status the report ended on ({"verdict": ..., "line": ...}); {} before a report."""
        return self.record().get("status") or {}

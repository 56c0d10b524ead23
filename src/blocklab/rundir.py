"""A run directory: the files one command writes into `--out`, and the status line it ends on.

    run.json          what the command was (experiment, command, config), written before any
                      trial runs; the ids of the trials it plans, added as each sweep of the
                      command plans them; the report's status line added once the report is
                      written
    report.md         the report, its status line at the top (`reports.markdown.put_status`)
    index.html        the run's self-contained page (`reports.html`)
    blocklab.sqlite   the store (`store.DB_NAME`)

Everything that names these files, or reads a run's status, asks `RunDir`: the page and the
index of runs read the status from `run.json`, never from a heading of the report. A run that
stopped before its report (interrupted, or still running) reads `incomplete: k of n planned
ran`: k of the n trials (or measured points) its command planned are stored finished, the n
counting those a later phase was expected to plan (the seeds after a learning-rate search)
though it never began.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blocklab.store import DB_NAME, FINISHED

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
        config, and once the report is written its status (`reports.Status.as_json`). Written
        without a status, it starts a command's record, and so its plan, afresh; with one, the
        command is ending and its plan is kept."""
        record: dict[str, Any] = {"experiment": experiment, "command": command, "config": config}
        planned = self.record().get("planned") if status is not None else None
        if planned is not None:
            record["planned"] = planned
        if status is not None:
            record["status"] = status
        self._write(record)

    def note_planned(self, ids: list[str]) -> None:
        """Add trial ids to the plan of the command this record belongs to (the union over its
        sweeps: a learning-rate search and its seeds share trials). Before `write_record`
        there is no command to add them to, and nothing is written."""
        record = self.record()
        if not record:
            return
        known = record.get("planned") or []
        seen = set(known)
        new = [i for i in dict.fromkeys(ids) if i not in seen]
        if new:
            self._write({**record, "planned": [*known, *new]})

    def note_expected(self, n: int) -> None:
        """How many trials a phase the command has not begun will plan (`Progress.expect`: the
        seeds after a learning-rate search); 0 once it begins and plans them itself."""
        record = self.record()
        if record and record.get("expected", 0) != n:
            self._write({**record, "expected": n})

    def planned(self) -> list[str] | None:
        """The ids of the trials the last command planned; None where run.json has no plan."""
        return self.record().get("planned")

    def _write(self, record: dict[str, Any]) -> None:
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

    def state(self, records: list[dict[str, Any]]) -> str:
        """One line for the run: its status line once the report is written; before that
        `incomplete: k of n planned ran`, k of the n trials its command planned stored finished
        (`records`: the store's), n counting those of a phase expected but never begun (said
        apart: a later phase may share some trials with an earlier one, so its count is about),
        or `incomplete, k stored` for a run whose record holds no plan."""
        if line := self.status().get("line"):
            return line
        finished = {r["id"] for r in records if r["status"] in FINISHED}
        planned = self.planned()
        if planned is None:
            return f"incomplete, {len(finished)} stored"
        ran = len(finished & set(planned))
        later = self.record().get("expected") or 0
        line = f"incomplete: {ran} of {len(planned) + later} planned ran"
        return line + (f" (about {later} of them in a phase that never began)" if later else "")

"""What every report returns: its `Report` (the report's path, its JSON and the lines the command
prints), the `Status` line a run sums up in, and the `Findings` an experiment without a verdict
reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

# files only, no display (servers, worker processes): set before any report draws (pyplot, if
# a report imported it first, switches to it)
matplotlib.use("Agg")


@dataclass(frozen=True)
class Status:
    """The one line a run sums up in, shown first on its page, last in the terminal, in the
    runs index and as `status` in its JSON. `verdict`: whether the run states a verdict; a run
    that refuses one says why, and an experiment that reports findings rather than a verdict
    sums them up."""

    verdict: bool
    line: str
    # the keywords the next run changes, named as `blocklab.api.run` takes them (the flags'
    # names: {"steps": 1024}), with their new values; empty where there is nothing to change
    next: dict[str, Any] = field(default_factory=dict)
    # what the next run costs (`engine.pricing.Plan.cost`: core-seconds, or the reason there is
    # no figure); None: `NO_NEXT_COST`'s words
    next_cost: dict[str, Any] | None = None

    @classmethod
    def of_verdict(cls, verdict: str | None, refusal: str) -> Status:
        """A verdict's first sentence, or why there is none."""
        if verdict:
            return cls(True, f"VERDICT: {verdict.split('. ')[0].rstrip('.')}")
        return cls(False, f"NO VERDICT: {refusal}")

    @classmethod
    def of_findings(cls, findings: list[dict[str, Any]], shown: int = 3) -> Status:
        """Findings (what was predicted beside what was measured), each by its verdict."""
        said = [
            f"{' '.join(str(f[k]) for k in ('part', 'setting') if k in f) or 'finding'}: "
            f"{f.get('verdict', f.get('measured', '-'))}"
            for f in findings
        ]
        more = f"; and {len(said) - shown} more" if len(said) > shown else ""
        return cls(False, f"FINDINGS: {'; '.join(said[:shown]) or 'none'}{more}")

    def as_json(self) -> dict[str, Any]:
        cost = self.next_cost or {
            "core_seconds": None,
            "reason": "not priced" if self.next else "no next command: nothing to change",
        }
        return {"verdict": self.verdict, "line": self.line, "next": dict(self.next),
                "next_cost": dict(cost)}  # fmt: skip


@dataclass
class Report:
    """A written report: its path, the run's JSON (the command line adds `report`, `config` and
    `status`), the lines it prints without --json, and its status line."""

    path: Path
    json: dict[str, Any]
    text: list[str]
    status: Status | None = None

    def __post_init__(self):
        # a report of findings sums them up; any other, by the first line it prints
        if self.status is None and self.json.get("findings"):
            self.status = Status.of_findings(self.json["findings"])
        elif self.status is None:
            self.status = Status(False, next((t for t in self.text if t.strip()), "-").strip())


@dataclass
class Findings:
    """An analyzed run of an experiment that tests predictions: its rows, their summaries over
    seeds, one finding per prediction (what the seed predicts beside what was measured), and the
    trials that raised."""

    rows: list[dict[str, Any]]
    summaries: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    failed: list[dict[str, Any]]

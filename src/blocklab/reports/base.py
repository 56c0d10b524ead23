"""What every report returns: its `Report` (the report's path, its JSON and the lines the command
prints), the `Status` line a run sums up in, and the `Findings` an experiment without a verdict
reports."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

# files only, no display (servers, worker processes): set before any report draws (pyplot, if
# a report imported it first, switches to it)
matplotlib.use("Agg")


def finding_label(f: dict[str, Any]) -> str:
    """Where a finding belongs, from the keys it has: its part, setting and task, then its q,
    sequence length, width and model as key=value; "finding" where it has none of them."""
    where = " ".join(str(f[k]) for k in ("part", "setting", "task") if k in f)
    where += "".join(f" {k}={f[k]}" for k in ("q", "seq_len", "width", "model") if k in f)
    return where.strip() or "finding"


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
        """Findings (what was predicted beside what was measured) as a tally of their verdicts,
        the commonest first; a verdict one finding alone holds is named with that finding (the
        first `shown` of them), since the exceptions are what a reader looks for. Findings
        without verdicts are counted, and the first `shown` said by what was measured."""
        if not findings:
            return cls(False, "FINDINGS: none")
        head = f"FINDINGS: {len(findings)} finding{'s' if len(findings) > 1 else ''}: "
        if any("verdict" not in f for f in findings):
            said = [f"{finding_label(f)}: {f.get('measured', '-')}" for f in findings]
            more = f"; and {len(said) - shown} more" if len(said) > shown else ""
            return cls(False, head + "; ".join(said[:shown]) + more)
        counts = Counter(str(f["verdict"]) for f in findings)  # in the order first given
        alone = [f for f in findings if counts[str(f["verdict"])] == 1]
        said = [f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]) if n > 1]
        said += [f"{finding_label(f)}: {f['verdict']}" for f in alone[:shown]]
        if len(alone) > shown:
            said.append(f"{len(alone) - shown} more, each with a verdict of its own")
        return cls(False, head + "; ".join(said))

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

"""The degree sweep's status (`reports.Status`): the one line the terminal ends on, the runs
index and `--json` show, and its parts for the run page's banner, each on a line of its own: the
status itself, what to run next, and below them the other count's status and the exact
orderings (`reports.html.banner`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blocklab.experiments.degree_sweep.report import exact
from blocklab.experiments.degree_sweep.report.capacity import WORD, detail
from blocklab.experiments.degree_sweep.report.roundings import Across
from blocklab.experiments.degree_sweep.report.status_line import (
    change,
    next_keywords,
    next_plan,
    priced,
    status_line,
)
from blocklab.reports import Status


@dataclass(frozen=True)
class Banner(Status):
    """A status with its parts kept apart for the page: `head` the status alone (no command in
    it, in no set width), `command` the next command whole or `change` what to change in words
    where there is no command, and `beside` the clauses that follow the trained result."""

    head: str = ""
    command: str | None = None
    change: str | None = None
    beside: tuple[str, ...] = ()
    cost: str | None = None  # the next command's plan and cost, in words
    # the design checks the status rests on, each as the terminal lists it: what a status that
    # says "given with the design checks" is given with, wherever it is read
    checks: tuple[dict[str, Any], ...] = ()

    def as_json(self) -> dict[str, Any]:
        parts = {"head": self.head, "command": self.command, "change": self.change}
        parts["cost"] = self.cost
        said = {"checks": [dict(c) for c in self.checks]}
        return {**super().as_json(), **said, "banner": {**parts, "beside": list(self.beside)}}


def status(cap, roundings: tuple = (), measured: dict[str, dict[str, Any]] | None = None):
    """The run's status from its capacity analysis (`degree_sweep.analysis.capacity`), its other
    roundings' and its exact measures: the line joins the parts the banner keeps apart."""
    verdict, line = status_line(cap)
    head = status_line(cap, action=False)[1]
    if roundings:  # the status across roundings, said of the line and of the head alike
        across = Across(cap, roundings)
        head = across.status(verdict, head)[1]
        verdict, line = across.status(verdict, line)
    beside = exact.beside(cap, measured or {})
    command, words = change(cap)
    keywords, plan = next_keywords(cap), next_plan(cap)
    cost, said = None, None
    if plan is not None or keywords:  # the words the terminal gives it (`priced`)
        said = priced(plan)
        cost = plan.cost() if plan is not None else {"core_seconds": None, "reason": said}
    checks = tuple(
        {"name": c.name, "outcome": c.outcome, "line": f"{WORD[c.outcome]}: {c.name}: {detail(c)}"}
        for c in cap.checks
    )
    return Banner(
        verdict, "; ".join([line, *beside]), keywords, cost, head=head, command=command,
        change=words, beside=tuple(beside), cost=said, checks=checks,
    )  # fmt: skip

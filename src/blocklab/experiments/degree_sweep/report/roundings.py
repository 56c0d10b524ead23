"""The roundings' part of the degree sweep's report (`--roundings K`,
`degree_sweep.analysis.capacity.Roundings`): each rounding's status, check outcomes and multipliers
side by side, the status a difference between them leaves, and their JSON."""

from __future__ import annotations

import math
from typing import Any

from blocklab.experiments.degree_sweep.analysis.capacity import Outcome, Roundings
from blocklab.experiments.degree_sweep.report.intervals import cell
from blocklab.experiments.degree_sweep.report.status_line import status_line
from blocklab.formatting import markdown_table

SHOWN = ("d=2", "d=4", "m2/m4")  # the multipliers the status rests on, in the table


class Across:
    """The run's capacity analysis and its other roundings', worded."""

    def __init__(self, run, others):
        self.r = Roundings((run, *others))

    def json(self) -> dict[str, Any]:
        """`roundings` of the JSON contract: K, each rounding's status word (the run's first),
        whether they are the same; each rounding's check outcomes and multipliers beside."""
        return {
            "k": len(self.r.results),
            "statuses": list(self.r.words),
            "same": self.r.same,
            "same_claims": self.r.same_claims,
            "lines": [status_line(c)[1] for c in self.r.results],
            "checks": [{c.name: c.outcome for c in res.checks} for res in self.r.results],
            # each check's figure and its band (None: exact), rounding by rounding
            "figures": [
                {c.name: [_finite(c.figure), *(c.band or (None, None))] for c in res.checks}
                for res in self.r.results
            ],
            "multipliers": [_multipliers(res) for res in self.r.results],
            "differs": [list(res.decision.differs) for res in self.r.results],
        }

    def status(self, verdict: bool, line: str) -> tuple[bool, str]:
        """The run's status where every rounding gives its word; where they differ, none of
        them is the run's result: INCONCLUSIVE, naming each."""
        if self.r.same:
            return verdict, f"{line}; the same in {len(self.r.results)} roundings"
        said = ", ".join(self.r.words)
        return False, (
            f"{Outcome.INCONCLUSIVE.value}: the status differs across {len(self.r.results)} "
            f"roundings ({said}): it hinges on rounding; the run's own: {line}"
        )

    def lines(self) -> list[str]:
        """Each rounding's status word, check outcomes and multipliers, one row each."""
        names = [c.name for c in self.r.results[0].checks]
        head = ("rounding", "status", *names, *(f"m({a})" if a != "m2/m4" else "m_2 / m_4"
                                                 for a in SHOWN), "own exponent")  # fmt: skip
        rows = []
        for k, res in enumerate(self.r.results):
            got = {c.name: c.outcome for c in res.checks}
            m = _multipliers(res)
            rows.append((
                "run" if k == 0 else str(k), res.decision.outcome.value,
                *(got.get(n, "-") for n in names), *(_interval(m.get(a)) for a in SHOWN),
                ", ".join(res.decision.differs) or "-",
            ))  # fmt: skip
        said = "the same" if self.r.same else "NOT the same"
        claims = "the same claims" if self.r.same_claims else "claims that differ"
        return [
            f"roundings: each (teacher, seed) unit fitted {len(rows)} times, the run and "
            f"{len(rows) - 1} with every initial parameter moved by its last bit; status "
            f"{said} in each, {claims}:",
            *markdown_table(head, rows),
        ]


def _multipliers(res) -> dict[str, list[float] | None]:
    model = res.model
    if model is None:
        return {}
    out: dict[str, list[float] | None] = {
        a: [i.value, i.low, i.high] if math.isfinite(i.value) else None
        for a, i in model.multipliers.items()
    }
    r = model.ratio_2_4
    out["m2/m4"] = [r.value, r.low, r.high] if r is not None else None
    return out


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _interval(v) -> str:
    if not v:
        return "-"
    return f"{v[0]:.3g} {cell(v[1], v[2])}"  # "-": no interval (too few units)

"""Seed 000's predictions, each with its word (`degree_sweep.analysis.claims`), for the terminal and
the JSON; and where one is undecided, the run that would decide it at +-3%."""

from __future__ import annotations

from typing import Any

from blocklab.experiments.degree_sweep.analysis.claims import Claim
from blocklab.experiments.degree_sweep.sizing import RunSize, plan_lines
from blocklab.formatting import markdown_table, plain

DECIDING = 0.03  # the resolution the run that decides an undecided claim is sized to


def _interval(c: Claim) -> str:
    if c.m is None:
        return "-"
    if c.ci_low is None or c.ci_high is None:
        return f"{c.m:.3g} (unbounded)"
    return f"{c.m:.3g} [{c.ci_low:.3g}, {c.ci_high:.3g}]"


def lines(
    claims: list[Claim], r: float, given: bool, deciding: RunSize | None, words: list[str]
) -> list[str]:  # fmt: skip
    """The table of claims at resolution `r` (`given`: --target-resolution set it; else the
    predicted effect), and `deciding`, the +-3% run's plan, where a claim is undecided."""
    if not claims:
        return []
    why_r = "--target-resolution" if given else "the predicted effect; --target-resolution sets it"
    out = [
        f"seed 000's predictions, each by its 95% interval at R = +-{r:.1%} ({why_r}): refuted "
        "(excludes it), supported (holds it, within +-R), undecided, or no constant multiplier",
    ]
    # one reason for every word is said once, under the table, so its rows stay one line each
    whys = {c.why for c in claims}
    shared = whys.pop() if len(whys) == 1 else None
    header = ["quantity", "count", "predicted", "m [95% interval]", "word"]
    body = [
        [c.quantity, c.count, f"{c.predicted:.4g}", _interval(c), c.word] + [c.why] * (not shared)
        for c in claims
    ]
    out += markdown_table(header + ["why"] * (not shared), body)
    if shared:
        out.append(f"each word: {shared}")
    if deciding is not None and deciding.units is None:
        out.append("the +-3% run: not sized (this run bounds no decisive interval)")
    elif deciding is not None:
        out.append(
            "where a claim is undecided, the run that decides it at +-3% (with the design "
            "checks' changes, where one failed):"
        )
        out += plan_lines(deciding, None, words)
    return out


def json(claims: list[Claim]) -> list[dict[str, Any]]:
    """The `claims` list of the JSON contract."""
    return plain([c.json() for c in claims])

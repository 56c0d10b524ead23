"""The learning check in words (`analysis.learned`): the settings whose trained networks score at
chance and the trials whose loss never moved, named where a run sums up (first in the terminal's
report text, first in its status line after the head, and so on report.md and the page), with
the rule and every flagged setting in a note of report.md, and every setting in the JSON."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from blocklab.analysis.learned import CHANCE_MARGIN, UNMOVED_TOL, Check
from blocklab.reports.base import Report

Name = Callable[[dict[str, Any]], str]  # a setting's words from its group's keys


def _range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}-{hi:.3g}"


def _metric(found: list[Check]) -> str:
    kinds = {c.chance.higher_is_better for c in found}
    return "test accuracy" if kinds == {True} else "test mse" if kinds == {False} else "test score"


def _named(found: list[Check], name: Name, shown: int) -> str:
    said = [name(c.group) for c in found[:shown]]
    return ", ".join(said) + (f" and {len(found) - shown} more" if len(found) > shown else "")


def clauses(checks: list[Check], name: Name, shown: int = 4) -> list[str]:
    """What the check flags, each with its tally first: the settings at chance (their scores
    beside chance) and the trials whose loss never moved; empty when nothing is flagged."""
    out = []
    scored = [c for c in checks if c.score is not None]
    at = [c for c in scored if c.at_chance]
    if at:
        out.append(
            f"AT CHANCE after training in {len(at)} of {len(scored)} settings: "
            f"{_named(at, name, shown)} ({_metric(at)} {_range([c.score for c in at])}; a "
            f"constant guess scores {_range([c.chance.score for c in at])})"
        )
    still = [c for c in checks if c.unmoved]
    if still:
        out.append(
            f"LOSS NEVER MOVED in {sum(c.unmoved for c in still)} of "
            f"{sum(c.read for c in checks)} trials: {_named(still, name, shown)}"
        )
    return out


def note(checks: list[Check], name: Name) -> str:
    """report.md's note: the rule, then every flagged setting with its numbers."""
    rule = (
        "Learning check: chance is the test score of the best constant guess (the commonest "
        "training label, or the mean training target), on the task's data at seed 0; a setting "
        f"is at chance when its mean test score closes less than {CHANCE_MARGIN:.0%} of the way "
        "from chance to a perfect score. A trial's loss never moved when its final validation "
        f"loss lies within {UNMOVED_TOL:.0%} of its validation loss before training (step 0: "
        "the trials store no training loss before the first update)."
    )
    at = [c for c in checks if c.at_chance]
    still = [c for c in checks if c.unmoved]
    if not checks:
        return f"{rule} No trained setting to check."
    if not at and not still:
        return f"{rule} No setting is at chance and every loss moved."
    said = [f"{name(c.group)}: {c.score:.3g} ({_gained(c)})" for c in at]
    out = rule + (f" At chance: {'; '.join(said)}." if said else "")
    if still:
        out += " Loss never moved: " + "; ".join(
            f"{name(c.group)} ({c.unmoved} of {c.read} trials)" for c in still
        )
        out += "."
    return out


def _gained(c: Check) -> str:
    """The score beside chance: how far toward perfect it got, or that it fell below."""
    way = "below chance" if c.gain < 0 else f"{c.gain:.1%} of the way to perfect"
    return f"chance {c.chance.score:.3g}, {way}"


def flagged(report: Report, checks: list[Check], name: Name) -> Report:
    """The report with the check's clauses first in its text and in its status line (after the
    head, "FINDINGS: ", so the page keeps the status's kind), and every setting in its JSON
    under `learning`."""
    said = clauses(checks, name)
    report.json["learning"] = [c.as_json() for c in checks]
    if said:
        report.text[:0] = said
        head, _, rest = report.status.line.partition(": ")
        line = f"{head}: {'; '.join(said)}; {rest}" if rest else f"{head}; {'; '.join(said)}"
        report.status = replace(report.status, line=line)
    return report

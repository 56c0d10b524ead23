"""The degree sweep's exact measures in words (`experiments.degree_sweep.exact`): a table of
each arm's exact separation rank and functional dimension per parameter beside their closed
forms, and the orderings the status states beside the trained result (`beside`)."""

from __future__ import annotations

import math
from typing import Any

from blocklab.experiments.degree_sweep.arm_depths import CONTROL_LABEL
from blocklab.formatting import markdown_table

# the measures the status line orders, each with the word it is said by
ORDERED = {
    "separation_rank_per_param": "separation rank",
    "functional_dimension_per_param": "functional dimension",
}


def order(exact: dict[str, dict[str, Any]], key: str) -> str | None:
    """The arms by `key`, largest first: "d=3 > d=2 = d=4" (equal to 12 digits is a tie); None
    with fewer than 2 arms measured."""
    have = sorted(
        ((v[key], arm) for arm, v in exact.items() if v.get(key) is not None),
        key=lambda kv: -kv[0],
    )
    if len(have) < 2:
        return None
    text = have[0][1]
    for (before, _), (value, arm) in zip(have, have[1:], strict=False):
        text += (" = " if math.isclose(before, value, rel_tol=1e-12) else " > ") + arm
    return text


def said(exact: dict[str, dict[str, Any]]) -> str | None:
    """The exact orderings of the degree arms (those the closed forms speak of) in one clause for
    the status line; None when nothing was measured."""
    degrees = {arm: v for arm, v in exact.items()
               if v.get("functional_predicted") is not None and arm != CONTROL_LABEL}  # fmt: skip
    parts = [f"{word} {got}" for key, word in ORDERED.items() if (got := order(degrees, key))]
    return f"exact per parameter: {'; '.join(parts)}" if parts else None


def _number(v: float | None, digits: str = ".4g") -> str:
    return "-" if v is None else format(v, digits)


def lines(exact: dict[str, dict[str, Any]], width: int, markdown: bool = False) -> list[str]:
    """The table of the exact measures (an empty list without any)."""
    if not exact:
        return []
    intro = (
        f"exact measures at width {width}, before any fit, below the answer: the separation "
        "rank of each integer degree over two variables at the budget all reach, computed on "
        "the stack seed 000 analyses (plain products, no norm, no residual), not on the "
        "trained networks (RMS norm, scaled residuals), so it states the theory's premise, "
        "not evidence (seed 000: d^p + 1; ln rank per parameter is its degree proxy, which "
        "h(d) orders 3 > 2 = 4); and the functional dimension per nominal parameter, computed "
        "on the trained networks' own architecture at random parameters (1 - (d-1) / (d w) "
        "for a poly stack: H_fd's shares)"
    )
    head = ("arm", "depth", "params", "sep. rank", "predicted", "ln rank / param",
            "functional / param", "predicted")  # fmt: skip
    body = [
        (
            arm,
            str(v["depth"]),
            str(v["params"]),
            _number(v["separation_rank"], "d"),
            _number(v["separation_predicted"], "d"),
            _number(v["separation_rank_per_param"]),
            _number(v["functional_dimension_per_param"]),
            _number(v["functional_predicted"]),
        )
        for arm, v in exact.items()
        if arm != CONTROL_LABEL  # d=3's network: its row is d=3's
    ]
    return [f"{intro}:" if not markdown else f"{intro[0].upper()}{intro[1:]}.", "",
            *markdown_table(head, body)]  # fmt: skip


def json(exact: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`exact` of the JSON contract: per arm its per-parameter measures, with what they rest on."""
    return {arm: dict(v) for arm, v in exact.items()}


def beside(cap, measured: dict[str, dict[str, Any]]) -> list[str]:
    """What the status says beside the trained result on the status's count: the other count's
    outcome and the exact orderings, each a clause with its own word."""
    if getattr(cap, "matched", None) is not None:
        # the matched answer words H_fd (the functional count's hypothesis) itself, and the
        # exact measures stand below it in the report, each saying what network it is
        # computed on: nothing to add beside it
        return []
    parts = [
        f"on the {count} count: {got.decision.outcome.value}"
        for count, got in cap.counts.items()
        if count != cap.count
    ]
    if clause := said(measured):
        parts.append(clause)
    return parts

"""Statistics of the MQAR width sweep (`blocklab mad --sweep-width`): accuracy against width per
(block, setting), the smallest width that solves each setting, and zoology's claim read from them.

Rows are `experiments._trials.row` dicts with block, width, pairs, seq_len, status and
test_metric (test accuracy). Everything here is data; `report.width_sweep` words it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from blocklab.analysis.plateau import plateaued
from blocklab.analysis.stats import interval

GATED = ("hyena", "h3")  # zoology's gated convolutions, by registered block name
ATTENTION = "softmax_attention"


def cells(rows: list[dict[str, Any]], level: float = 0.95) -> list[dict[str, Any]]:
    """Per (block, width, pairs, seq_len): mean test accuracy over finished seeds, with its
    Student-t interval clipped to [0, 1]."""
    accs: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        key = (r["block"], r["width"], r["pairs"], r["seq_len"])
        accs.setdefault(key, [])
        if r["status"] == "done" and r["test_metric"] is not None:
            accs[key].append(float(r["test_metric"]))
    out = []
    for (block, width, pairs, seq_len), values in sorted(accs.items()):
        mean, _, lo, hi, n = interval(values, level)
        cell = {"block": block, "width": width, "pairs": pairs, "seq_len": seq_len, "n": n}
        # an accuracy lies in [0, 1]; a t interval over few seeds can pass either bound
        out.append({**cell, "mean": mean, "ci_low": _clip(lo), "ci_high": _clip(hi)})
    return out


def plateau(rows: list[dict[str, Any]], tol: float) -> dict[str, dict[str, Any]]:
    """Per block: its finished trials, how many plateaued (twice the steps gained less than
    `tol`, `blocklab.analysis.plateau.plateaued`) and the median gain of twice the steps. A
    block that solves nothing while its trials are far from a plateau is undertrained, not shown
    unable."""
    out = {}
    for block in sorted({r["block"] for r in rows}):
        done = [r for r in rows if r["block"] == block and r["status"] == "done"]
        gains = [r["plateau_improvement"] for r in done if r.get("plateau_improvement") is not None]
        out[block] = {
            "trials": len(done),
            "plateaued": sum(plateaued(r, tol) for r in done),
            "median_gain": float(np.median(gains)) if gains else None,
        }
    return out


def _clip(v: float) -> float:
    return min(1.0, max(0.0, v)) if math.isfinite(v) else v


def min_solving_widths(table: list[dict[str, Any]], solved: float) -> list[dict[str, Any]]:
    """Per (block, pairs, seq_len): the smallest width whose mean accuracy reaches `solved`
    (None when no width of the sweep does)."""
    widths: dict[tuple, list[int]] = defaultdict(list)
    for c in table:
        key = (c["block"], c["pairs"], c["seq_len"])
        widths.setdefault(key, [])
        if c["n"] and c["mean"] >= solved:
            widths[key].append(c["width"])
    return [
        {"block": b, "pairs": p, "seq_len": t, "width": min(ws) if ws else None}
        for (b, p, t), ws in sorted(widths.items())
    ]


@dataclass(frozen=True)
class Growth:
    """Whether a block's smallest solving width grows with the pairs at one sequence length:
    `grows` True when the most pairs need a larger width than the fewest (or no width of the
    sweep solves them while one solves the fewest), False when they need no more, None when the
    fewest pairs are solved at no width (the sweep shows nothing about growth)."""

    block: str
    seq_len: int
    pairs: tuple[int, int]
    widths: tuple[int | None, int | None]
    grows: bool | None


def growth(minimal: list[dict[str, Any]]) -> list[Growth]:
    """Per (block, seq_len) with two pair counts or more: the fewest pairs against the most."""
    by: dict[tuple[str, int], dict[int, int | None]] = defaultdict(dict)
    for m in minimal:
        by[(m["block"], m["seq_len"])][m["pairs"]] = m["width"]
    out = []
    for (block, seq_len), at in sorted(by.items()):
        if len(at) < 2:
            continue
        few, many = min(at), max(at)
        w_few, w_many = at[few], at[many]
        # nothing solved at the fewest pairs: the sweep shows nothing about growth
        grows = None if w_few is None else (w_many is None or w_many > w_few)
        out.append(Growth(block, seq_len, (few, many), (w_few, w_many), grows))
    return out


class Claim:
    """The reading of zoology's claim: gated convolutions need a width growing with the pairs,
    attention does not."""

    AGREES, DISAGREES, UNTESTED = "agrees", "disagrees", "not tested here"


def zoology_claim(grown: list[Growth], blocks: list[str]) -> tuple[str, str | None]:
    """(status, the reason beside the widths or None). Agrees when every gated convolution that
    ran grows at some sequence length and attention grows at none. Disagrees otherwise, which
    includes a sweep where attention or a gated convolution solves none of its fewest-pairs
    settings (it does not show the claim; the reason says so). Not tested without a gated
    convolution or attention, or without two pair counts at a sequence length."""
    name = {b: b.split("(")[0] for b in blocks}
    gated = [b for b in blocks if name[b] in GATED]
    attention = [b for b in blocks if name[b] == ATTENTION]
    if not gated or not attention:
        return Claim.UNTESTED, "the sweep needs softmax_attention and hyena or h3"
    if not grown:
        return Claim.UNTESTED, "the sweep needs two pair counts or more at a sequence length"
    of = {b: [g for g in grown if g.block == b] for b in blocks}
    unknown = [b for b in (*attention, *gated) if all(g.grows is None for g in of[b])]
    if unknown:
        return (
            Claim.DISAGREES,
            f"not shown: {', '.join(unknown)} solved none of the settings with the fewest pairs "
            "at any width of the sweep (wider widths or more steps: --widths, --steps)",
        )
    gated_grow = all(any(g.grows for g in of[b]) for b in gated)
    attention_flat = all(not any(g.grows for g in of[b]) for b in attention)
    return (Claim.AGREES if gated_grow and attention_flat else Claim.DISAGREES), None

"""Seed 002's qSA experiment as statistics: accuracy over seeds per (q, m, model), and per q the
smallest embedding dimension m that solves it, tested against the seed's lower bound
m >= q / log2 N and for growth with q. The home's report words them."""

from __future__ import annotations

import math
from typing import Any

from blocklab.analysis.summary import summarize

KEYS = ("q", "m", "model")


def summaries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Test accuracy over seeds per (q, m, model)."""
    return summarize(rows, KEYS)


def thresholds(cfg, summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per q (`per_q`): the smallest m whose mean test accuracy reaches `solved` (`first_m`,
    None where none does), whether every larger m reaches it too (`monotone`), the seed's lower
    bound q / log2 N (`bound`) and whether no success falls below it
    (`consistent_with_lower_bound`), and the fully connected network's best mean; and whether
    the first m is non-decreasing in q over the q where one was found (`grows`), and whether
    every q respects the bound."""
    per_q = []
    log_n = math.log2(cfg.seq_len)
    for q in cfg.qs:
        att = sorted(
            (s for s in summaries if s["q"] == q and s["model"] == "attention"),
            key=lambda s: s["m"],
        )
        solved = [s["m"] for s in att if s["n"] and s["mean"] >= cfg.solved]
        first = solved[0] if solved else None
        monotone = all(s["m"] in solved for s in att if first is not None and s["m"] >= first)
        below_bound = [m for m in solved if m < q / log_n]
        mlp = [s for s in summaries if s["q"] == q and s["model"] == "fully connected"]
        per_q.append(
            {
                "q": q,
                "bound": q / log_n,
                "first_m": first,
                "monotone": monotone,
                "consistent_with_lower_bound": not below_bound,
                "fully_connected_best": max((s["mean"] for s in mlp if s["n"]), default=None),
            }
        )
    known = [t["first_m"] for t in per_q if t["first_m"] is not None]
    grows = all(a <= b for a, b in zip(known, known[1:], strict=False))
    consistent = all(t["consistent_with_lower_bound"] for t in per_q)
    return {"per_q": per_q, "grows": grows, "consistent_with_lower_bound": consistent}

"""What the two separation-rank reports share: ranks over seeds as text, and the notes on the
exact and the float64 rank."""

from __future__ import annotations

from typing import Any

from blocklab.measures.exact_rank import PRIME


def ranks(spread: dict[str, Any], saturated: bool) -> str:
    """'105', '14-15' over seeds, '>= 1024' when the grid is full."""
    lo, hi = spread["min"], spread["max"]
    if lo is None:
        return "-"
    text = str(lo) if lo == hi else f"{lo}-{hi}"
    return f">= {text}" if saturated else text


EXACT_NOTE = (
    f"Exact rank: the same architecture over the prime field F_p (p = {PRIME:,}), weights and "
    "templates drawn uniformly from F_p, rank by exact elimination. It never exceeds the grid "
    "rank of generic real weights (a minor that vanishes over Q vanishes mod p) and equals it "
    "except with probability <= deg/p (Schwartz-Zippel); each seed is an independent draw."
)
FLOAT_NOTE = (
    "float64 rank: the library's `separation_rank` on the float network (standard normal "
    "templates), singular values above rtol = {rtol:g} times the largest. A deep polynomial's "
    "spectrum decays smoothly past any tolerance, so this numerical rank is a lower bound of the "
    "exact grid rank and can be far below it; the spectra figure shows where the exact rank "
    "sits in the float spectrum."
)

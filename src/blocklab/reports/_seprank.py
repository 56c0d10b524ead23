"""What the two separation-rank reports share: ranks over seeds as text, the finding on how far
the float64 rank follows the exact one, and the notes on the exact and the float64 rank."""

from __future__ import annotations

from typing import Any

from blocklab.analysis.seprank import FLOOR
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
    "templates), singular values above rtol = {rtol:g} times the largest. It is a lower bound of "
    "the exact grid rank and falls far below it with depth because of float64's dynamic range: "
    "float64 keeps about 16 significant digits, while the grid values of a deep network, "
    "products of many factors, span more orders of magnitude than that, so its singular values "
    "fall by orders of magnitude each and all but the first few end below rtol times the "
    "largest, or below float64's rounding floor. A falling float64 rank says nothing about the "
    "function: the exact rank over F_p is the one to read."
)
WHY = (
    "Why below: float64's dynamic range. It keeps about 16 significant digits; a deep network's "
    "grid values, products of many factors, span more orders of magnitude, so all but its first "
    "singular values fall below rtol x the largest{resolved}. Read the exact rank over F_p."
)


def float_finding(test: dict[str, list], rtol: float) -> dict[str, Any]:
    """How far the float64 numerical rank follows the exact rank (`test`:
    `analysis.seprank.float_test`), worded."""
    pairs, equal, over, lost = test["pairs"], test["equal"], test["over"], test["lost"]
    deepest = lost[-1][0] if lost else None
    shown = (
        f" (at {point_label(deepest)} float64 resolves {values_text(deepest['resolved'])} of the "
        f"{deepest['exact']['min']} above its rounding floor, {FLOOR:g} of the largest)"
        if deepest is not None and "resolved" in deepest
        else ""
    )
    return {
        "part": "float64 rank",
        "setting": f"rtol = {rtol:g}",
        "predicted": "a lower bound of the exact grid rank; equal while the spectrum stays "
        "above rtol",
        "measured": f"equal at {len(equal)} of {len(pairs)} points; below at "
        f"{len(lost)} unsaturated points"
        + (
            " (e.g. " + ", ".join(point_label(s) + f": {f} vs {e}" for s, f, e in lost[:3]) + ")"
            if lost
            else ""
        )
        + (". " + WHY.format(resolved=shown) if lost else ""),
        "verdict": ("lower bound holds" + ("; below it by float64's range" if lost else ""))
        if not over
        else "float rank ABOVE the exact rank at "
        + ", ".join(point_label(s) for s, _, _ in over)
        + ": noise counted (raise rtol)",
    }


def point_label(s: dict[str, Any]) -> str:
    if "width" in s and "arm" not in s:
        return f"L={s['depth']} dx={s['width']}"
    return f"d={s['arm']} p={s['depth']}"


def values_text(s: dict[str, Any]) -> str:
    lo, hi = s["min"], s["max"]
    text = "-" if lo is None else str(lo) if lo == hi else f"{lo}-{hi}"
    missing = sum(v is None for v in s["values"])
    return text + (f" ({missing} overflowed)" if missing and lo is not None else "")

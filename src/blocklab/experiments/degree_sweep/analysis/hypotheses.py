"""Seed 000's three hypotheses and the words the matched answer (`matched`) gives them and each
comparison, fixed before any run (the degree guide states them):

- the note's h(d): m_a = h(3) / h(d) (1.057 for d = 2 and 4; m_2 / m_4 = 1);
- H_fd, "a functional parameter is what counts": m_a = s_3 / s_a, s_a the share of an arm's
  nominal parameters its function sees (1 - (d-1)/(d w) for a product stack of width w);
- no difference: m = 1.

A hypothesis is refuted (the interval excludes its value), consistent (it holds it) or undecided
(a check the answer rests on failed or sits at its edge). A comparison beats or loses to (the
interval excludes 1), is equivalent (it lies within +-MARGIN), or is undecided.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blocklab.experiments.degree_sweep.analysis.matched import QUANTITIES, Estimate, Matched
from blocklab.theory import h

MARGIN = 0.05  # equivalence: the interval inside [1 - MARGIN, 1 + MARGIN]
HYPOTHESES = ("h(d)", "H_fd", "no_difference")


def shares(rows, width: int | None) -> dict[str, float]:
    """arm -> s_a, the share of its nominal parameters the function sees: the rows' functional
    count over the nominal one (`measures.functional`), else 1 - (d-1)/(d w) at the width."""
    got: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        f, p = r.get("functional_params"), r.get("block_params")
        if f and p:
            got[r["arm"]].append(f / p)
    out = {a: float(np.mean(v)) for a, v in got.items()}
    for arm, d in (("d=2", 2), ("d=3", 3), ("d=4", 4)):
        if arm not in out and width:
            out[arm] = 1 - (d - 1) / (d * width)
    return out


def predictions(s: dict[str, float]) -> dict[str, dict[str, float]]:
    """quantity -> hypothesis -> its value on the nominal count: the note's h(d) (m_a =
    h(3) / h(d)), H_fd, "a functional parameter is what counts" (m_a = s_3 / s_a), and no
    difference (1)."""
    hd = {"m(d=2)": h(3) / h(2), "m(d=4)": h(3) / h(4), "m2/m4": h(4) / h(2)}
    out = {}
    for q in QUANTITIES:
        out[q] = {"h(d)": hd[q], "no_difference": 1.0}
        num, den = {"m(d=2)": ("d=3", "d=2"), "m(d=4)": ("d=3", "d=4"),
                    "m2/m4": ("d=4", "d=2")}[q]  # fmt: skip
        if num in s and den in s:
            out[q]["H_fd"] = s[num] / s[den]
    return out


def hypothesis_word(e: Estimate, predicted: float, silenced: bool) -> str:
    if silenced or not (e.low > 0 and math.isfinite(e.high)):
        return "undecided"
    return "consistent" if e.low <= predicted <= e.high else "refuted"


def interval_word(low: float, high: float, silenced: bool = False) -> str:
    """A comparison's word from its interval on m, the first that applies: beats or loses to
    (it excludes 1), equivalent (it lies within +-MARGIN), undecided (or wherever a check the
    answer rests on failed or is at its edge)."""
    if silenced or not (low > 0 and math.isfinite(high)):
        return "undecided"
    if high < 1:
        return "beats"
    if low > 1:
        return "loses to"
    if low >= 1 - MARGIN and high <= 1 + MARGIN:
        return "equivalent"
    return "undecided"


def versus_word(e: Estimate, silenced: bool) -> str:
    return interval_word(e.low, e.high, silenced)


@dataclass(frozen=True)
class Answer:
    """The answer table and the comparisons, worded (`words`)."""

    matched: Matched
    predicted: dict[str, dict[str, float]]
    silenced: bool  # a check the answer rests on failed or is at its edge
    entries: list[dict[str, Any]] = field(default_factory=list)  # the JSON's `answer`
    versus: list[dict[str, Any]] = field(default_factory=list)  # the JSON's `versus`


VERSUS = (("d=2", "d=3", "m(d=2)"), ("d=4", "d=3", "m(d=4)"), ("d=2", "d=4", "m2/m4"))


def answer(m: Matched, predicted: dict[str, dict[str, float]], silenced: bool) -> Answer:
    entries, versus = [], []
    for q in QUANTITIES:
        e = m.get(q)
        if e is None:
            continue
        hyp = {
            name: {"predicted": v, "word": hypothesis_word(e, v, silenced)}
            for name in HYPOTHESES if (v := predicted.get(q, {}).get(name)) is not None
        }  # fmt: skip
        entries.append({
            "quantity": q, "estimate": e.m, "ci_low": e.low, "ci_high": e.high,
            "pi_low": e.pi_low, "pi_high": e.pi_high, "tau": e.tau, "units": e.units,
            "teachers": e.teachers, "plain": e.plain, "plain_ci_low": e.plain_low,
            "plain_ci_high": e.plain_high, "median": e.median, "hypotheses": hyp,
        })  # fmt: skip
    for a, b, q in VERSUS:
        e = m.get(q)
        if e is None:
            continue
        versus.append({
            "arm": a, "against": b, "m": e.m, "ci_low": e.low, "ci_high": e.high,
            "word": versus_word(e, silenced), "margin": MARGIN,
        })  # fmt: skip
    return Answer(m, predicted, silenced, entries, versus)

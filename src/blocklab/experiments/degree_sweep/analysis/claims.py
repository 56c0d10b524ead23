"""Seed 000's predictions, each given a word by the interval that measures it.

For m(d=2), m(d=4) and m_2 / m_4, on each parameter count the run reports (`capacity.Counted`),
the interval is read against the prediction at a resolution R (the half width, as a share, a
run was sized to reach: `--target-resolution`):

- **refuted**: the 95% interval excludes the prediction;
- **supported**: it holds the prediction and lies within +-R of it (on the log scale:
  [p / (1 + R), p (1 + R)]);
- **undecided**: otherwise, and wherever the run cannot speak: a design check failed or sits at
  its edge, the shared model was not fitted, the shape test's named arm changes with a unit left
  out, or another rounding of the run words the claim otherwise (`--roundings`);
- **no constant multiplier**: the shape test names the arm (for m_2 / m_4, either arm) with an
  exponent of its own, with every unit left out in turn.

A word is given only where the run's status rules let its intervals speak, so the word a
colleague's rounding of the run prints is this one's or "undecided".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from blocklab.experiments.degree_sweep.analysis.capacity import CapacityResult, Counted

# (quantity, the finding it reads, the arms it rests on)
QUANTITIES = (("m(d=2)", "d=2", ("d=2",)), ("m(d=4)", "d=4", ("d=4",)),
              ("m2/m4", "m2/m4", ("d=2", "d=4")))  # fmt: skip
WORDS = ("supported", "refuted", "undecided", "no constant multiplier")


@dataclass(frozen=True)
class Claim:
    quantity: str  # "m(d=2)", "m(d=4)" or "m2/m4"
    count: str  # "nominal" or "functional"
    predicted: float
    m: float | None
    ci_low: float | None
    ci_high: float | None
    word: str  # WORDS
    why: str  # what the word rests on, in a few words

    def json(self) -> dict[str, Any]:
        """An entry of the `claims` list of the JSON contract."""
        keys = ("quantity", "count", "predicted", "m", "ci_low", "ci_high", "word", "why")
        return {k: getattr(self, k) for k in keys}


def _silenced(c: Counted) -> str | None:
    """Why the run's intervals cannot speak on this count, or None where they can."""
    d = c.decision
    if d.no_model:
        return "the shared model was not fitted"
    if d.failed:
        return "design check failed: " + ", ".join(x.name for x in d.failed)
    if d.edges:
        return "at its edge: " + ", ".join(x.name for x in d.edges)
    return None


def _figures(c: Counted, name: str) -> tuple[float | None, float | None, float | None]:
    """The measured (m, low, high), whatever the word: None where not measured or unbounded."""
    f = c.decision.finding(name)
    if f is None or not math.isfinite(f.interval.value):
        return None, None, None
    i = f.interval
    return (i.value, i.low, i.high) if i.bounded else (i.value, None, None)


def _word(c: Counted, name: str, arms: tuple[str, ...], predicted: float, r: float):
    """(word, why) of one quantity on one count."""
    d, model = c.decision, c.model
    if silenced := _silenced(c):
        return "undecided", silenced
    if named := [a for a in arms if a in d.differs]:
        if model is not None and model.shape.stable:
            return "no constant multiplier", f"{', '.join(named)}: an exponent of its own"
        return "undecided", f"{', '.join(named)} named, not with every unit left out"
    m, low, high = _figures(c, name)
    if m is None:
        return "undecided", "not measured"
    if low is None or high is None:
        return "undecided", "the interval is unbounded"
    if not low <= predicted <= high:
        return "refuted", "the interval excludes the prediction"
    if predicted / (1 + r) <= low and high <= predicted * (1 + r):
        return "supported", f"the interval holds it, within +-{r:.3g}"
    return "undecided", f"the interval holds it, wider than +-{r:.3g}"


def predicted_of(c: Counted, quantity: str) -> float | None:
    p2, p4 = c.predicted.get("d=2"), c.predicted.get("d=4")
    if quantity == "m(d=2)":
        return p2
    if quantity == "m(d=4)":
        return p4
    return p2 / p4 if p2 and p4 else None


def claims(result: CapacityResult, r: float, others: tuple[CapacityResult, ...] = ()):
    """The claims of `result` (every count it fitted, the status's first) at resolution `r`;
    with `others` (the run's other roundings), a word that some rounding gives otherwise is
    "undecided"."""
    out = []
    for count, c in result.counts.items():
        for quantity, name, arms in QUANTITIES:
            if any(a not in result.degrees for a in arms):
                continue  # the arm did not run: nothing to word
            predicted = predicted_of(c, quantity)
            if predicted is None or not math.isfinite(predicted):
                continue
            word, why = _word(c, name, arms, predicted, r)
            for other in others:
                o = other.counts.get(count)
                if (
                    o is None
                    or _word(o, name, arms, predicted_of(o, quantity) or predicted, r)[0] != word
                ):
                    word, why = "undecided", f"the roundings differ ({word} in the run)"
                    break
            out.append(Claim(quantity, count, predicted, *_figures(c, name), word, why))
    return out

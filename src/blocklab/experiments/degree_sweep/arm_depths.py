"""--arm-depths, each arm's own depths at --width: its entries as the command line splits them
(`joined`), one entry read and checked (`entry`), and a form's entries giving way to the shapes
a user gives (`yield_to`)."""

from __future__ import annotations

import difflib
from typing import Any

from blocklab.errors import UserError
from blocklab.theory import CONTROL_LABEL

CONTROLLED = "d=3"  # the arm the control repeats
# what sets every arm's shapes, in place of a form's --arm-depths
SHAPES = ("budgets", "depths", "mode")


def yield_to(base: dict[str, Any], given: dict[str, Any]) -> None:
    """A form's --arm-depths (the demo's) gives way to shapes the user gives (--budgets,
    --depths, --mode) and keeps only the arms of the user's --degrees; its --control gives way
    to --degrees without 3. What the user gives explicitly stays and is checked as given."""
    degrees = given.get("degrees")
    if not isinstance(degrees, list | tuple):  # absent, or of a wrong shape the config refuses
        degrees = None
    if "arm_depths" not in given:
        if any(k in given for k in SHAPES):
            base["arm_depths"] = ()
        elif degrees is not None:
            labels = {f"d={d}" for d in degrees}
            base["arm_depths"] = tuple(
                e for e in base.get("arm_depths") or () if e.rpartition(":")[0] in labels
            )
    if "control" not in given and degrees is not None and "3" not in map(str, degrees):
        base["control"] = False


def joined(entries: tuple[str, ...]) -> tuple[str, ...]:
    """--arm-depths' entries whole: the command line splits a list flag's words at commas ('d=2:2',
    '4', '6'), so a word without a label continues the entry before it."""
    out: list[str] = []
    for word in (str(e).strip() for e in entries):
        if out and ":" not in word:
            out[-1] = f"{out[-1]},{word}"
        else:
            out.append(word)
    return tuple(out)


def entry(entry: str, labels: list[str]) -> tuple[str, tuple[int, ...]]:
    """An --arm-depths entry 'LABEL:DEPTHS' as (an arm label of `labels`, its depths sorted)."""
    label, sep, text = entry.rpartition(":")
    label = label.strip()
    if not sep or not label:
        raise UserError(f"--arm-depths entry {entry!r} is not LABEL:DEPTHS (e.g. d=2:2,4,6)")
    if label == CONTROL_LABEL:
        raise UserError(
            f"--arm-depths: {CONTROL_LABEL} climbs {CONTROLLED}'s depths; give them as "
            f"{CONTROLLED}:{text.strip()}"
        )
    if label not in labels:
        # a cutoff of one half: a degree as --degrees gives it ('2') is close to its label
        close = difflib.get_close_matches(label, labels, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UserError(
            f"--arm-depths names {label!r}, no arm of this run{hint} (arms: {', '.join(labels)})"
        )
    words = [w.strip() for w in text.split(",")]
    bad = next((w for w in words if not w.isdigit() or int(w) < 1), None)
    if bad is not None:
        raise UserError(f"--arm-depths {label}: a depth is a positive integer, got {bad!r}")
    depths = [int(w) for w in words]
    if len(set(depths)) != len(depths):
        raise UserError(f"--arm-depths {label} lists a depth twice: {text.strip()}")
    return label, tuple(sorted(depths))

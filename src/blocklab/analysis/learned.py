"""Whether training learned anything: a trained score at chance, and a loss that never moved.

Chance is the score of the best constant guess, one answer that reads no input: the commonest
training label for a classification task, the mean training target for a regression task (scored
within the task's tolerance where it has one, else by its mse), measured on the test split of the
task's data at seed 0 (`chance`). A trained score is at chance when it closes less than
CHANCE_MARGIN of the way from chance to a perfect score (accuracy 1, mse 0): a scale-free rule,
the same for a binary task whose chance is 0.5 and for a tolerance task whose chance is 0.01.

A loss never moved when the validation loss at the end of training lies within UNMOVED_TOL of the
untrained network's (`unmoved`). A trial stores no training loss before its first update (its
training curve averages the losses since the previous checkpoint, none at step 0), but its
validation curve starts at step 0: the same loss, of the same network before any update, on
held-out data. So both ends are read from the validation curve.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

# the share of the way from chance to a perfect score a trained score must pass to count as
# learned: less is within what a constant guess, or a network barely off it, scores
CHANCE_MARGIN = 0.05
# the relative change of the validation loss under which it never moved
UNMOVED_TOL = 0.01


@dataclass(frozen=True)
class Chance:
    """The best constant guess's test score and which way the metric is better."""

    score: float
    higher_is_better: bool  # accuracy; False: mse

    @property
    def perfect(self) -> float:
        return 1.0 if self.higher_is_better else 0.0

    def gain(self, score: float) -> float:
        """The share of the way from chance to a perfect score that `score` closes: 0 at
        chance, 1 perfect, negative below chance (0 where chance is already perfect)."""
        room = self.perfect - self.score
        return (score - self.score) / room if room else 0.0

    def holds(self, score: float) -> bool:
        """Whether a trained score is at chance (`CHANCE_MARGIN`)."""
        return self.gain(score) < CHANCE_MARGIN


def chance(task: str, options: dict[str, Any], seed: int = 0) -> Chance:
    """The best constant guess's score on the test split of `task` with `options` (seed 0's
    data: chance is a property of the task's distribution, and one test split measures it)."""
    import torch

    from blocklab.tasks import make_task
    from blocklab.tasks.base import IGNORE, score

    data = make_task(task, **options).make(seed)
    test = data.test
    if data.kind == "classification":
        labels = data.train.y[data.train.y != IGNORE]
        commonest = int(torch.bincount(labels, minlength=data.n_out).argmax())
        scored = test.y[test.y != IGNORE]
        return Chance(float((scored == commonest).double().mean()), True)
    mean = data.train.y.reshape(-1, data.train.y.shape[-1]).mean(0)  # (n_out,) over every unit
    _, metric, units = score(mean.expand_as(test.y), test.y, data.kind, data.tolerance)
    return Chance(metric / units, data.tolerance is not None)


def unmoved(row: dict[str, Any]) -> bool | None:
    """Whether a finished trial's validation loss ended within UNMOVED_TOL (relative) of its
    value before training; None where the curve cannot tell (not finished, no point at step 0,
    a single point, or a loss that is not finite)."""
    steps, losses = row.get("curve_step") or [], row.get("curve_val_loss") or []
    if row.get("status") != "done" or len(losses) < 2 or not steps or steps[0] != 0:
        return None
    first, last = losses[0], losses[-1]
    if first is None or last is None or not (math.isfinite(first) and math.isfinite(last)):
        return None
    return abs(last - first) <= UNMOVED_TOL * abs(first)


@dataclass(frozen=True)
class Check:
    """One group of trials (one setting, over its seeds) read for learning."""

    group: dict[str, Any]  # the keys the trials were grouped by, and their values
    trials: int  # finished trials with a test score
    score: float | None  # their mean test score; None without one
    chance: Chance
    gain: float | None  # `Chance.gain` of the score; None without one
    at_chance: bool  # `Chance.holds` of the score; False without one
    unmoved: int  # trials whose loss never moved (`unmoved`)
    read: int  # trials whose curve tells (`unmoved` not None)

    def as_json(self) -> dict[str, Any]:
        return {
            **self.group,
            "trials": self.trials,
            "score": self.score,
            "chance": self.chance.score,
            "gain": self.gain,
            "at_chance": self.at_chance,
            "unmoved": self.unmoved,
            "read": self.read,
        }


def checks(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[Check]:
    """Per group of `keys` (in the order the rows first give each): the mean test score of its
    finished trials against the chance of their task (the rows' `task` and `task_options`, each
    task's chance computed once), and how many of their losses never moved."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    known: dict[str, Chance] = {}
    out = []
    for key, group in groups.items():
        done = [r for r in group if r["status"] == "done" and r.get("test_metric") is not None]
        said = [unmoved(r) for r in group]
        task, options = group[0]["task"], group[0]["task_options"]
        name = json.dumps([task, options], sort_keys=True)
        if name not in known:
            known[name] = chance(task, options)
        level = known[name]
        score = sum(r["test_metric"] for r in done) / len(done) if done else None
        out.append(
            Check(
                group=dict(zip(keys, key, strict=True)),
                trials=len(done),
                score=score,
                chance=level,
                gain=None if score is None else level.gain(score),
                at_chance=score is not None and level.holds(score),
                unmoved=sum(s is True for s in said),
                read=sum(s is not None for s in said),
            )
        )
    return out

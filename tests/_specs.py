"""The small trial the engine's tests train: a network of depth 2 and width 8 with layer norm,
on the teacher task unless a test names another."""

from __future__ import annotations

from typing import Any

from blocklab.models import parse_arm
from blocklab.specs import Arm, NetShape, TrainConfig, TrialSpec

SMALL = NetShape(2, 8, norm="layer")


def small_trial(
    arm: str | Arm = "2",
    seed: int = 0,
    train: TrainConfig | None = None,
    *,
    task: str = "teacher",
    options: dict[str, Any] | None = None,
    shape: NetShape = SMALL,
) -> TrialSpec:
    arm = parse_arm(arm) if isinstance(arm, str) else arm
    return TrialSpec(task, dict(options or {}), arm, 0, shape, train or TrainConfig(), seed)

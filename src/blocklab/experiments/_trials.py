"""What the fixed-shape experiments share: trial specs, running them, flat rows.

The degree sweep solves shapes from budgets; the attention experiments (sanford, needle) fix the
shapes themselves and equalize parameters by construction, then run here. Like the experiments,
this module imports what needs torch or numpy where it runs (see `blocklab.experiments`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from blocklab.experiments import Trials
from blocklab.specs import TrainConfig, TrialSpec
from blocklab.store import Store

if TYPE_CHECKING:
    from blocklab.executors import Resources
    from blocklab.models import Arm


@dataclass(frozen=True)
class NetShape:
    """Everything about a network besides its arm and the task."""

    depth: int = 1
    width: int = 32
    norm: str = "none"
    residual: bool = True
    ff: str = "none"
    activation: str = "none"
    flatten: bool = False


def spec(
    task: str,
    task_options: dict[str, Any],
    arm: Arm,
    shape: NetShape,
    train: TrainConfig,
    seed: int,
    measures: tuple[str, ...] = (),
) -> TrialSpec:
    from blocklab.tasks import make_task

    seq_len = make_task(task, **task_options).seq_len
    budget = (
        0 if shape.flatten else arm.block_params(shape.depth, shape.width, False, shape.ff, seq_len)
    )
    return TrialSpec(
        task=task,
        task_options=dict(task_options),
        arm=arm,
        budget=budget,
        depth=shape.depth,
        width=shape.width,
        bias=False,
        norm=shape.norm,
        activation=shape.activation,
        residual=shape.residual,
        train=train,
        seed=seed,
        ff=shape.ff,
        flatten=shape.flatten,
        measures=tuple(measures),
    )


def total_params(task: str, task_options: dict[str, Any], arm: Arm, shape: NetShape) -> int:
    """Every parameter of the network, embedding and readout included."""
    from blocklab import sweep

    trial = spec(task, task_options, arm, shape, TrainConfig(), seed=0)
    data = sweep.task_data(task, json.dumps(task_options, sort_keys=True), 0)
    return sweep.build_model(trial, data).param_counts()["total"]


def width_for_params(
    task: str, task_options: dict[str, Any], arm: Arm, shape: NetShape, target: int
) -> int:
    """The width whose total count is nearest `target` (counts grow with width)."""

    def count(w: int) -> int:
        return total_params(task, task_options, arm, replace(shape, width=w))

    lo, hi = 1, 2
    while count(hi) < target:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if count(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return min((w for w in (lo - 1, lo) if w >= 1), key=lambda w: abs(count(w) - target))


def run_planned(
    planned: list[tuple[dict[str, Any], TrialSpec]],
    store: Store,
    experiment: str,
    *,
    resources: Resources | None,
    progress: bool,
) -> Trials:
    """Run (keys, spec) pairs: the finished rows, each tagged with its keys, and the trials that
    raised."""
    from blocklab import sweep

    specs = [s for _, s in planned]
    records = sweep.run(
        specs,
        store,
        experiment,
        resources=resources,
        label=experiment,
        progress=progress,
    )
    failed = [
        {"id": s.id, "trial": s.describe(), "error": records.get(s.id, {}).get("error", "not run")}
        for s in specs
        if records.get(s.id, {}).get("status") not in ("done", "diverged")
    ]
    rows = [
        row(s, records[s.id], **k)
        for k, s in planned
        if records.get(s.id, {}).get("status") in ("done", "diverged")
    ]
    return Trials(rows, failed)


def row(spec: TrialSpec, rec: dict[str, Any], **keys: Any) -> dict[str, Any]:
    m = rec["metrics"]
    params = m.get("params", {})
    return {
        "id": spec.id,
        "task": spec.task,
        "arm": spec.arm.label,
        "seed": spec.seed,
        "status": rec["status"],
        "metric": m.get("metric"),
        "test_metric": m.get("test_metric"),
        "test_loss": m.get("test_loss"),
        "params": params.get("total"),
        "layer_params": params.get("blocks"),
        "depth": spec.depth,
        "width": spec.width,
        "lr": spec.train.lr,
        "seconds": m.get("seconds"),
        "diverged_step": m.get("diverged_step"),
        # {measure: {"init": summary, "trained": summary}} when the spec asked for measures
        "measures": m.get("measures", {}),
        **keys,
    }

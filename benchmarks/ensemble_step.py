"""Time an ensemble's training, four members at equal and at different learning rates, on two
networks (a degree-3 block on the teacher task, softmax attention on qsa): the fastest of three
runs of `sweep.train_group`, one torch thread, and each member's test metric (to see that two
versions of the engine train the same). Compare two commits by running it with each on
PYTHONPATH, one after the other:

    PYTHONPATH=src python benchmarks/ensemble_step.py
"""

from __future__ import annotations

import dataclasses
import time

import torch

from blocklab.engine import trial
from blocklab.models import parse_arm
from blocklab.specs import NetShape, TrainConfig, TrialSpec

CASES = [("teacher", "3", 16), ("qsa", "softmax_attention", 32)]
RATES = {"equal": [3e-3] * 4, "differ": [1e-3, 3e-3, 1e-2, 3e-2]}


def specs(task: str, arm: str, width: int, lrs: list[float]) -> list[TrialSpec]:
    cfg = TrainConfig(steps=300, batch_size=32, lr=3e-3, eval_points=10)
    return [
        TrialSpec(
            task,
            {},
            parse_arm(arm),
            0,
            NetShape(2, width, norm="layer"),
            dataclasses.replace(cfg, lr=lr),
            seed,
            None,
        )
        for seed, lr in enumerate(lrs)
    ]


if __name__ == "__main__":
    torch.set_num_threads(1)
    for task, arm, width in CASES:
        for name, lrs in RATES.items():
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                _, results, path = trial.train_group(specs(task, arm, width, lrs), "cpu")
                best = min(best, time.perf_counter() - start)
            metrics = [round(r.test_metric, 4) if r.test_metric else None for r in results]
            print(f"{task} {arm} width {width}, rates {name}, {path}: {best:.2f} s, {metrics}")

"""Depth ladders of one shape climbed together: the units of a sweep that differ only in their
seeds (the initialization's and the teacher's) fitted, rung by rung, as one batched
Levenberg-Marquardt computation (`batched.BatchedLevenbergMarquardt`, each member on its own
training set), beside `ladder.fit_ladder`, which climbs one ladder and is their plain reference
(tests/fitting/test_cohorts.py compares the two step by step).

At each rung every unit's chains are members of one fit: each chain is made, warmed, monitored and
certified as it would be alone (`ladder.Climb`, `converge.fit_batched`), each unit's training
set drawn as alone (`converge.training_set` of its own data and seed), and each unit keeps its own
best chain and its own rungs. A unit whose rung the refit rule sends back (`ladder.Climb.refit`)
fits its second attempt together with the other units' sent back at that rung, as one more batched
fit, before any unit climbs on. Which trials climb together is the sweep's choice
(`specs.fit_key`, `specs.batches`), made where batching pays (`batch_units`: a GPU).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import nn

from blocklab.fitting import converge
from blocklab.fitting.ladder import Climb, RungFits
from blocklab.specs import TrainConfig
from blocklab.tasks.base import TaskData

# whether a sweep on the CPU fits its units together: off, as a rung's chains are there
# (`converge.batch_chains`): a CPU fits units together no faster than one at a time, its fits
# bound by work batching does not shrink (benchmarks/fit_units.py times the two). Tests and the
# benchmark set it to fit them together there too
ON_CPU = False


def batch_units(device: str) -> bool:
    """Whether a sweep on `device` fits Levenberg-Marquardt ladders of one shape together: on a
    GPU, where batching a rung's chains paid (`converge.batch_chains`), or where `ON_CPU` says."""
    return torch.device(device).type == "cuda" or ON_CPU


def fit_ladders(
    depths: tuple[int, ...],
    make_models: list[Callable[[int, int], nn.Module]],
    data: list[TaskData],
    cfg: TrainConfig,
    seeds: list[int],
    thresholds: list[float],
) -> list[Climb]:
    """`ladder.fit_ladder` for U units at once, unit u climbing with `make_models[u]`,
    `data[u]`, `seeds[u]` and `thresholds[u]`: at each rung its `cfg.restarts` chains and every
    other unit's are the members of one `fit_batched` computation, and the units the refit rule
    sends back (`Climb.refit`) fit their second attempts as one more. Returns each unit's climb:
    its rungs as `fit_ladder` returns them alone (a rung's seconds the unit's share of the
    rung) and its fits' states (`Climb.states`)."""
    if cfg.optimizer != "lm":
        raise ValueError(f"units fit together by Levenberg-Marquardt alone, not {cfg.optimizer}")
    units = list(zip(make_models, data, seeds, thresholds, strict=True))
    climbs = [Climb(make, d, cfg, seed) for make, d, seed, _ in units]
    k = cfg.restarts  # each unit's chains, in order: unit u's are members u k to u k + k - 1
    for depth in depths:
        start = time.perf_counter()
        fits = [climb.rung(depth) for climb in climbs]  # unit by unit, as each climbs alone
        runs = _fit(fits, units, k)
        chains = [runs[u * k : (u + 1) * k] for u in range(len(units))]
        again = [climb.refit(f, c) for climb, f, c in zip(climbs, fits, chains, strict=True)]
        redo = [u for u, a in enumerate(again) if a is not None]
        if redo:  # the refit rule fired: those units' second attempts, together
            more = _fit([again[u] for u in redo], [units[u] for u in redo], k)
            for j, u in enumerate(redo):
                fits[u], chains[u] = again[u], more[j * k : (j + 1) * k]
        for climb, f, c in zip(climbs, fits, chains, strict=True):
            climb.close(f, c, start, True, share=len(units))
    return climbs


def _fit(fits: list[RungFits], units: list[tuple], k: int) -> list[converge.Restart]:
    """Every unit's `k` chains at one rung as the members of one `fit_batched` computation."""
    return converge.fit_batched(
        [m for f in fits for m in f.models],
        [d for _, d, _, _ in units for _ in range(k)],
        [f.sets for f in fits for _ in range(k)],
        [c for f in fits for c in f.cfgs],
        [i for f in fits for i in f.inits],
        [t for *_, t in units for _ in range(k)],
    )

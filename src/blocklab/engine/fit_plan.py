"""What a second-order fit will cost, known before it starts, and the optimizer chosen from it.

A Levenberg-Marquardt iteration forms the N x P Jacobian and J^T J: O(N P^2) time and 8 N P bytes
(`fit.LevenbergMarquardt`). An L-BFGS iteration is a few forward and backward passes, O(N P) time,
with memory for the activations and its history. `choose` estimates both for every planned fit
from P, N and the device (its float64 matmul rate measured on the spot, the memory a worker may
use), keeps Levenberg-Marquardt where its iteration takes at most `LM_ITERATION_LIMIT` and its
memory fits, gives the rest to L-BFGS (DESIGN.md: "Levenberg-Marquardt where its O(N P^2) cost
fits, L-BFGS beyond"), says which it chose and why, and refuses a plan no optimizer can hold in
memory.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import torch

from blocklab.engine.progress import minutes
from blocklab.errors import UserError

# past this a Levenberg-Marquardt iteration leaves its fit to L-BFGS: 1,024 iterations of 2 s
# are over half an hour per restart (P of about 1,500 at N = 32,768 at 50 GFLOP/s), where
# L-BFGS's iteration is about P times cheaper
LM_ITERATION_LIMIT = 2.0
MEMORY_SHARE = 0.8  # of the memory a worker may use, what one fit may take
# activations kept for a backward pass, per example, per layer and unit of width: a poly layer's
# norm, factors and products, with room to spare
ACTIVATIONS = 16
LBFGS_HISTORY = 100  # `fit.LBFGS`'s curvature pairs


@dataclasses.dataclass(frozen=True)
class Estimate:
    """One fit's size and cost: per iteration, seconds and bytes for each optimizer."""

    params: int
    examples: int
    outputs: int
    lm_seconds: float
    lm_bytes: int
    lbfgs_seconds: float
    lbfgs_bytes: int


def gemm64(device: str, n: int = 512, repeats: int = 5) -> float:
    """The device's float64 matmul rate (`matmul_rate`), on the threads this process uses."""
    return matmul_rate(device, torch.float64, n, repeats)


def matmul_rate(device: str, dtype: torch.dtype, n: int, repeats: int) -> float:
    """GFLOP/s of the best of `repeats` n x n matmuls of `dtype` on `device`."""
    a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
    best = math.inf
    for _ in range(repeats + 2):  # the first two warm up the kernels
        sync(device)
        start = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def sync(device: str) -> None:
    """Wait for `device`'s queued work (a CUDA device; the CPU runs in order), for timing."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def worker_memory(device: str, workers: int) -> int:
    """Bytes one worker may use: the device's free memory (the CPU's MemAvailable) shared by
    the workers that run on it."""
    if device.startswith("cuda"):
        free = torch.cuda.mem_get_info(torch.device(device))[0]
    else:
        free = _available()
    return int(free / max(1, workers))


def _available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def estimate(spec, rate: float) -> Estimate:
    """The cost of `spec`'s fit (its top rung on a ladder) at `rate` float64 GFLOP/s: an LM
    iteration as J^T J's N P (P + 1) FLOPs plus a Jacobian of at most as many (`blocklab bench`
    measures both), an L-BFGS iteration as two forward and backward passes (12 N P)."""
    from blocklab.engine import converge
    from blocklab.engine.trial import init_model, task_data

    data = task_data(spec.task, spec.task_options, spec.data_seed)
    model = init_model(spec, data, "cpu", spec.seed)
    p = sum(q.numel() for q in model.parameters() if q.requires_grad)
    available = None if data.online else len(data.train)
    n = converge.examples(spec.train, p, available)
    k = data.train.y[0].numel()
    width = max((q.shape[-1] for q in model.parameters() if q.dim() == 2), default=1)
    activations = 8 * n * ACTIVATIONS * width * max(1, spec.shape.depth)
    flops = n * k * p * (p + 1)
    return Estimate(
        params=p,
        examples=n,
        outputs=k,
        lm_seconds=2 * flops / (rate * 1e9),
        lm_bytes=8 * n * k * p + 4 * 8 * p * p + activations,
        lbfgs_seconds=12 * n * k * p / (rate * 1e9),
        lbfgs_bytes=2 * 8 * LBFGS_HISTORY * p + activations,
    )


def _secs(x: float) -> str:
    return f"{x:,.0f} s" if x >= 10 else f"{x:.2g} s"


def _size(b: float) -> str:
    return f"{b / 2**30:.1f} GB" if b >= 2**30 else f"{b / 2**20:.0f} MB"


def choose(
    specs: Sequence[Any],
    device: str,
    workers: int,
    *,
    out: TextIO | None = sys.stderr,
    rate: float | None = None,
    memory: int | None = None,
) -> list[Any]:
    """`specs` with each Levenberg-Marquardt fit whose iteration would pass `LM_ITERATION_LIMIT`
    or a worker's memory given to L-BFGS; a line to `out` says what was chosen and what it
    costs. A UserError when a fit does not fit a worker's memory under either optimizer, or
    under the L-BFGS a spec asks for. `rate` (GFLOP/s) and `memory` (bytes per worker) are
    measured when not given."""
    fits = [s for s in specs if s.train.second_order]
    if not fits:
        return list(specs)
    rate = gemm64(device) if rate is None else rate
    memory = worker_memory(device, workers) if memory is None else memory
    room = MEMORY_SHARE * memory
    cache: dict[str, Estimate] = {}
    chosen, moved = [], []
    for spec in specs:
        if not spec.train.second_order:
            chosen.append(spec)
            continue
        key = _key(spec)
        est = cache.get(key) or cache.setdefault(key, estimate(spec, rate))
        lm_ok = est.lm_bytes <= room and est.lm_seconds <= LM_ITERATION_LIMIT
        if spec.train.optimizer == "lm" and not lm_ok:
            moved.append(est)
            spec = dataclasses.replace(
                spec, train=dataclasses.replace(spec.train, optimizer="lbfgs")
            )
        if spec.train.optimizer == "lbfgs" and est.lbfgs_bytes > room:
            raise UserError(
                f"a fit of P = {est.params:,} on N = {est.examples:,} examples needs about "
                f"{_size(est.lbfgs_bytes)} (L-BFGS) and {_size(est.lm_bytes)} "
                f"(Levenberg-Marquardt), and a worker has {_size(room)} to give it: use smaller "
                "--budgets, --max-examples or fewer --workers"
            )
        chosen.append(spec)
    if out is not None:
        out.write(_said(chosen, cache, moved, rate, workers) + "\n")
    return chosen


def _said(chosen, cache, moved, rate: float, workers: int) -> str:
    """One line: which optimizer the fits got, the largest one's cost, and why any moved."""
    lm = [s for s in chosen if s.train.second_order and s.train.optimizer == "lm"]
    parts = []
    if lm:
        biggest = max((cache[_key(s)] for s in lm), key=lambda e: e.params)
        # every rung of a ladder at its own P and N, each chain at most `steps` iterations
        per: dict[str, float] = {}
        for s in lm:
            if _key(s) not in per:
                per[_key(s)] = sum(e.lm_seconds for e in _rung_estimates(s, rate))
        total = sum(s.train.steps * s.train.restarts * per[_key(s)] for s in lm)
        parts.append(
            f"Levenberg-Marquardt for {len(lm)} trial(s), the largest P = {biggest.params:,} on "
            f"N = {biggest.examples:,}: about {_secs(biggest.lm_seconds)} and "
            f"{_size(biggest.lm_bytes)} an iteration at {rate:.0f} GFLOP/s (float64), at most "
            f"{minutes(total / max(1, workers))} on {workers} worker(s) without warm starts, "
            "less as fits certify early"
        )
    if moved:
        worst = max(moved, key=lambda e: e.params)
        low = min(e.params for e in moved)
        parts.append(
            f"L-BFGS for {len(moved)} trial(s) of P = {low:,}-{worst.params:,}: a "
            f"Levenberg-Marquardt iteration at P = {worst.params:,} would take about "
            f"{_secs(worst.lm_seconds)} and {_size(worst.lm_bytes)} (its limit: "
            f"{LM_ITERATION_LIMIT:g} s and a worker's memory)"
        )
    return "fits: " + "; ".join(parts) if parts else "fits: L-BFGS, as asked"


def _key(spec) -> str:
    return dataclasses.replace(spec, seed=0, data_seed=0).id


def _rung_estimates(spec, rate: float) -> list[Estimate]:
    """A ladder's rungs (one estimate per depth), or the fit itself."""
    if not spec.ladder:
        return [estimate(spec, rate)]
    return [estimate(spec.at_depth(d, ladder=()), rate) for d in spec.ladder]

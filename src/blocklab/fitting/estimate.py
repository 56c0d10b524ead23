"""What a second-order fit will cost, known before it starts, and the optimizer chosen from it.

A Levenberg-Marquardt iteration forms the N x P Jacobian and J^T J: O(N P^2) time and 8 N P bytes
(`fit.LevenbergMarquardt`). An L-BFGS iteration is a few forward and backward passes, O(N P) time,
with memory for the activations and its history. `choose` estimates both for every planned fit
from P, N and the device (its float64 matmul rate measured on the spot, the memory a worker may
use), keeps Levenberg-Marquardt where its iteration takes at most `LM_ITERATION_LIMIT` and its
memory fits, gives the rest to L-BFGS (DESIGN.md: "Levenberg-Marquardt where its O(N P^2) cost
fits, L-BFGS beyond"), says which it chose and why, and refuses a plan no optimizer can hold in
memory. Its estimate of the fits' time, every fit at its `steps` iterations, times an iteration
of each network as well as counting its FLOPs (`rung_seconds`, `timing.lm_iteration`), and
counts the AdamW warm starts (`converge._warm`): a restart's warm start at the first rung, its
steps (`warm_steps`) times one step of that network, timed here (`timing.adam_step`). A
small network's iteration or step costs mostly the calls it makes, which no FLOP count sees.
Every network these read is built once, in the run's cache where it keeps one (`built`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import torch

from blocklab.errors import UserError
from blocklab.fitting.timing import adam_step, lm_iteration, sync
from blocklab.formatting import minutes

# seconds past which a Levenberg-Marquardt iteration leaves its fit to L-BFGS: 1,024 iterations
# at the limit are over half an hour per restart, where L-BFGS's iteration is about P times
# cheaper
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


def parallelism(device: str, workers: int) -> float:
    """How many of `workers` run at once at full speed, between 1 and `workers`: on a CPU, the
    float64 matmul rate of `workers` times this process's threads over the rate of its threads
    alone, so cores other processes hold now count against the run's workers as they will
    (a loaded machine runs two workers no faster than one); `workers` on a GPU, as before."""
    if workers <= 1 or str(device).startswith("cuda"):
        return max(1, workers)
    threads = torch.get_num_threads()
    one = gemm64(device)
    torch.set_num_threads(threads * workers)
    try:
        many = gemm64(device)
    finally:
        torch.set_num_threads(threads)
    return min(float(workers), max(1.0, many / one))


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
    measures both), an L-BFGS iteration as two forward and backward passes (12 N P). Its network
    is the one the checks before the run built, where they keep one (`built.shared`)."""
    from blocklab.fitting import built, converge
    from blocklab.fitting.network import task_data

    data = task_data(spec.task, spec.task_options, spec.data_seed)
    model = built.shared().network(spec)  # read only: its sizes
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
    step: Callable[[Any], float] | None = None,
    lm_step: Callable[[Any], float] | None = None,
    parallel: float | None = None,
    left: dict[str, tuple[float, ...] | None] | None = None,
    costs: dict[str, float] | None = None,
) -> list[Any]:
    """`specs` with each Levenberg-Marquardt fit whose iteration would pass `LM_ITERATION_LIMIT`
    or a worker's memory given to L-BFGS; a line to `out` says what was chosen and what it
    costs. A UserError when a fit does not fit a worker's memory under either optimizer, or
    under the L-BFGS a spec asks for. `rate` (GFLOP/s), `memory` (bytes per worker), `step`
    (a network's seconds per AdamW step, for its warm starts) and `lm_step` (a network's seconds
    per Levenberg-Marquardt iteration) and `parallel` (how many workers run at once,
    `parallelism`) are measured when not given; the last three only for the line, after the
    choice, on the fits that keep Levenberg-Marquardt. The line costs what is `left` to run
    (`sweep.work_left`: by trial id, None for a whole trial, or each rung's share of its
    iterations a continued trial still runs; a trial not in it is finished); None: everything.
    With the line, `costs` (if given) gets each Levenberg-Marquardt trial's estimated seconds
    on one of `workers` workers sharing the cores free now, by id: what a progress ETA reads."""
    fits = [s for s in specs if s.train.second_order]
    if not fits:
        return list(specs)
    rate = gemm64(device) if rate is None else rate
    memory = worker_memory(device, workers) if memory is None else memory
    room = MEMORY_SHARE * memory
    cache: dict[str, Estimate] = {}
    chosen, moved = [], []
    # what each trial has left, by its place (a trial given to L-BFGS changes its id)
    shares = [None if left is None else left.get(s.id, ()) for s in specs]
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
        step = step or functools.partial(adam_step, device=device)
        lm_step = lm_step or functools.partial(lm_iteration, device=device)
        if parallel is None and any(
            s.train.second_order and s.train.optimizer == "lm" for s in chosen
        ):
            parallel = parallelism(device, workers)
        parallel = parallel or max(1, workers)
        said = _said(chosen, moved, rate, workers, parallel, step, lm_step, shares, costs)
        out.write(said + "\n")
    return chosen


def _left(rungs: list, share: tuple[float, ...] | None) -> float:
    """A trial's seconds an iteration summed over its rungs, each weighted by the share of its
    iterations left (`choose`'s `left`: None all of them, () none)."""
    if share is None:
        return sum(t for _, t in rungs)
    return sum(t * w for (_, t), w in zip(rungs, share, strict=False))


def _said(chosen, moved, rate: float, workers: int, parallel, step, lm_step, shares, costs=None):
    """One line: which optimizer the fits got, the largest one's cost, and why any moved."""
    pairs = [(s, w) for s, w in zip(chosen, shares, strict=True) if s.train.second_order]
    lm = [s for s, _ in pairs if s.train.optimizer == "lm"]
    parts = []
    if lm:
        rungs = rung_seconds(lm, rate, lm_step)
        big, big_seconds = max((r for s in lm for r in rungs[_key(s)]), key=lambda r: r[0].params)
        # every rung of a ladder at its own P and N, each chain at most `steps` iterations, as
        # much of them as is left
        left = [(s, w) for s, w in pairs if s.train.optimizer == "lm"]
        each = {s.id: s.train.steps * s.train.restarts * _left(rungs[_key(s)], w) for s, w in left}
        # a warm start begins a trial fitted whole; a continued one starts past it
        fresh = [s for s, w in left if w is None]
        (warm, timed), said = warm_seconds(fresh, step), ""
        total = sum(each.values())
        if costs is not None:  # as a worker of `workers` on the cores free now runs them
            slow = max(1, workers) / parallel
            costs.update({i: (t + warm.get(i, 0.0)) * slow for i, t in each.items() if t > 0})
        if warm:  # shared by the workers as the fits are
            steps = max(warm_steps(s.train) for s in lm)
            share = minutes(sum(warm.values()) / parallel)
            said = f", {share} of it AdamW warm starts ({steps:,} steps a restart at up to "
            said += f"{max(timed.values()) * 1e3:.2g} ms a step, timed here)"
        shared = f" (as fast as {parallel:.1f} on the cores free now)" if parallel < workers else ""
        parts.append(
            f"Levenberg-Marquardt for {len(lm)} trial(s), the largest P = {big.params:,} on "
            f"N = {big.examples:,}: an iteration about {_secs(big_seconds)} timed here "
            f"({_secs(big.lm_seconds)} of FLOPs at {rate:.0f} GFLOP/s, float64) and "
            f"{_size(big.lm_bytes)}; about "
            f"{minutes((total + sum(warm.values())) / parallel)} on {workers} worker(s)"
            f"{shared} "
            f"if every fit left runs its {max(s.train.steps for s in lm):,} iterations"
            f"{' (a continued one those it has left)' if any(w for _, w in left) else ''}"
            f"{said}, less as fits certify early"
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


def rung_seconds(
    specs: Sequence[Any], rate: float, lm_step: Callable[[Any], float]
) -> dict[str, list[tuple[Estimate, float]]]:
    """Each trial's networks (a ladder's rungs, or the fit itself), by trial (`_key`): its
    estimate at `rate` and the seconds of one iteration, the larger of its FLOPs at `rate` and
    its time. A ladder's first and last rungs are timed (`lm_step`, each network once); a rung
    between them reads its time off the line through those two in FLOPs, an iteration costing
    a fixed overhead (the calls it makes) plus work that grows with its FLOPs, so the plan times
    two networks a ladder, where timing every rung would cost as much again before the run."""
    timed: dict[str, float] = {}

    def seconds(net) -> float:
        key = _key(net)
        if key not in timed:
            timed[key] = lm_step(net)
        return timed[key]

    out: dict[str, list[tuple[Estimate, float]]] = {}
    for spec in specs:
        if _key(spec) in out:
            continue
        nets = [spec.at_depth(d, ladder=()) for d in spec.ladder] if spec.ladder else [spec]
        ests = [estimate(n, rate) for n in nets]
        ends = [(ests[i].lm_seconds, seconds(nets[i])) for i in (0, -1)]
        out[_key(spec)] = [(e, max(e.lm_seconds, _between(ends, e.lm_seconds))) for e in ests]
    return out


def _between(ends: list[tuple[float, float]], flops: float) -> float:
    """The seconds at `flops` (FLOP seconds at the rate) on the line through two timed rungs."""
    (f0, t0), (f1, t1) = ends
    return t0 + (t1 - t0) * (flops - f0) / (f1 - f0) if f1 > f0 else max(t0, t1)


def warm_steps(cfg) -> int:
    """The AdamW steps of one warm start of `cfg`: its `warm_start` steps, and under wsd the
    decay of the run of half the steps that branches off them (`train.half_run`)."""
    from blocklab.fitting.train import half_run

    if not cfg.warm_start:
        return 0
    branch = half_run(dataclasses.replace(cfg, optimizer="adam", steps=cfg.warm_start))
    return cfg.warm_start + (branch[1] - branch[0] if branch else 0)


def _bottom(spec):
    """The network a trial's warm starts train: a ladder's first rung, or the fit's own."""
    return spec.at_depth(spec.ladder[0], ladder=()) if spec.ladder else spec


def warm_seconds(
    specs: Sequence[Any], step: Callable[[Any], float]
) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds of each trial's warm starts, by trial id (none where a trial has none): one per
    restart, at the first rung (a ladder's later rungs continue the fit below), each
    `warm_steps` of `step(network)` seconds; and that step's seconds, by network, each timed
    once."""
    timed: dict[str, float] = {}
    out = {}
    for spec in specs:
        if not spec.train.warm_start:
            continue
        bottom = _bottom(spec)
        key = _key(bottom)
        if key not in timed:
            timed[key] = step(bottom)
        out[spec.id] = spec.train.restarts * warm_steps(spec.train) * timed[key]
    return out, timed

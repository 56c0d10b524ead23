"""Bench rows (e) and (f) of `blocklab bench` (`blocklab.bench`). (e): certified
Levenberg-Marquardt fits per minute, the K restarts of a small degree-3 network on the teacher task
fitted one after another vs as one batched computation
(`fitting.batched.BatchedLevenbergMarquardt`), per depth. (f): one iteration's split into
residuals, Jacobian, J^T J and solve, and J^T J's share of the device's float64 matmul rate
(`split_rows`). `cfg` is the bench's `BenchConfig`: its
fit_depths, split_depths, fit_width, fit_restarts, fit_iterations, degree, repeats and device.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from blocklab.fitting import converge
from blocklab.fitting.batched import BatchedLevenbergMarquardt, converged_batched
from blocklab.fitting.certify import converged
from blocklab.fitting.estimate import gemm64, sync
from blocklab.fitting.fit import LevenbergMarquardt
from blocklab.fitting.network import init_model
from blocklab.jacobian import gram
from blocklab.models import parse_arm
from blocklab.specs import NetShape, TrainConfig, TrialSpec
from blocklab.tasks import make_task
from blocklab.tasks.base import TaskData

FIT_TASK = ("teacher", {"n_in": 4})


def _fit_spec(cfg: Any, depth: int) -> TrialSpec:
    train_cfg = TrainConfig(optimizer="lm", steps=cfg.fit_iterations, restarts=cfg.fit_restarts)
    return TrialSpec(
        task=FIT_TASK[0], task_options=FIT_TASK[1], arm=parse_arm(str(cfg.degree)), budget=0,
        shape=NetShape(depth, cfg.fit_width, norm="layer"), train=train_cfg, seed=0,
    )  # fmt: skip


def _fit_models(cfg: Any, spec: TrialSpec, data: TaskData) -> list[nn.Module]:
    """The K restarts of one trial, initialized as `converge.fit` initializes them."""
    seeds = [converge.restart_seed(spec.seed, r) for r in range(cfg.fit_restarts)]
    # built where the task's data lie, then moved: the unused-parameter probe reads that data
    return [init_model(spec, data, "cpu", seed).double().to(cfg.device) for seed in seeds]


def _time_fits(models: list[nn.Module], x, y, iterations: int, batched: bool, device: str):
    """Seconds of K certified fits, and how many of them the certificate passed."""
    half = max(1, iterations // 2)
    sync(device)
    start = time.perf_counter()
    if batched:
        fitter = BatchedLevenbergMarquardt(models, x, y)
        certificates = converged_batched(fitter, half, iterations - half)
    else:
        certificates = [
            converged(LevenbergMarquardt(m, x, y), half, iterations - half) for m in models
        ]
    sync(device)
    return time.perf_counter() - start, sum(c.passed for c in certificates)


def fit_rows(cfg: Any) -> list[dict]:
    """(e): certified fits per minute of K restarts fitted one at a time and batched, per depth;
    the fastest of `repeats` interleaved runs of each (fresh networks each run), after a warm-up
    of two iterations each way (the first call of vmap and jacrev traces)."""
    data = make_task(FIT_TASK[0], **FIT_TASK[1]).make(0)
    rows = []
    for depth in cfg.fit_depths:
        spec = _fit_spec(cfg, depth)
        first = _fit_models(cfg, spec, data)[0]
        params = sum(p.numel() for p in first.parameters() if p.requires_grad)
        n = converge.examples(spec.train, params, None if data.online else len(data.train))
        train_set = converge.training_set(data, n, spec.seed)
        x, y = train_set.x.to(cfg.device), train_set.y.to(cfg.device)  # (N, 4), (N, 1) float64
        best = {False: float("inf"), True: float("inf")}
        passed = {}
        for batched in (False, True):
            _time_fits(_fit_models(cfg, spec, data), x, y, 2, batched, cfg.device)
        for _ in range(cfg.repeats):  # interleaved: a slow spell hits both ways alike
            for batched in (False, True):
                models = _fit_models(cfg, spec, data)
                seconds, passed[batched] = _time_fits(
                    models, x, y, cfg.fit_iterations, batched, cfg.device
                )
                best[batched] = min(best[batched], seconds)
        seq, bat = (60 * cfg.fit_restarts / best[b] for b in (False, True))
        rows.append(
            {
                "depth": depth,
                "params": params,
                "examples": n,
                "sequential_fits_per_min": seq,
                "batched_fits_per_min": bat,
                "speedup": bat / seq,
                # fits the certificate passed, of the K: the two ways take the same steps up to
                # float rounding, which a long non-convex fit can amplify
                "sequential_converged": passed[False],
                "batched_converged": passed[True],
            }
        )
    return rows


def _best_ms(f, device: str, repeats: int):
    """The fastest of `repeats` calls of `f` in ms, after one warm-up, and its last result."""
    out = f()
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        out = f()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 1e3 * best, out


def split_rows(cfg: Any) -> list[dict]:
    """Where one Levenberg-Marquardt iteration's time goes (`fit.LevenbergMarquardt.run`), per
    depth of `cfg.split_depths` (a degree-`cfg.degree` network of width `cfg.fit_width`, N =
    data_ratio x P examples of the teacher task, at most max_examples): residuals, the Jacobian
    (the path `FlatParams.jacobian` takes), J^T J (`jacobian.gram`) and the damped Cholesky solve,
    each the fastest of `cfg.repeats` calls. `gemm_fraction` is J^T J's rate over the device's
    float64 matmul rate (`fitting.estimate.gemm64`), counting the FLOPs its routine does:
    N P (P + 1) for syrk's one triangle on the CPU, 2 N P^2 for a full product elsewhere."""
    data = make_task(FIT_TASK[0], **FIT_TASK[1]).make(0)
    gemm = gemm64(cfg.device, n=1024)
    return [_split(cfg, depth, data, gemm) for depth in cfg.split_depths]


def _split(cfg: Any, depth: int, data: TaskData, gemm: float) -> dict:
    """`split_rows`'s row at one depth."""
    spec = _fit_spec(cfg, depth)
    model = _fit_models(replace(cfg, fit_restarts=1), spec, data)[0]
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n = converge.examples(spec.train, params, None if data.online else len(data.train))
    train_set = converge.training_set(data, n, spec.seed)
    x, y = train_set.x.to(cfg.device), train_set.y.to(cfg.device)  # (N, 4), (N, 1) float64
    lm = LevenbergMarquardt(model, x, y)
    flat, theta = lm.flat, lm.theta
    with torch.no_grad():
        residuals_ms, _ = _best_ms(lambda: flat.residuals(theta), cfg.device, cfg.repeats)
    jacobian_ms, jac = _best_ms(lambda: flat.jacobian(theta), cfg.device, cfg.repeats)
    normal_ms, a = _best_ms(lambda: gram(jac), cfg.device, cfg.repeats)

    def solve():
        chol, _ = torch.linalg.cholesky_ex(a + torch.diag(lm.mu * lm.scale))
        return torch.cholesky_solve(lm.g.unsqueeze(1), chol)

    solve_ms, _ = _best_ms(solve, cfg.device, cfg.repeats)
    flops = n * params * (params + 1) if x.device.type == "cpu" else 2 * n * params**2
    return {
        "params": params,
        "examples": n,
        "device": cfg.device,
        "jacobian_path": flat.path,
        "residuals_ms": residuals_ms,
        "jacobian_ms": jacobian_ms,
        "normal_ms": normal_ms,
        "solve_ms": solve_ms,
        "normal_gflops": flops / normal_ms / 1e6,
        "gemm_gflops": gemm,
        "gemm_fraction": flops / normal_ms / 1e6 / gemm,
    }

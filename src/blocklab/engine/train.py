"""Training one network on one task: AdamW, linear warmup then cosine decay (or wsd: the peak
rate held, then a linear decay), gradient clipping.

A run whose loss turns non-finite, or grows past `blowup` times its starting loss, stops there and
is reported as diverged with its step; the caller records it and goes on.

Every run reports whether it had stopped improving (`plateau_improvement`). Under wsd that is
measured, not guessed from the curve: a run of half the steps branches off the stable phase,
anneals, and is scored on validation, then the run goes on as if it had not (`half_run`); what
doubling the steps gained is the gap between the two annealed losses.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
import time
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from blocklab.specs import TrainConfig
from blocklab.tasks.base import Split, TaskData, loss, score


@dataclass
class TrainResult:
    status: str  # "done" | "diverged"
    diverged_step: int | None
    val_metric: float | None
    test_metric: float | None
    test_loss: float | None
    steps_to_threshold: int | None
    threshold: float
    curves: dict[str, list[float]]
    seconds: float
    # what the end of training still gained, a share of the final validation loss
    # (`Tracker.plateau`); near 0 when training had stopped improving
    plateau_improvement: float | None = None
    half_val_loss: float | None = None  # wsd: the annealed loss of the run of half the steps


PLATEAU_WINDOW = 0.25  # the share of training, at the end, over which a plateau is read
SMOOTH = 3  # validation points averaged into one smoothed value


def plateau_improvement(
    steps: list[int], val_loss: list[float], window: float = PLATEAU_WINDOW
) -> float | None:
    """(L(start) - L(end)) / L(end) of the validation loss smoothed over SMOOTH evaluations:
    L(end) averages the last ones, L(start) those nearest (1 - window) times the last step.
    0.01 means the loss fell by 1% of its final value over the last `window` of the steps.
    None for a curve too short to tell."""
    if not all(math.isfinite(v) for v in val_loss) or len(steps) < 2 * SMOOTH:
        return None
    at = (1.0 - window) * steps[-1]
    nearest = sorted(range(len(steps) - SMOOTH), key=lambda i: abs(steps[i] - at))[:SMOOTH]
    start = sum(val_loss[i] for i in nearest) / SMOOTH
    end = sum(val_loss[i] for i in range(len(steps) - SMOOTH, len(steps))) / SMOOTH
    return (start - end) / end if end > 0 else None


def half_run(cfg: TrainConfig) -> tuple[int, int, TrainConfig] | None:
    """Under wsd, the run of half the steps that branches off this one's stable phase: it takes
    the same first steps and batches, then decays from step `start` to step `end` (0-based steps
    [start, end)) on the schedule `cfg` of a run of `end` steps. Its annealed loss, beside this
    run's, says what doubling the steps gained (`Tracker.plateau`). None under cosine, whose rate
    falls from the start, and when the run is too short to branch after its warmup."""
    if cfg.schedule != "wsd":
        return None
    end = cfg.steps // 2
    half = replace(cfg, steps=end)
    start = end - max(1, round(cfg.decay * end))
    if start < max(1, int(cfg.warmup * cfg.steps)):
        return None
    return start, end, half


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """The learning rate at `step` (0-based) as a share of its peak: linear warmup over
    `cfg.warmup` of the steps, then cosine decay to zero, or (wsd) the peak held until the last
    `cfg.decay` of the steps and a linear decay to zero over them."""
    n_warm = int(cfg.warmup * cfg.steps)
    if step < n_warm:
        return (step + 1) / n_warm
    if cfg.schedule == "wsd":
        n_decay = max(1, round(cfg.decay * cfg.steps))
        return min(1.0, (cfg.steps - step) / n_decay)
    progress = (step - n_warm) / max(1, cfg.steps - n_warm)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def precision(device: torch.device | str) -> str:
    """The training-step precision on a device: bf16 autocast on a CUDA device that supports it
    (the matmuls in bf16, reductions and the loss in float32), else float32. Evaluation is
    always float32, so reported scores do not depend on it."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return "bf16"
    return "float32"


def autocast(device: torch.device | str):
    """The context a training step's forward pass runs in (see `precision`)."""
    if precision(device) == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


EVAL_OUTPUTS = 1 << 22  # output numbers per evaluation batch: bounds memory for large vocabularies


@torch.no_grad()
def evaluate(
    model: nn.Module, split: Split, kind: str, tolerance: float | None = None, batch: int = 4096
) -> tuple[float, float]:
    """(mean loss, metric) over the split's units (see `tasks.base.score`): the metric is MSE
    for regression, accuracy for classification and for regression scored within a tolerance.
    Batches hold at most `batch` examples and about EVAL_OUTPUTS output numbers."""
    model.eval()
    per_example = model(split.x[:1]).numel()
    batch = max(1, min(batch, EVAL_OUTPUTS // per_example))
    total, hits, units = 0.0, 0.0, 0
    for i in range(0, len(split), batch):
        out = model(split.x[i : i + batch])  # (b, n_out) or (b, T, n_out)
        s_loss, s_metric, n = score(out, split.y[i : i + batch], kind, tolerance)
        total, hits, units = total + s_loss, hits + s_metric, units + n
    model.train()
    return total / units, hits / units


def eval_steps(steps: int, points: int) -> list[int]:
    """Steps after which the validation loss is measured, always including the start and the end."""
    return sorted({0, steps, *(round(steps * i / points) for i in range(1, points + 1))})


class Tracker:
    """One run's bookkeeping, shared by `train` and the ensemble engine: the learning curves, the
    divergence rule, and the step at which the validation loss first reached the threshold."""

    def __init__(self, cfg: TrainConfig, threshold: float):
        self.cfg, self.threshold = cfg, threshold
        self.curves: dict[str, list[float]] = {"step": [], "train_loss": [], "val_loss": []}
        self.window: list[float] = []  # training losses since the last checkpoint
        self.reached: int | None = None
        self.diverged_at: int | None = None
        self.start_loss: float | None = None
        # validation loss of the half-length run branched off the stable phase (wsd, `half_run`)
        self.half_val_loss: float | None = None

    def step_loss(self, step: int, value: float) -> bool:
        """Take a training loss before the update; False (and diverged) when it blew up."""
        self.start_loss = value if self.start_loss is None else self.start_loss
        if not math.isfinite(value) or value > self.cfg.blowup * max(self.start_loss, 1e-3):
            self.diverged_at = step
            return False
        return True

    def checkpoint(self, step: int, val_loss: float) -> None:
        w = self.window
        self.curves["step"].append(step)
        self.curves["val_loss"].append(val_loss)
        self.curves["train_loss"].append(sum(w) / len(w) if w else float("nan"))
        w.clear()
        if self.reached is None and val_loss <= self.threshold:
            self.reached = step

    def result(
        self, val_metric: float | None, test: tuple[float, float] | None, seconds: float
    ) -> TrainResult:
        """The outcome: diverged if it blew up in training or its final scores are not finite."""
        done = self.diverged_at is None and test is not None
        ok = done and all(math.isfinite(v) for v in (val_metric, test[1]))
        if done and not ok:
            self.diverged_at = self.cfg.steps
        return TrainResult(
            "done" if ok else "diverged",
            self.diverged_at,
            val_metric if ok else None,
            test[1] if ok else None,
            test[0] if ok else None,
            self.reached,
            self.threshold,
            self.curves,
            seconds,
            self.plateau() if ok else None,
            self.half_val_loss if ok else None,
        )

    def plateau(self) -> float | None:
        """How much the end of training still improved the validation loss, as a share of the
        final loss. Under wsd: the annealed loss of the half-length run (`half_run`) minus this
        run's, so 0.02 means twice the steps lowered the loss by 2%. Under cosine, whose last
        quarter anneals: the fall of the smoothed curve over that quarter
        (`plateau_improvement`)."""
        if self.cfg.schedule != "wsd":
            return plateau_improvement(self.curves["step"], self.curves["val_loss"])
        half, end = self.half_val_loss, self.curves["val_loss"][-1]
        if half is None or not math.isfinite(half) or not end > 0:
            return None
        return (half - end) / end


def batches(n: int, batch_size: int, seed: int):
    """Endless example indices: reshuffled every epoch by a generator seeded by `seed`."""
    gen = torch.Generator().manual_seed(seed)
    bs = min(batch_size, n)
    perm, pos = torch.randperm(n, generator=gen), 0
    while True:
        if pos + bs > n:
            perm, pos = torch.randperm(n, generator=gen), 0
        yield perm[pos : pos + bs]
        pos += bs


ONLINE_CHUNK = 64  # batches of fresh examples drawn at once: one call labels many steps


def online_batches(data: TaskData, batch_size: int, seed: int):
    """Endless fresh (x, y) batches of a generative task (`TaskData.sample`) from a generator
    seeded by `seed`. They are drawn ONLINE_CHUNK batches at a time; the chunk shapes the random
    stream, so it is a constant, not a setting."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        x, y = data.sample(ONLINE_CHUNK * batch_size, gen)  # (chunk * b, ...)
        yield from zip(x.split(batch_size), y.split(batch_size), strict=True)


def train(
    model: nn.Module, data: TaskData, cfg: TrainConfig, seed: int, threshold: float
) -> TrainResult:
    """Train in place. Batches come from a generator seeded by `seed`, so trials are repeatable:
    shuffled examples of the train split, or fresh ones from a generative task's sampler.
    The plain reference for one network; `blocklab.engine.ensemble` trains many at once and is
    tested against it."""
    start = time.perf_counter()
    kind, tol = data.kind, data.tolerance
    train_split = data.train
    device = train_split.x.device
    params = [p for p in model.parameters() if p.requires_grad]  # frozen ones stay as they are
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    if data.online:
        fresh = online_batches(data, cfg.batch_size, seed)
        draw = ((x.to(device), y.to(device)) for x, y in fresh)
    else:
        order = batches(len(train_split), cfg.batch_size, seed)
        draw = ((train_split.x[i], train_split.y[i]) for i in order)
    checkpoints = set(eval_steps(cfg.steps, cfg.eval_points))  # looked up every step
    run = Tracker(cfg, threshold)
    cast = autocast(device)  # entered every step; chosen once
    branch = half_run(cfg)

    def backward(x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
        """The batch loss before the update, and the gradient norm before clipping."""
        with cast:
            out = model(x)
        batch_loss = loss(out.float(), y, kind)
        opt.zero_grad(set_to_none=True)
        batch_loss.backward()
        return batch_loss.item(), nn.utils.clip_grad_norm_(params, cfg.clip)

    def half_run_loss(ahead) -> float | None:
        """Run the half-length run's decay on the batches ahead, read its validation loss, and
        put model and optimizer back as they were; None if it went non-finite."""
        first, end, half = branch
        saved = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
        try:
            for s in range(first, end):
                for group in opt.param_groups:
                    group["lr"] = cfg.lr * lr_factor(s, half)
                value, norm = backward(*next(ahead))
                if not (math.isfinite(value) and torch.isfinite(norm)):
                    return None
                opt.step()
            return evaluate(model, data.val, kind, tol)[0]
        finally:
            model.load_state_dict(saved[0])
            opt.load_state_dict(saved[1])

    run.checkpoint(0, evaluate(model, data.val, kind, tol)[0])
    model.train()
    for step in range(1, cfg.steps + 1):
        value, grad_norm = backward(*next(draw))
        if not run.step_loss(step, value):
            break
        if not torch.isfinite(grad_norm):
            run.diverged_at = step
            break
        opt.step()
        sched.step()
        run.window.append(value)
        if step in checkpoints:
            run.checkpoint(step, evaluate(model, data.val, kind, tol)[0])
        if branch and step == branch[0]:
            # the branch reads the batches this run reads next, and tee replays them to it
            draw, ahead = itertools.tee(draw)
            run.half_val_loss = half_run_loss(ahead)

    if run.diverged_at is not None:
        return run.result(None, None, time.perf_counter() - start)
    _, val_metric = evaluate(model, data.val, kind, tol)
    test = evaluate(model, data.test, kind, tol)
    return run.result(val_metric, test, time.perf_counter() - start)


def as_record(result: TrainResult) -> dict[str, Any]:
    metrics = {
        k: getattr(result, k)
        for k in (
            "val_metric",
            "test_metric",
            "test_loss",
            "steps_to_threshold",
            "threshold",
            "diverged_step",
            "seconds",
            "plateau_improvement",
            "half_val_loss",
        )
    }
    return {"status": result.status, "metrics": metrics, "curves": result.curves}

"""Training one network on one task: AdamW, linear warmup then cosine decay (or wsd: the peak
rate held, then a linear decay), gradient clipping.

A run's curves, its divergence rule and its plateau measure belong to its `TrialMonitor`
(`monitor`): a run that blows up stops there and is reported as diverged with its step; the caller
records it and goes on.

Every run reports whether it had stopped improving (`TrialMonitor.plateau`). Under wsd that is
measured, not guessed from the curve: a run of half the steps branches off the stable phase,
anneals, and is scored on validation, then the run goes on as if it had not (`half_run`); what
doubling the steps gained is the gap between the two annealed losses.

A step's gradients (`backward`) and the wsd branch (`wsd_half_run`) are written once, here: this
loop and the ensemble's (`blocklab.fitting.ensemble`) both call them.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from blocklab.fitting.monitor import TrainResult, TrialMonitor
from blocklab.specs import TrainConfig
from blocklab.tasks.base import Split, TaskData, loss, member_losses, score_sums


def half_run(cfg: TrainConfig) -> tuple[int, int, TrainConfig] | None:
    """Under wsd, the run of half the steps that branches off this one's stable phase: it takes
    the same first steps and batches, then decays from step `start` to step `end` (0-based steps
    [start, end)) on the schedule `cfg` of a run of `end` steps. Its annealed loss, beside this
    run's, says what doubling the steps gained (`TrialMonitor.plateau`). None under cosine, whose
    rate falls from the start, and when the run is too short to branch after its warmup."""
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


def precision(device: torch.device | str, setting: str = "auto") -> str:
    """The training-step precision a `setting` (`specs.PRECISIONS`) gives on a device: "bf16"
    (autocast: matmuls in bf16, reductions and the loss in float32), "tf32" (CUDA matmuls in
    TF32) or "float32". "auto": bf16 on a CUDA device that supports it, else float32; "tf32" is
    float32 off CUDA. Evaluation is always float32, so reported scores do not depend on it."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    if setting == "bf16" or (setting == "auto" and cuda and torch.cuda.is_bf16_supported()):
        return "bf16"
    return "tf32" if setting == "tf32" and cuda else "float32"


def autocast(device: torch.device | str, setting: str = "auto"):
    """The context a training step's forward pass runs in (see `precision`), chosen once and
    entered every step."""
    device = torch.device(device)
    chosen = precision(device, setting)
    if chosen == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return _TF32() if chosen == "tf32" else contextlib.nullcontext()


class _TF32:
    """CUDA matmuls in TF32 inside, the process's settings restored on the way out. Entered, as
    autocast is, around a step's forward pass: its backward runs the forward's matmuls' gradient
    in float32 (TF32 for the backward too would hold the flags over `backward()`)."""

    def __enter__(self):
        self.before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.before


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
    sums = 0.0
    for i in range(0, len(split), batch):
        out = model(split.x[i : i + batch])  # (b, n_out) or (b, T, n_out)
        sums = sums + score_sums(out, split.y[i : i + batch], kind, tolerance)  # (3,)
    model.train()
    total, hits, units = sums.tolist()  # read back once
    return total / units, hits / units


def batches(n: int, batch_size: int, seed: int, device: torch.device | str = "cpu"):
    """Endless example indices on `device`: reshuffled every epoch by a generator seeded by
    `seed` (drawn on the CPU, so every device draws the same), each epoch's order copied there
    once."""
    gen = torch.Generator().manual_seed(seed)
    bs = min(batch_size, n)
    perm, pos = torch.randperm(n, generator=gen).to(device), 0
    while True:
        if pos + bs > n:
            perm, pos = torch.randperm(n, generator=gen).to(device), 0
        yield perm[pos : pos + bs]
        pos += bs


ONLINE_CHUNK = 64  # batches of fresh examples drawn at once: one call labels many steps


def online_batches(data: TaskData, batch_size: int, seed: int, device: torch.device | str = "cpu"):
    """Endless fresh (x, y) batches of a generative task (`TaskData.sample`) from a generator
    seeded by `seed`, on `device`. They are drawn ONLINE_CHUNK batches at a time, and each chunk
    copied there once; the chunk shapes the random stream, so it is a constant, not a setting."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        x, y = data.sample(ONLINE_CHUNK * batch_size, gen)  # (chunk * b, ...)
        x, y = x.to(device), y.to(device)
        yield from zip(x.split(batch_size), y.split(batch_size), strict=True)


def backward(
    model: nn.Module,
    batch: tuple[Tensor, Tensor],
    kind: str,
    cast: contextlib.AbstractContextManager,
    zero_grad: Callable[[], Any],
    norms: Callable[[], Tensor],
    live: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """A training step's gradients, for one network (`train`) or an ensemble's members
    (`blocklab.fitting.ensemble`, `live` given): the forward pass under the step's precision
    context `cast` (`autocast`), the loss in float32, the gradients zeroed (`zero_grad`) and
    backpropagated. Returns the loss before the update and `norms()`, the gradient norms read
    once the gradients are in (`train` clips there).

    One network backpropagates its batch loss (). An ensemble's members have a loss each (E,),
    and only the finite losses of the members `live` (E,) marks are backpropagated: the others
    get no gradient, so one member's NaN reaches no other."""
    x, y = batch
    with cast:
        out = model(x)  # (b, ...), an ensemble's (E, b, ...)
    losses = (loss if live is None else member_losses)(out.float(), y, kind)  # () or (E,)
    zero_grad()
    if live is None:
        losses.backward()
    else:
        torch.where(live & torch.isfinite(losses), losses, 0.0).sum().backward()
    return losses, norms()


def wsd_half_run(
    branch: tuple[int, int, TrainConfig] | None,
    step: int,
    draw: Iterator,
    *,
    snapshot: Callable[[], Any],
    restore: Callable[[Any], None],
    step_at: Callable[[Any, float], bool],
    score: Callable[[], Any],
    record: Callable[[Any], None],
) -> Iterator:
    """Under wsd, after the step at which the run of half the steps branches off this one
    (`branch`, what `half_run` gave the loop once): that run's decay, scored, then this run put
    back as it was. From the state `snapshot()` took, `step_at(batch, factor)` takes one step at
    `factor` of the peak rate on each of the batches ahead, and says whether anything is still
    finite; the first that is not ends the branch. `record` gets `score()` on validation, or None
    if the branch ended early, and `restore` puts the state back whatever happened.

    Returns the batches the run goes on with: the branch reads the batches this run reads next,
    and `itertools.tee` replays them. At any other step, `draw` as it was."""
    if branch is None or step != branch[0]:
        return draw
    first, end, half = branch
    draw, ahead = itertools.tee(draw)
    saved = snapshot()
    try:
        # all() stops at the first step that is no longer finite
        finite = all(step_at(next(ahead), lr_factor(s, half)) for s in range(first, end))
        value = score() if finite else None
    finally:
        restore(saved)
    record(value)
    return draw


def train(
    model: nn.Module, data: TaskData, cfg: TrainConfig, seed: int, threshold: float
) -> TrainResult:
    """Train in place. Batches come from a generator seeded by `seed`, so trials are repeatable:
    shuffled examples of the train split, or fresh ones from a generative task's sampler.
    The plain reference for one network; `blocklab.fitting.ensemble` trains many at once and is
    tested against it."""
    start = time.perf_counter()
    kind, tol = data.kind, data.tolerance
    train_split = data.train
    device = train_split.x.device
    params = [p for p in model.parameters() if p.requires_grad]  # frozen ones stay as they are
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    if data.online:
        draw = online_batches(data, cfg.batch_size, seed, device)
    else:
        order = batches(len(train_split), cfg.batch_size, seed, device)
        draw = ((train_split.x[i], train_split.y[i]) for i in order)
    monitor = TrialMonitor(cfg, threshold)
    cast = autocast(device, cfg.precision)  # entered every step; chosen once
    branch = half_run(cfg)  # the wsd branch's steps and config, None without one
    clip = functools.partial(nn.utils.clip_grad_norm_, params, cfg.clip)  # returns the norm

    def loss_and_norm(batch: tuple[Tensor, Tensor]) -> list[float]:
        """The batch loss before the update, and the gradient norm before clipping."""
        value, norm = backward(model, batch, kind, cast, opt.zero_grad, clip)
        return torch.stack([value.detach().double(), norm.double()]).tolist()  # one read

    # the wsd branch (`wsd_half_run`): model and optimizer copied and put back, the rate set
    # by hand, as the scheduler follows this run's schedule
    def snapshot() -> tuple[dict, dict]:
        return copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())

    def restore(saved: tuple[dict, dict]) -> None:
        model.load_state_dict(saved[0])
        opt.load_state_dict(saved[1])

    def half_step(batch: tuple[Tensor, Tensor], factor: float) -> bool:
        """A step at `factor` of the peak rate; not taken, False, once non-finite."""
        for group in opt.param_groups:
            group["lr"] = cfg.lr * factor
        value, norm = loss_and_norm(batch)
        if not (math.isfinite(value) and math.isfinite(norm)):
            return False
        opt.step()
        return True

    monitor.checkpoint(0, evaluate(model, data.val, kind, tol)[0])
    model.train()
    for step in range(1, cfg.steps + 1):
        value, grad_norm = loss_and_norm(next(draw))
        if not monitor.step(step, value, grad_norm):
            break
        opt.step()
        sched.step()
        if monitor.due(step):
            monitor.checkpoint(step, evaluate(model, data.val, kind, tol)[0])
        draw = wsd_half_run(
            branch,
            step,
            draw,
            snapshot=snapshot,
            restore=restore,
            step_at=half_step,
            score=lambda: evaluate(model, data.val, kind, tol)[0],
            record=monitor.record_half_run,
        )

    if monitor.diverged:
        return monitor.result(None, None, time.perf_counter() - start)
    _, val_metric = evaluate(model, data.val, kind, tol)
    test = evaluate(model, data.test, kind, tol)
    return monitor.result(val_metric, test, time.perf_counter() - start)

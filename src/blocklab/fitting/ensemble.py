"""Many networks of one architecture trained as one batched computation.

A sweep trains one architecture many times (seeds, learning rates). On a CPU a small training step
is mostly framework overhead, so E members with their weights stacked along a leading axis
[E, ...] train in about the time of a few: one batched matmul per layer instead of E small ones,
one fused AdamW pass per learning rate instead of E optimizers.

Members differ in initialization, batches and data (their seeds) and in learning rate; all else is
shared. Each member follows `train.train` step for step: the same batches, schedule, gradient
clipping (per member) and divergence rule (a `monitor.TrialMonitor` per member), through the same
backward pass and wsd branch (`train.backward`, `train.wsd_half_run`), so its result equals
training it alone to float tolerance (tests/fitting/test_ensemble.py). A member that diverges stops
where it would alone and is left out of every later update, so its NaN reaches no other member.

Two forward paths; results record which one ran:
- "stacked": a `Net` of `stackable` blocks, fed features or token ids (`blocklab.fitting.stacked`).
  Each nn.Linear becomes a batched matmul over stacked weights (E, out, in), each nn.Embedding a
  lookup in stacked tables (E, V, D), and every other parameter (a block's raw one such as the
  mixer's (T, T) token weights, the network's learned positions) is stacked as (E, *shape) and read
  by the module that holds it through `blocks.per_member`, which lines it up with the (E, B, ...)
  inputs. The rest of the network runs unchanged on (E, B, ...) tensors. A block joins this path by
  reading only its input's trailing dimensions, keeping its weights in nn.Linear maps or raw
  parameters read through `per_member`, and setting `stackable = True` (`blocks.base.Block`).
- "vmap": any module, through torch.func.functional_call under torch.func.vmap: the plain
  reference, taken by networks of other blocks and forced on any network with path="vmap".

Classification losses go through `tasks.base.UnitCrossEntropy`, which reads a language model's
logits (E * B * T, vocab), the largest tensor of a step, fewer times than the generic loss.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Iterator

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from blocklab.fitting.monitor import DeviceMonitors, TrainResult, TrialMonitor
from blocklab.fitting.stacked import parent_of, stack_weights, stackable
from blocklab.fitting.stacked_adamw import StackedAdamW, packed
from blocklab.fitting.train import (
    EVAL_OUTPUTS,
    ONLINE_CHUNK,
    autocast,
    backward,
    half_run,
    lr_factor,
    wsd_half_run,
)
from blocklab.specs import TrainConfig
from blocklab.tasks.base import Split, TaskData, score_sums

PATHS = ("auto", "stacked", "vmap")


class Ensemble(nn.Module):
    """E members of one architecture as one module: `forward` maps (E, B, ...) to (E, B, ...).

    The members stay usable (evaluation, measures, parameter counts): their parameters become
    views of the stacked ones, frozen, so they follow every update of the ensemble."""

    def __init__(self, members: list[nn.Module], path: str = "auto"):
        super().__init__()
        if path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {path!r}")
        names = [n for n, _ in members[0].named_parameters()]
        for m in members[1:]:
            shapes = [(n, p.shape) for n, p in m.named_parameters()]
            if shapes != [(n, p.shape) for n, p in members[0].named_parameters()]:
                raise ValueError("ensemble members must share one architecture")
        stacked = {
            n: torch.stack([m.get_parameter(n).detach() for m in members]) for n in names
        }  # name -> (E, ...)
        if path == "auto":
            path = "stacked" if stackable(members[0]) else "vmap"
        elif path == "stacked" and not stackable(members[0]):
            raise ValueError("the stacked path needs a Net of stackable blocks")
        self.path, self.size, self.members = path, len(members), members
        self.net = copy.deepcopy(members[0])
        if path == "stacked":
            stack_weights(self.net, stacked)
            self.params = dict(self.net.named_parameters())
        else:
            # the structure only; the weights come from `params` through functional_call
            self.net = self.net.to("meta")
            self.params = {n: nn.Parameter(t) for n, t in stacked.items()}
        # members' frozen parameters (`models.Net.freeze_unused`) stay stacked, each member its
        # own values, and out of the optimizer
        for n, p in self.params.items():
            p.requires_grad_(members[0].get_parameter(n).requires_grad)
        # the trained ones end to end in one buffer, as `StackedAdamW` keeps them, before the
        # members' views of them are taken
        trained = [p for p in self.params.values() if p.requires_grad]
        if trained:
            packed(trained)
        if path != "stacked":
            for i, p in enumerate(self.params.values()):
                self.register_parameter(f"stacked_{i}", p)
            self.buffers_ = dict(members[0].named_buffers())
        for e, m in enumerate(members):
            for n in names:
                parent, leaf = parent_of(m, n)
                view = self.params[n].detach()[e]
                setattr(parent, leaf, nn.Parameter(view, requires_grad=False))

    def forward(self, x: Tensor) -> Tensor:
        if self.path == "stacked":
            return self.net(x, lead=2)  # (E, B, ...)

        def one(params: dict[str, Tensor], xe: Tensor) -> Tensor:
            return functional_call(self.net, (params, self.buffers_), (xe,))

        return vmap(one, randomness="different")(self.params, x)  # (E, B, ...)


def stacked_batches(n: int, batch_size: int, seeds: list[int], device: torch.device):
    """`train.batches` for every seed at once: (E, b) indices on `device`, each epoch's orders
    drawn together and copied there once, not once a step."""
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    bs = min(batch_size, n)
    while True:
        perms = torch.stack([torch.randperm(n, generator=g) for g in gens]).to(device)  # (E, n)
        for pos in range(0, n - bs + 1, bs):
            yield perms[:, pos : pos + bs]


def stacked_online(datas: list[TaskData], batch_size: int, seeds: list[int], device: torch.device):
    """`train.online_batches` for every member at once: (E, b, ...) fresh batches on `device`,
    each member drawing from its own generator exactly as it would alone; each chunk of
    ONLINE_CHUNK batches is copied there once (`to_device`)."""
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    while True:
        draws = [d.sample(ONLINE_CHUNK * batch_size, g) for d, g in zip(datas, gens, strict=True)]
        xs = to_device([x for x, _ in draws], device)  # (E, chunk * b, ...)
        ys = to_device([y for _, y in draws], device)
        for i in range(0, xs.shape[1], batch_size):
            yield xs[:, i : i + batch_size], ys[:, i : i + batch_size]


CHUNK_COPIES = 2  # the copies `stacked_online` makes per chunk: inputs and targets


def to_device(parts: list[Tensor], device: torch.device) -> Tensor:
    """The members' draws stacked (E, ...) on `device`. For a GPU they are stacked into pinned
    memory and copied without blocking the host, so the copy overlaps the steps still queued
    (torch holds the pinned block until its copy is done); pinned memory needs CUDA, and on the
    CPU the stack is the batch."""
    if device.type != "cuda":
        return torch.stack(parts).to(device)
    pinned = torch.empty((len(parts), *parts[0].shape), dtype=parts[0].dtype, pin_memory=True)
    return torch.stack(parts, out=pinned).to(device, non_blocking=True)


def _inputs(splits: list[Split], shared: bool) -> tuple[Tensor, Tensor]:
    """(n, ...) tensors when every member reads the same data, else (E, n, ...)."""
    if shared:
        return splits[0].x, splits[0].y
    return torch.stack([s.x for s in splits]), torch.stack([s.y for s in splits])


def _pick(t: Tensor, idx: Tensor) -> Tensor:
    """t[idx] for idx (E, b): index_select is much faster than advanced indexing on a CPU."""
    return t.index_select(0, idx.flatten()).unflatten(0, idx.shape)  # (E, b, ...)


@torch.no_grad()
def evaluate_ensemble(
    ens: Ensemble, splits: list[Split], kind: str, tolerance: float | None, batch: int = 4096
) -> list[tuple[float, float]]:
    """`train.evaluate` for every member at once: (mean loss, metric) per member. The batches
    are those `train.evaluate` takes for one member (about EVAL_OUTPUTS outputs each, per
    member), so a member's sums do not depend on the ensemble's size."""
    size, shared = ens.size, all(s is splits[0] for s in splits)
    x, _ = _inputs(splits, shared)
    per_example = ens.members[0](splits[0].x[:1]).numel()
    batch = max(1, min(batch, EVAL_OUTPUTS // per_example))
    sums = [0.0] * size
    ens.train(False)
    for i in range(0, len(splits[0]), batch):
        xb = (
            x[i : i + batch].expand(size, *x[i : i + batch].shape)
            if shared
            else x[:, i : i + batch]
        )
        out = ens(xb)  # (E, b, n_out) or (E, b, T, n_out)
        for e, s in enumerate(splits):
            sums[e] = sums[e] + score_sums(out[e], s.y[i : i + batch], kind, tolerance)  # (3,)
    ens.train(True)
    read = torch.stack(sums).tolist()  # (E, 3): the one transfer
    return [(total / units, hits / units) for total, hits, units in read]


def _batches(
    datas: list[TaskData], batch_size: int, seeds: list[int]
) -> tuple[Iterator[tuple[Tensor, Tensor]], torch.device]:
    """Every member's training batches, stacked (E, b, ...), as each would draw them alone:
    fresh examples from a generative task's sampler, or its own shuffle of the train split (one
    copy of it when the members share their data), indexed where the data live. Also that
    device."""
    shared = all(d is datas[0] for d in datas)
    train_x, train_y = _inputs([d.train for d in datas], shared)
    device = train_x.device
    if datas[0].online:
        return stacked_online(datas, batch_size, seeds, device), device
    rows = torch.arange(len(datas), device=device).unsqueeze(1)  # (E, 1): each its own data
    order = stacked_batches(len(datas[0].train), batch_size, seeds, device)
    draw = (
        (_pick(train_x, idx), _pick(train_y, idx))
        if shared
        else (train_x[rows, idx], train_y[rows, idx])
        for idx in order
    )
    return draw, device


def train_ensemble(
    members: list[nn.Module],
    datas: list[TaskData],
    cfgs: list[TrainConfig],
    seeds: list[int],
    thresholds: list[float],
    path: str = "auto",
) -> tuple[list[TrainResult], str]:
    """Train the members in place as one ensemble; their configs may differ in `lr` alone.
    Returns each member's result (seconds: its share of the time) and the forward path used.

    A step reads nothing back to the host: losses, norms and who diverged stay on the device,
    and the monitors read them at the checkpoints and every `monitor.READ_EVERY` steps
    (`monitor.DeviceMonitors`)."""
    start = time.perf_counter()
    cfg = cfgs[0]
    if any(dataclasses.replace(c, lr=cfg.lr) != cfg for c in cfgs):
        raise ValueError("ensemble members may differ in learning rate only")
    size = len(members)
    ens = Ensemble(members, path)
    kind, tol = datas[0].kind, datas[0].tolerance
    draw, device = _batches(datas, cfg.batch_size, seeds)
    trained = [p for p in ens.params.values() if p.requires_grad]
    opt = StackedAdamW(trained, [c.lr for c in cfgs], cfg.weight_decay)
    monitors = [TrialMonitor(cfg, t) for t in thresholds]
    pending = DeviceMonitors(monitors, cfg.blowup, device)
    cast = autocast(device, cfg.precision)  # entered every step; chosen once
    branch = half_run(cfg)  # the wsd branch's steps and config, None without one

    def checkpoint(step: int) -> None:
        scores = evaluate_ensemble(ens, [d.val for d in datas], kind, tol)
        for e in pending.alive:
            monitors[e].checkpoint(step, scores[e][0])

    # the wsd branch (`wsd_half_run`) for every member at once, from the members live when it
    # starts; one that goes non-finite is frozen there and scored None
    branch_live = torch.ones_like(pending.live)  # (E,)

    def snapshot() -> list[list[Tensor] | int]:
        branch_live.copy_(pending.live)
        return opt.snapshot()

    def half_step(batch: tuple[Tensor, Tensor], factor: float) -> bool:
        losses, norms = backward(ens, batch, kind, cast, opt.zero_grad, opt.grad_norms, branch_live)
        branch_live.logical_and_(torch.isfinite(losses) & torch.isfinite(norms))
        opt.step(factor, branch_live, norms, cfg.clip)
        return True  # the members that went non-finite are frozen on the device: no read

    def half_scores() -> list[float | None]:
        alive = [e for e, ok in enumerate(branch_live.tolist()) if ok]
        scores = evaluate_ensemble(ens, [d.val for d in datas], kind, tol) if alive else []
        return [scores[e][0] if e in alive else None for e in range(size)]

    def record(values: list[float | None] | None) -> None:
        for e, monitor in enumerate(monitors):
            monitor.record_half_run(values[e] if values else None)

    checkpoint(0)
    for step in range(1, cfg.steps + 1):
        losses, norms = backward(  # (E,), (E,)
            ens, next(draw), kind, cast, opt.zero_grad, opt.grad_norms, pending.live
        )
        pending.add(step, losses, norms)
        opt.step(lr_factor(step - 1, cfg), pending.live, norms, cfg.clip)
        due = monitors[0].due(step)  # the members share one config, one schedule of checkpoints
        if (due or pending.read_due(step)) and not pending.read():
            break  # every member diverged
        if due:
            checkpoint(step)
        draw = wsd_half_run(
            branch,
            step,
            draw,
            snapshot=snapshot,
            restore=opt.restore,
            step_at=half_step,
            score=half_scores,
            record=record,
        )
    pending.read()

    val = evaluate_ensemble(ens, [d.val for d in datas], kind, tol)
    test = evaluate_ensemble(ens, [d.test for d in datas], kind, tol)
    seconds = (time.perf_counter() - start) / size
    # a diverged member's final scores are ignored: it stopped where it would have alone
    results = [m.result(val[e][1], test[e], seconds) for e, m in enumerate(monitors)]
    return results, ens.path

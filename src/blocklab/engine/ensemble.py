"""Many networks of one architecture trained as one batched computation.

A sweep trains one architecture many times (seeds, learning rates). On a CPU a small training step
is mostly framework overhead, so E members with their weights stacked along a leading axis
[E, ...] train in about the time of a few: one batched matmul per layer instead of E small ones,
one fused AdamW pass per learning rate instead of E optimizers.

Members differ in initialization, batches and data (their seeds) and in learning rate; all else is
shared. Each member follows `train.train` step for step: the same batches, schedule, gradient
clipping (per member) and divergence rule (a `monitor.TrialMonitor` per member), so its result
equals training it alone to float tolerance (tests/test_ensemble.py). A member that diverges stops
where it would alone and is left out of every later update, so its NaN reaches no other member.

Two forward paths; results record which one ran:
- "stacked": a `Net` of `stackable` blocks, fed features or token ids (`blocklab.engine.stacked`).
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
import itertools
import math
import time
from collections.abc import Iterator

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from blocklab.engine.monitor import TrainResult, TrialMonitor
from blocklab.engine.stacked import parent_of, stack_weights, stackable
from blocklab.engine.train import EVAL_OUTPUTS, ONLINE_CHUNK, autocast, half_run, lr_factor
from blocklab.specs import TrainConfig
from blocklab.tasks.base import Split, TaskData, member_losses, score

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


class StackedAdamW:
    """AdamW over stacked parameters [E, ...] with a learning rate per member: torch's fused AdamW
    kernel, once for all members when they share a rate and are all training, else per member.
    Gradients are clipped per member, by the norm over that member's parameters."""

    def __init__(self, params: list[Tensor], weight_decay: float, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.weight_decay, self.betas, self.eps = params, weight_decay, betas, eps
        self.exp_avg = [torch.zeros_like(p) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        self.t = 0  # members step together until they stop, so one count serves all

    def snapshot(self) -> list[list[Tensor] | int]:
        """Copies of the parameters and the optimizer's state, for `restore`."""
        return [[t.detach().clone() for t in group] for group in self._state()] + [self.t]

    @torch.no_grad()
    def restore(self, snap: list[list[Tensor] | int]) -> None:
        """Parameters and state back in place as `snapshot` took them: views of them stay valid."""
        for group, saved in zip(self._state(), snap[:-1], strict=True):
            for t, value in zip(group, saved, strict=True):
                t.copy_(value)
        self.t = snap[-1]

    def _state(self) -> list[list[Tensor]]:
        return [[p.detach() for p in self.params], self.exp_avg, self.exp_avg_sq]

    @torch.no_grad()
    def grad_norms(self) -> Tensor:
        for p in self.params:  # a parameter this batch did not reach moves by decay alone
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad.reshape(p.shape[0], -1) for p in self.params]  # (E, n_i)
        per_param = torch.stack([torch.linalg.vector_norm(g, dim=1) for g in grads])  # (k, E)
        return torch.linalg.vector_norm(per_param, dim=0)  # (E,)

    @torch.no_grad()
    def step(self, members: list[int], lrs: list[float], norms: Tensor, clip: float) -> None:
        coef = (clip / (norms + 1e-6)).clamp(max=1.0)  # (E,) as nn.utils.clip_grad_norm_
        for p in self.params:
            p.grad.mul_(coef.view(-1, *[1] * (p.dim() - 1)))
        self.t += 1
        size = self.params[0].shape[0]
        if len(members) == size and len(set(lrs)) == 1:
            groups = [(slice(None), lrs[0])]
        else:
            groups = list(zip(members, lrs, strict=True))
        for index, lr in groups:
            ps = [p.detach()[index] for p in self.params]
            step = torch.tensor(float(self.t), device=ps[0].device)
            steps = [step] * len(ps)  # read, not advanced, by the kernel
            torch._fused_adamw_(
                ps,
                [p.grad[index] for p in self.params],
                [m[index] for m in self.exp_avg],
                [v[index] for v in self.exp_avg_sq],
                [],
                steps,
                lr=lr,
                beta1=self.betas[0],
                beta2=self.betas[1],
                weight_decay=self.weight_decay,
                eps=self.eps,
                amsgrad=False,
                maximize=False,
            )


def stacked_batches(n: int, batch_size: int, seeds: list[int]):
    """`train.batches` for every seed at once: (E, b) indices, one epoch's orders drawn together."""
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    bs = min(batch_size, n)
    while True:
        perms = torch.stack([torch.randperm(n, generator=g) for g in gens])  # (E, n)
        for pos in range(0, n - bs + 1, bs):
            yield perms[:, pos : pos + bs]


def stacked_online(datas: list[TaskData], batch_size: int, seeds: list[int]):
    """`train.online_batches` for every member at once: (E, b, ...) fresh batches, each member
    drawing from its own generator exactly as it would alone."""
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    while True:
        draws = [d.sample(ONLINE_CHUNK * batch_size, g) for d, g in zip(datas, gens, strict=True)]
        xs = torch.stack([x for x, _ in draws])  # (E, chunk * b, ...)
        ys = torch.stack([y for _, y in draws])
        for i in range(0, xs.shape[1], batch_size):
            yield xs[:, i : i + batch_size], ys[:, i : i + batch_size]


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
    sums = [[0.0, 0.0, 0] for _ in range(size)]
    ens.train(False)
    for i in range(0, len(splits[0]), batch):
        xb = (
            x[i : i + batch].expand(size, *x[i : i + batch].shape)
            if shared
            else x[:, i : i + batch]
        )
        out = ens(xb)  # (E, b, n_out) or (E, b, T, n_out)
        for e, s in enumerate(splits):
            part = score(out[e], s.y[i : i + batch], kind, tolerance)
            sums[e] = [a + b for a, b in zip(sums[e], part, strict=True)]
    ens.train(True)
    return [(total / units, hits / units) for total, hits, units in sums]


def _batches(
    datas: list[TaskData], batch_size: int, seeds: list[int]
) -> tuple[Iterator[tuple[Tensor, Tensor]], torch.device]:
    """Every member's training batches, stacked (E, b, ...), as each would draw them alone:
    fresh examples from a generative task's sampler, or its own shuffle of the train split (one
    copy of it when the members share their data). Also the device the data live on."""
    shared = all(d is datas[0] for d in datas)
    train_x, train_y = _inputs([d.train for d in datas], shared)
    device = train_x.device
    if datas[0].online:
        fresh = stacked_online(datas, batch_size, seeds)
        return ((x.to(device), y.to(device)) for x, y in fresh), device
    rows = torch.arange(len(datas), device=device).unsqueeze(1)  # (E, 1): each its own data
    order = stacked_batches(len(datas[0].train), batch_size, seeds)
    draw = (
        (_pick(train_x, idx), _pick(train_y, idx))
        if shared
        else (train_x[rows, idx], train_y[rows, idx])
        for idx in (i.to(device) for i in order)
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
    Returns each member's result (seconds: its share of the time) and the forward path used."""
    start = time.perf_counter()
    cfg = cfgs[0]
    if any(dataclasses.replace(c, lr=cfg.lr) != cfg for c in cfgs):
        raise ValueError("ensemble members may differ in learning rate only")
    size = len(members)
    ens = Ensemble(members, path)
    kind, tol = datas[0].kind, datas[0].tolerance
    draw, device = _batches(datas, cfg.batch_size, seeds)
    opt = StackedAdamW([p for p in ens.params.values() if p.requires_grad], cfg.weight_decay)
    monitors = [TrialMonitor(cfg, t) for t in thresholds]
    alive = list(range(size))
    cast = autocast(device, cfg.precision)  # entered every step; chosen once

    def checkpoint(step: int) -> None:
        scores = evaluate_ensemble(ens, [d.val for d in datas], kind, tol)
        for e in alive:
            monitors[e].checkpoint(step, scores[e][0])

    def backward(x: Tensor, y: Tensor, alive: list[int]) -> tuple[list[float], Tensor]:
        """Every member's batch loss before the update, and the gradient norms (E,) of the
        members in `alive`: the others get no gradient."""
        with cast:
            out = ens(x)  # (E, b, ...)
        losses = member_losses(out.float(), y, kind)  # (E,)
        values = losses.tolist()
        alive = [e for e in alive if math.isfinite(values[e])]
        for p in opt.params:
            p.grad = None
        if len(alive) < size:  # stopped members get no gradient
            keep = torch.zeros(size, dtype=torch.bool, device=losses.device)
            keep[alive] = True
            losses = torch.where(keep, losses, 0.0)
        if alive:
            losses.sum().backward()
        return values, opt.grad_norms()

    def half_run_losses(ahead, alive: list[int]) -> list[float | None]:
        """`train.train`'s branch for every member at once: the half-length run's decay on the
        batches ahead, each member's validation loss (None where it went non-finite), then
        parameters and optimizer state put back."""
        first, end, half = branch
        snap = opt.snapshot()
        for s in range(first, end):
            values, norms = backward(*next(ahead), alive)
            norm = norms.tolist()
            alive = [e for e in alive if math.isfinite(values[e]) and math.isfinite(norm[e])]
            if not alive:
                break
            opt.step(alive, [cfgs[e].lr * lr_factor(s, half) for e in alive], norms, cfg.clip)
        scores = evaluate_ensemble(ens, [d.val for d in datas], kind, tol) if alive else []
        opt.restore(snap)
        return [scores[e][0] if e in alive else None for e in range(size)]

    branch = half_run(cfg)
    checkpoint(0)
    for step in range(1, cfg.steps + 1):
        values, norms = backward(*next(draw), alive)
        norm = norms.tolist()
        alive = [e for e in alive if monitors[e].step(step, values[e], norm[e])]
        if not alive:
            break
        factor = lr_factor(step - 1, cfg)
        opt.step(alive, [cfgs[e].lr * factor for e in alive], norms, cfg.clip)
        if monitors[0].due(step):  # the members share one config, so one schedule of checkpoints
            checkpoint(step)
        if branch and step == branch[0]:
            draw, ahead = itertools.tee(draw)  # the branch reads the batches ahead, tee replays
            for monitor, value in zip(monitors, half_run_losses(ahead, alive), strict=True):
                monitor.record_half_run(value)

    val = evaluate_ensemble(ens, [d.val for d in datas], kind, tol)
    test = evaluate_ensemble(ens, [d.test for d in datas], kind, tol)
    seconds = (time.perf_counter() - start) / size
    # a diverged member's final scores are ignored: it stopped where it would have alone
    results = [m.result(val[e][1], test[e], seconds) for e, m in enumerate(monitors)]
    return results, ens.path

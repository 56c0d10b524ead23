"""A trial fitted to convergence: a second-order full-batch float64 fit (`engine.fit`) from
several initializations, each with its convergence certificate.

Where `train.train` asks how far AdamW gets in a number of steps, this asks what the network can
fit. The training set is fixed: N examples, `data_ratio` per trained parameter (at most
`max_examples`), drawn by the trial seed from a generative task's sampler, or the first N of a
fixed task's train split, so the training loss reads as approximation error and the test loss
checks it (the degree sweep's `generalization` check holds the two within 1.2x).

Every restart runs at most `steps` iterations and is certified: converged when doubling its
iterations lowered the training loss by less than `converge_tol` of it (`certify.converged`),
measured by continuing the same fit. The first check doubles from `certify.first_check(steps)`
(64 to 128 of 1,024); a fit that fails it doubles again and is checked again, up to `steps`, so
a fit that converges early stops there and the iterations go to those that need them; a fit at
float64's floor (`fit.FLOOR`; L-BFGS's `fit.STALLED_ITERATIONS`) ends there, certified. The
trial keeps the restart of least training loss (chosen on training data, never on test) and
stores every restart's losses beside it, so the spread over initializations is in the record.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch
from torch import nn

from blocklab.engine.certify import converged, first_check
from blocklab.engine.fit import FITTERS
from blocklab.engine.fit_batched import BatchedLevenbergMarquardt, converged_batched
from blocklab.engine.monitor import TrainResult, TrialMonitor
from blocklab.engine.train import evaluate, train
from blocklab.errors import UserError
from blocklab.specs import TrainConfig
from blocklab.tasks.base import Split, TaskData


def restart_seed(seed: int, restart: int) -> int:
    """The initialization seed of a trial's restart: restart 0 is the trial seed itself, so one
    restart initializes as an Adam trial of the same seed does."""
    if restart == 0:
        return seed
    return int(np.random.SeedSequence([seed, restart]).generate_state(1)[0])


def examples(cfg: TrainConfig, params: int, available: int | None) -> int:
    """N for a network of `params` trained parameters: `data_ratio` per parameter, at least
    `min_examples`, at most `max_examples` and the `available` examples of a fixed dataset (None:
    a sampler draws any)."""
    n = min(cfg.max_examples, max(cfg.min_examples, math.ceil(cfg.data_ratio * params)))
    return n if available is None else min(n, available)


def check_fits(data: TaskData, optimizer: str) -> None:
    """A second-order fit minimizes squared residuals of float features: regression alone."""
    if data.kind != "regression" or data.vocab is not None:
        raise UserError(
            f"--optimizer {optimizer} fits regression tasks on float features; this task is "
            f"{data.kind}{' on token ids' if data.vocab is not None else ''}: use --optimizer adam"
        )


def training_set(data: TaskData, n: int, seed: int) -> Split:
    """The fixed training examples of a fit, in float64 (see the module's docstring)."""
    if data.online:
        x, y = data.sample(n, torch.Generator().manual_seed(seed))  # (n, ...), (n, n_out)
    else:
        x, y = data.train.x[:n], data.train.y[:n]
    device = data.train.x.device
    return Split(x.to(device, torch.float64), y.to(device, torch.float64))


def _f64(split: Split) -> Split:
    return dataclasses.replace(split, x=split.x.double(), y=split.y.double())


@dataclasses.dataclass
class Restart:
    seed: int
    model: nn.Module
    result: TrainResult
    train_loss: float | None  # the final training MSE; None when the fit diverged
    gain: (
        float | None
    )  # what the last doubling of the iterations gained, a share (`certify.converged`)
    converged: bool
    iterations: int  # the iterations the fit ran (`certify.converged`)
    # the Jacobian's path (`jacobian.FlatParams.jacobian`); None: L-BFGS
    jacobian: str | None = None


@dataclasses.dataclass(frozen=True)
class FitData:
    """A fit's splits in float64: the fixed training set (`training_set`), validation and test."""

    train: Split
    val: Split
    test: Split


def fit_once(
    model: nn.Module, data: TaskData, sets: FitData, cfg: TrainConfig, seed: int, threshold
) -> Restart:
    """One restart: an optional Adam warm start (on `data`, as `train.train` trains), then
    at most `cfg.steps` iterations of the fitter, certified at each doubling (`certify`),
    validation checkpoints on the way (`TrialMonitor`)."""
    start = time.perf_counter()
    monitor = _warm(model, data, cfg, seed, threshold)
    fitter = FITTERS[cfg.optimizer](model, sets.train.x, sets.train.y)
    on_step = _on_step(monitor, fitter.sync, model, sets.val, data.kind)
    first = first_check(cfg.steps)
    cert = converged(fitter, first, first, cfg.converge_tol, on_step, until=cfg.steps)
    fitter.sync()
    path = fitter.flat.path if hasattr(fitter, "flat") else None
    return _finish(model, data, sets, monitor, cert, seed, start, path)


def fit_batched(
    models: list[nn.Module],
    data: list[TaskData],
    sets: list[FitData],
    cfgs: list[TrainConfig],
    seeds: list[int],
    thresholds: list[float],
) -> list[Restart]:
    """`fit_once` on networks of one architecture as one batched Levenberg-Marquardt computation
    (`fit_batched`), each member warmed, monitored and certified as it would be alone
    (`certify.certify`), on its own task data, sets and threshold (one entry per member): a
    rung's chains share one training set, the units of `fit_units` each fit their own."""
    start = time.perf_counter()
    members = list(zip(models, data, sets, cfgs, seeds, thresholds, strict=True))
    monitors = [_warm(m, d, c, s, t) for m, d, _, c, s, t in members]
    if all(s.train is sets[0].train for s in sets):  # one set: the shared path
        x, y = sets[0].train.x, sets[0].train.y
    else:
        x, y = [s.train.x for s in sets], [s.train.y for s in sets]
    fitter = BatchedLevenbergMarquardt(models, x, y)
    on_steps = [
        _on_step(mon, functools.partial(fitter.sync, k), m, s.val, d.kind)
        for k, (mon, (m, d, s, *_)) in enumerate(zip(monitors, members, strict=True))
    ]
    cfg = cfgs[0]
    first = first_check(cfg.steps)
    certs = converged_batched(fitter, first, first, cfg.converge_tol, on_steps, until=cfg.steps)
    fitter.sync()
    return [
        _finish(m, d, s, mon, cert, seed, start, fitter.path)
        for (m, d, s, _, seed, _), mon, cert in zip(members, monitors, certs, strict=True)
    ]


def _warm(model: nn.Module, data: TaskData, cfg: TrainConfig, seed: int, threshold):
    """The optional Adam warm start, the network in float64, and the fit's monitor."""
    if cfg.warm_start:
        warm = replace(cfg, optimizer="adam", steps=cfg.warm_start)
        train(model, data, warm, seed, threshold)
    model.double()
    return TrialMonitor(cfg, threshold)


def _on_step(monitor: TrialMonitor, sync: Callable, model: nn.Module, val: Split, kind: str):
    """A fit's `on_step`: the monitor reads the training MSE after i iterations (before the next
    one's update), with a validation checkpoint where one is due, of `model` once `sync` has put
    the fit's current parameters in it."""

    def on_step(i: int, loss: float) -> bool:
        if not monitor.step(i + 1, loss):
            return False
        if monitor.due(i):
            sync()  # the model holds the fit's current parameters
            monitor.checkpoint(i, evaluate(model, val, kind)[0])
        return True

    return on_step


def _finish(model, data: TaskData, sets: FitData, monitor, cert, seed, start, path) -> Restart:
    """A certified fit's record: validation at its end, the test scores, the certificate."""
    final = cert.second
    val_metric, test_scores = None, None
    if not monitor.diverged and math.isfinite(final):
        val_loss, val_metric = evaluate(model, sets.val, data.kind)
        monitor.checkpoint(cert.iterations, val_loss)  # where the fit ended
        test_scores = evaluate(model, sets.test, data.kind)
    result = monitor.result(val_metric, test_scores, time.perf_counter() - start)
    done = result.status == "done"
    gain = cert.gain if done else None
    passed = done and cert.passed
    return Restart(
        seed, model, result, final if done else None, gain, passed, cert.iterations, path
    )


def fit(
    first: nn.Module,
    make_model: Callable[[int], nn.Module],
    data: TaskData,
    cfg: TrainConfig,
    seed: int,
    threshold: float,
) -> tuple[nn.Module, TrainResult]:
    """Fit `cfg.restarts` networks, `first` (initialized by the trial seed, restart 0) and
    `make_model(init_seed)` for the others, on one fixed training set drawn by `seed`; return the
    restart of least training loss (the first one if all diverged) as a float32 model and its
    result, with the fit's fields filled in."""
    check_fits(data, cfg.optimizer)
    start = time.perf_counter()
    models = [first] + [make_model(restart_seed(seed, r)) for r in range(1, cfg.restarts)]
    params = sum(p.numel() for p in first.parameters() if p.requires_grad)
    available = None if data.online else len(data.train)
    train_set = training_set(data, examples(cfg, params, available), seed)
    sets = FitData(train_set, _f64(data.val), _f64(data.test))
    runs = [
        fit_once(m, data, sets, cfg, restart_seed(seed, r), threshold) for r, m in enumerate(models)
    ]
    return _best(runs, cfg, len(sets.train), start)


def _best(
    runs: list[Restart],
    cfg: TrainConfig,
    n: int,
    start: float,
    batched: bool = False,
    share: int = 1,
):
    """The restart (or chain) of least training loss, the first if all diverged, as a float32
    model with its result, every restart's losses and their spread in the result; its seconds
    the time since `start`, a `share` of it where that many trials' fits ran as one."""
    finished = [r for r in runs if r.train_loss is not None]
    best = min(finished, key=lambda r: r.train_loss) if finished else runs[0]
    losses = sorted(r.train_loss for r in finished)
    result = replace(
        best.result,
        seconds=(time.perf_counter() - start) / share,
        plateau_improvement=best.gain,
        optimizer=cfg.optimizer,
        examples=n,
        train_loss=best.train_loss,
        converged=best.converged,
        iterations=best.iterations,
        jacobian=best.jacobian,
        batched=batched,
        restarts=[
            {
                "seed": r.seed,
                "train_loss": r.train_loss,
                "test_loss": r.result.test_loss,
                "gain": r.gain,
                "converged": r.converged,
                "iterations": r.iterations,
            }
            for r in runs
        ],
        # how much worse than the best the median restart lands, a share of the best; None
        # with fewer than two finished restarts, which measure no spread
        restart_spread=(
            (float(np.median(losses)) - losses[0]) / losses[0]
            if len(losses) > 1 and losses[0] > 0
            else None
        ),
    )
    return copy.deepcopy(best.model).float(), result


def batch_chains(device: torch.device, cfg: TrainConfig) -> bool:
    """Whether a rung's chains run as one batched fit: Levenberg-Marquardt with two or more
    chains on a GPU, where `blocklab bench` measured batching pay (an H200, P = 433: 674
    certified fits per minute against 311 one at a time), not on a CPU (0.80-1.03x), whose
    fits are bound by work that batching does not shrink."""
    return device.type == "cuda" and cfg.optimizer == "lm" and cfg.restarts > 1


@dataclasses.dataclass(frozen=True)
class Rung:
    """One depth of a ladder: the best chain's network and result there, and whether every
    chain entered it with its function unchanged (`models.continue_from`)."""

    depth: int
    model: nn.Module
    result: TrainResult
    exact_start: bool
    source: nn.Module | None = None  # the best chain's float64 network, which "best" continues


def fit_ladder(
    depths: tuple[int, ...],
    make_model: Callable[[int, int], nn.Module],
    data: TaskData,
    cfg: TrainConfig,
    seed: int,
    threshold: float,
) -> list[Rung]:
    """`cfg.restarts` independent chains, each climbing `depths` in turn: the first rung fitted
    from the chain's initialization `make_model(depth, init_seed)` (after the optional Adam warm
    start), every later rung started from the chain's fitted rung below plus silenced layers
    (`models.continue_from`), so its function is unchanged and its fit can only lower the loss
    on the training set (staged fitting: Michaud, Liu, Tegmark 2023). A chain that diverged
    starts again from its initialization at the next rung. Each rung fits N = `data_ratio` x its
    parameters, drawn by `seed` (the online draws of smaller N are prefixes of larger ones), is
    certified like any fit (`fit_once`), and keeps its best chain by training loss. With
    `cfg.chains` "best", every chain instead continues the best fit of the rung below, and the
    chains differ in their added layers (each its own initialization). `fit_units.fit_ladders`
    climbs several ladders of one shape as one batched fit per rung."""
    climb = Climb(make_model, data, cfg, seed)
    for depth in depths:
        start = time.perf_counter()
        fits = climb.rung(depth)
        batched, k = batch_chains(fits.sets.train.x.device, cfg), len(fits.models)
        if batched:
            runs = fit_batched(
                fits.models, [data] * k, [fits.sets] * k, fits.cfgs, fits.inits, [threshold] * k
            )
        else:
            runs = [
                fit_once(m, data, fits.sets, c, i, threshold)
                for m, c, i in zip(fits.models, fits.cfgs, fits.inits, strict=True)
            ]
        climb.close(fits, runs, start, batched)
    return climb.rungs


@dataclasses.dataclass(frozen=True)
class RungFits:
    """One ladder's fits at one rung, before they run: each chain's network, config (a continued
    chain warms no more) and initialization seed, the rung's sets, and whether every chain
    entered with its function unchanged."""

    depth: int
    models: list[nn.Module]
    cfgs: list[TrainConfig]
    inits: list[int]
    sets: FitData
    exact: bool


class Climb:
    """One ladder between its rungs (`fit_ladder`): what each chain continues and the rungs
    fitted so far. `rung(depth)` makes the next rung's fits, `close` reads them once fitted."""

    def __init__(
        self, make_model: Callable[[int, int], nn.Module], data: TaskData, cfg: TrainConfig, seed
    ):
        check_fits(data, cfg.optimizer)
        self.make_model, self.data, self.cfg, self.seed = make_model, data, cfg, seed
        self.available = None if data.online else len(data.train)
        self.val, self.test = _f64(data.val), _f64(data.test)
        self.chains: list[nn.Module | None] = [None] * cfg.restarts
        self.rungs: list[Rung] = []

    def rung(self, depth: int) -> RungFits:
        from blocklab.models import continue_from

        cfg, exact = self.cfg, True
        if cfg.chains == "best" and self.rungs and self.rungs[-1].source is not None:
            # continue_from copies, never moves it
            self.chains = [self.rungs[-1].source] * cfg.restarts
        models, cfgs, inits = [], [], []
        for r in range(cfg.restarts):
            inits.append(restart_seed(self.seed, r))
            model = self.make_model(depth, inits[-1])
            below = self.chains[r]
            if below is not None:
                model.double()
                exact = continue_from(model, below) and exact
            models.append(model)
            # a chain's first fit (or its restart after a divergence) warms up; a continued one
            # starts where the rung below ended
            cfgs.append(cfg if below is None else replace(cfg, warm_start=0))
        params = sum(p.numel() for p in models[0].parameters() if p.requires_grad)
        train_set = training_set(self.data, examples(cfg, params, self.available), self.seed)
        return RungFits(depth, models, cfgs, inits, FitData(train_set, self.val, self.test), exact)

    def close(
        self, fits: RungFits, runs: list[Restart], start: float, batched: bool, share: int = 1
    ) -> Rung:
        """The rung fitted: each chain continues its fit (none where it diverged), and the rung
        keeps the best chain (`_best`; `share` as there)."""
        for r, run in enumerate(runs):
            self.chains[r] = run.model if run.train_loss is not None else None
        model, result = _best(runs, self.cfg, len(fits.sets.train), start, batched, share)
        finished = [r for r in runs if r.train_loss is not None]
        source = min(finished, key=lambda r: r.train_loss).model if finished else None
        self.rungs.append(Rung(fits.depth, model, result, fits.exact, source))
        return self.rungs[-1]

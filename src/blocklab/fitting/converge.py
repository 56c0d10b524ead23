"""A trial fitted to convergence: a second-order full-batch float64 fit (`fitting.fit`) from
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
stores every restart's losses beside it, so the spread over initializations is in the record:
each restart's validation loss at its end and its state at half its iterations (`half`: the
check where its last doubling started), which a robustness check reads as the fit of half the
iterations.
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

from blocklab.errors import UserError
from blocklab.fitting.batched import BatchedLevenbergMarquardt, converged_batched
from blocklab.fitting.certify import converged, first_check
from blocklab.fitting.fit import FITTERS
from blocklab.fitting.monitor import TrainResult, TrialMonitor
from blocklab.fitting.train import evaluate, train
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
    # what continues the fit to a larger budget (`continuation.chain_state`): the fitter's
    # state, its certificate and its monitor's, and its checks' readings (`_checks`), as the
    # fit ended
    state: dict | None = None
    val_loss: float | None = None  # the validation MSE where the fit ended; None: diverged
    # the fit at half its iterations (`_half`): {"iterations", "train_loss", "val_loss",
    # "test_loss"}; None where diverged, floored at its first check, or resumed without it
    half: dict | None = None


@dataclasses.dataclass(frozen=True)
class FitData:
    """A fit's splits in float64: the fixed training set (`training_set`), validation and test."""

    train: Split
    val: Split
    test: Split


def fit_once(
    model: nn.Module,
    data: TaskData,
    sets: FitData,
    cfg: TrainConfig,
    seed: int,
    threshold,
    resume: dict | None = None,
    halves: bool = True,
) -> Restart:
    """One restart: an optional Adam warm start (on `data`, as `train.train` trains), then
    at most `cfg.steps` iterations of the fitter, certified at each doubling (`certify`),
    validation checkpoints on the way (`TrialMonitor`), validation and test read at each check
    (`_checks`; not with `halves` False, which changes no number of the fit). `resume`, the
    state a smaller budget ended this fit with (`Restart.state`; `model` holds its parameters),
    continues it instead."""
    start = time.perf_counter()
    if resume is None:
        monitor = _warm(model, data, cfg, seed, threshold)
    else:
        model.double()
        monitor = TrialMonitor.restored(cfg, threshold, resume["monitor"])
    fitter = FITTERS[cfg.optimizer](model, sets.train.x, sets.train.y)
    if resume is not None:
        fitter.restore(resume["fitter"])
    on_step = _on_step(monitor, fitter.sync, model, sets.val, data.kind)
    # the readings a resumed fit made before it stopped (a state stored before they were kept
    # has none)
    checks = list((resume or {}).get("checks") or [])
    first = first_check(cfg.steps)
    cert = converged(
        fitter,
        first,
        first,
        cfg.converge_tol,
        on_step,
        until=cfg.steps,
        resume=None if resume is None else resume["cert"],
        on_check=_checks(checks, fitter.sync, model, sets, data.kind) if halves else None,
    )
    fitter.sync()
    state = {
        "fitter": fitter.state(),
        "cert": cert,
        "monitor": monitor.snapshot(),
        "checks": checks,
    }
    path = fitter.flat.path if hasattr(fitter, "flat") else None
    return _finish(model, data, sets, monitor, cert, seed, start, path, state)


def fit_batched(
    models: list[nn.Module],
    data: list[TaskData],
    sets: list[FitData],
    cfgs: list[TrainConfig],
    seeds: list[int],
    thresholds: list[float],
    halves: bool = True,
) -> list[Restart]:
    """`fit_once` on networks of one architecture as one batched Levenberg-Marquardt computation
    (`batched`), each member warmed, monitored, read at its checks and certified as it would be
    alone (`certify.certify`), on its own task data, sets and threshold (one entry per member): a
    rung's chains share one training set, the units of `units` each fit their own."""
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
    checks: list[list[dict]] = [[] for _ in members]
    on_checks = [
        _checks(c, functools.partial(fitter.sync, k), m, s, d.kind)
        for k, (c, (m, d, s, *_)) in enumerate(zip(checks, members, strict=True))
    ]
    cfg = cfgs[0]
    first = first_check(cfg.steps)
    certs = converged_batched(
        fitter,
        first,
        first,
        cfg.converge_tol,
        on_steps,
        until=cfg.steps,
        on_checks=on_checks if halves else None,
    )
    fitter.sync()
    out = []
    for k, ((m, d, s, _, seed, _), mon, cert) in enumerate(
        zip(members, monitors, certs, strict=True)
    ):
        state = {
            "fitter": fitter.member_state(k),
            "cert": cert,
            "monitor": mon.snapshot(),
            "checks": checks[k],
        }
        out.append(_finish(m, d, s, mon, cert, seed, start, fitter.path, state))
    return out


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


def _checks(readings: list[dict], sync: Callable, model: nn.Module, sets: FitData, kind: str):
    """A fit's `on_check` (`certify.certify`): at each check, append to `readings` the
    iterations scheduled so far, the training MSE and the validation and test MSE of `model`
    once `sync` has put the fit's current parameters in it. Two forward passes per check, of
    which a fit makes about log2(steps / first check). The fit is left as it was: `sync` writes
    the parameters the fitter already holds (its `run` wrote them too), and the model is put
    back in the mode it was in."""

    def on_check(done: int, loss: float) -> None:
        sync()
        mode = model.training
        val, test = evaluate(model, sets.val, kind)[0], evaluate(model, sets.test, kind)[0]
        model.train(mode)
        readings.append(
            {"iterations": done, "train_loss": loss, "val_loss": val, "test_loss": test}
        )

    return on_check


def _half(readings: list[dict], cert) -> dict | None:
    """The reading at half a fit's iterations: the check where its last doubling started,
    `cert.done / 2` (a fit that floored inside its last stretch ran fewer than `cert.done`:
    the check before it still). None where there is none: the fit floored or stopped at its
    first check, or was resumed from a state that kept no readings."""
    half = [r for r in readings if 2 * r["iterations"] == cert.done]
    return dict(half[-1]) if half else None


def _finish(
    model, data: TaskData, sets: FitData, monitor, cert, seed, start, path, state
) -> Restart:
    """A certified fit's record: validation at its end, the test scores, the certificate, the
    reading at half its iterations (`_half`, of the readings `state` holds), and the `state`
    that continues it (taken before this last checkpoint, which a longer fit would not have made
    here)."""
    final = cert.second
    val_loss, val_metric, test_scores = None, None, None
    if not monitor.diverged and math.isfinite(final):
        val_loss, val_metric = evaluate(model, sets.val, data.kind)
        monitor.checkpoint(cert.iterations, val_loss)  # where the fit ended
        test_scores = evaluate(model, sets.test, data.kind)
    result = monitor.result(val_metric, test_scores, time.perf_counter() - start)
    done = result.status == "done"
    gain = cert.gain if done else None
    passed = done and cert.passed
    half = _half(state.get("checks") or [], cert) if done else None
    return Restart(
        seed,
        model,
        result,
        final if done else None,
        gain,
        passed,
        cert.iterations,
        path,
        state,
        val_loss if done else None,
        half,
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
        restarts=[chain_record(r) for r in runs],
        # how much worse than the best the median restart lands, a share of the best; None
        # with fewer than two finished restarts, which measure no spread
        restart_spread=(
            (float(np.median(losses)) - losses[0]) / losses[0]
            if len(losses) > 1 and losses[0] > 0
            else None
        ),
    )
    return copy.deepcopy(best.model).float(), result


def chain_record(run: Restart) -> dict:
    """One restart's (or chain's) entry in its trial's `restarts`: its seed, final training,
    validation and test MSE, certificate, iterations, and its reading at half the iterations
    (`Restart.half`)."""
    return {
        "seed": run.seed,
        "train_loss": run.train_loss,
        "val_loss": run.val_loss,
        "test_loss": run.result.test_loss,
        "gain": run.gain,
        "converged": run.converged,
        "iterations": run.iterations,
        "half": None if run.half is None else dict(run.half),
    }


def batch_chains(device: torch.device, cfg: TrainConfig) -> bool:
    """Whether a rung's chains run as one batched fit: Levenberg-Marquardt with two or more
    chains on a GPU, where `blocklab bench` measured batching pay (an H200, P = 433: 674
    certified fits per minute against 311 one at a time), not on a CPU (0.80-1.03x), whose
    fits are bound by work that batching does not shrink."""
    return device.type == "cuda" and cfg.optimizer == "lm" and cfg.restarts > 1

"""A trial's curves and the rules read from them, one owner for every way of fitting a network
(the Adam loop of `train`, each member of an `ensemble`): the training losses between
checkpoints, the validation loss at the evaluation steps, the divergence rule, the step at which
the validation loss first reached the threshold, the plateau measure, and the stored record.

A loop hands the monitor what it measured and asks what follows from it; it never sets the
monitor's state, so a trial trained alone, in an ensemble or by another fitter is read by the
same rules and stores the same fields.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from blocklab.specs import TrainConfig


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
    # (`TrialMonitor.plateau`); near 0 when training had stopped improving
    plateau_improvement: float | None = None
    half_val_loss: float | None = None  # wsd: the annealed loss of the run of half the steps
    # a second-order fit's (`fitting.converge`): the optimizer, the fixed training set's size, the
    # final training MSE, its certificate and the iterations it took, every restart's losses and
    # how far they spread
    optimizer: str | None = None
    examples: int | None = None
    train_loss: float | None = None
    converged: bool | None = None
    iterations: int | None = None
    restarts: list[dict[str, Any]] | None = None
    restart_spread: float | None = None
    # how the fit's Jacobian was built ("layers" or "examples": `jacobian.FlatParams.jacobian`; None
    # for L-BFGS, which forms none) and whether its restarts ran as one batched computation
    jacobian: str | None = None
    batched: bool | None = None


FIT_FIELDS = (
    "optimizer",
    "examples",
    "train_loss",
    "converged",
    "iterations",
    "restarts",
    "restart_spread",
    "jacobian",
    "batched",
)


PLATEAU_WINDOW = 0.25  # the share of training, at the end, over which a plateau is read
SMOOTH = 3  # validation points averaged into one smoothed value
# a starting loss near 0 (a task the network already fits) would make any noise a blow-up
START_FLOOR = 1e-3


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


def eval_steps(steps: int, points: int) -> list[int]:
    """Steps after which the validation loss is measured, always including the start and the end."""
    return sorted({0, steps, *(round(steps * i / points) for i in range(1, points + 1))})


def diverges(loss: float, start: float, blowup: float, grad_norm: float = 0.0) -> bool:
    """The divergence rule: a non-finite loss or gradient norm, or a loss above `blowup` times
    the starting loss (floored at START_FLOOR). Past it the weights are unusable, and continuing
    would spend the trial's budget on NaNs."""
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        return True
    return loss > blowup * max(start, START_FLOOR)


def diverging(
    losses: torch.Tensor, starts: torch.Tensor, blowup: float, grad_norms: torch.Tensor
) -> torch.Tensor:
    """`diverges` for many trials at once where their losses live, (E,) -> (E,) bool, nothing
    read back to the host. In float64, as `diverges` reads each float32 value, so the two agree
    value for value (tests/fitting/test_monitor.py)."""
    losses, starts, grad_norms = losses.double(), starts.double(), grad_norms.double()
    finite = torch.isfinite(losses) & torch.isfinite(grad_norms)
    return ~finite | (losses > blowup * starts.clamp(min=START_FLOOR))


class TrialMonitor:
    """One trial's bookkeeping. A loop calls `step` with each training loss (before the update
    it leads to) and stops when it returns False, `checkpoint` with the validation loss after
    the steps `due` names, `record_half_run` under wsd, and `result` at the end."""

    def __init__(self, cfg: TrainConfig, threshold: float):
        self.cfg, self.threshold = cfg, threshold
        self.curves: dict[str, list[float]] = {"step": [], "train_loss": [], "val_loss": []}
        self._due = set(eval_steps(cfg.steps, cfg.eval_points))  # looked up every step
        self._window: list[float] = []  # training losses since the last checkpoint
        self._start: float | None = None
        self._reached: int | None = None
        self._diverged_at: int | None = None
        # validation loss of the half-length run branched off the stable phase (wsd, `half_run`)
        self._half_val_loss: float | None = None

    # what `snapshot` keeps: everything but the config and threshold, which a continued fit
    # takes from its own run (the checkpoints it makes from then on follow its own budget)
    KEPT = ("curves", "_window", "_start", "_reached", "_diverged_at", "_half_val_loss")

    def snapshot(self) -> dict:
        """The monitor's readings so far, plain values only, for `restored` to continue."""
        return copy.deepcopy({name: getattr(self, name) for name in self.KEPT})

    @classmethod
    def restored(cls, cfg: TrainConfig, threshold: float, snapshot: dict) -> TrialMonitor:
        """A monitor continuing the readings of `snapshot` under `cfg` (`snapshot`)."""
        monitor = cls(cfg, threshold)
        for name, value in copy.deepcopy(snapshot).items():
            setattr(monitor, name, value)
        return monitor

    @property
    def diverged(self) -> bool:
        return self._diverged_at is not None

    def due(self, step: int) -> bool:
        """Whether the validation loss is measured after `step` (`eval_steps`)."""
        return step in self._due

    def step(self, step: int, loss: float, grad_norm: float = 0.0) -> bool:
        """Take a training loss, and the gradient norm a clipping fitter read; True to go on,
        False (the trial diverged at `step`) when the divergence rule says it blew up."""
        self._start = loss if self._start is None else self._start
        if diverges(loss, self._start, self.cfg.blowup, grad_norm):
            self._diverged_at = step
            return False
        self._window.append(loss)
        return True

    def checkpoint(self, step: int, val_loss: float) -> None:
        """The validation loss after `step`, beside the mean training loss since the last one."""
        w = self._window
        self.curves["step"].append(step)
        self.curves["val_loss"].append(val_loss)
        self.curves["train_loss"].append(sum(w) / len(w) if w else float("nan"))
        w.clear()
        if self._reached is None and val_loss <= self.threshold:
            self._reached = step

    def record_half_run(self, val_loss: float | None) -> None:
        """The annealed validation loss of the run of half the steps (`train.half_run`); None
        when that run went non-finite."""
        self._half_val_loss = val_loss

    def plateau(self) -> float | None:
        """How much the end of training still improved the validation loss, as a share of the
        final loss. Under wsd: the annealed loss of the half-length run (`train.half_run`) minus
        this run's, so 0.02 means twice the steps lowered the loss by 2%. Under cosine, whose
        last quarter anneals: the fall of the smoothed curve over that quarter
        (`plateau_improvement`)."""
        if self.cfg.schedule != "wsd":
            return plateau_improvement(self.curves["step"], self.curves["val_loss"])
        half, end = self._half_val_loss, self.curves["val_loss"][-1]
        if half is None or not math.isfinite(half) or not end > 0:
            return None
        return (half - end) / end

    def result(
        self, val_metric: float | None, test: tuple[float, float] | None, seconds: float
    ) -> TrainResult:
        """The outcome from the final validation metric and test (loss, metric): diverged if it
        blew up in training (the scores are then ignored) or its final scores are not finite."""
        done = self._diverged_at is None and test is not None
        ok = done and all(math.isfinite(v) for v in (val_metric, test[1]))
        if done and not ok:
            self._diverged_at = self.cfg.steps
        return TrainResult(
            "done" if ok else "diverged",
            self._diverged_at,
            val_metric if ok else None,
            test[1] if ok else None,
            test[0] if ok else None,
            self._reached,
            self.threshold,
            self.curves,
            seconds,
            self.plateau() if ok else None,
            self._half_val_loss if ok else None,
        )


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
    if result.optimizer is not None:  # an Adam trial's record keeps the fields it always had
        metrics.update({k: getattr(result, k) for k in FIT_FIELDS})
    return {"status": result.status, "metrics": metrics, "curves": result.curves}


READ_EVERY = 64  # steps between host reads of the losses, besides the checkpoints


class DeviceMonitors:
    """Many trials' monitors fed from the device: the training losses and gradient norms of the
    steps since the last read stay where they were computed, beside the mask `live` that the
    divergence rule (`diverging`) updates there, so a loop can freeze a trial at the step its
    monitor will later say it diverged without reading anything back. `read` hands the steps to
    the monitors in one transfer; their verdicts and the mask agree (the same rule, value for
    value)."""

    def __init__(self, monitors: list[TrialMonitor], blowup: float, device: torch.device):
        self.monitors, self.blowup = monitors, blowup
        self.live = torch.ones(len(monitors), dtype=torch.bool, device=device)  # (E,)
        self.alive = list(range(len(monitors)))  # the host's view, as of the last read
        self.starts: Tensor | None = None  # (E,) each member's first training loss
        self.steps: list[int] = []
        self.values: list[Tensor] = []

    def add(self, step: int, losses: Tensor, norms: Tensor) -> None:
        losses = losses.detach()
        self.starts = losses if self.starts is None else self.starts
        self.live &= ~diverging(losses, self.starts, self.blowup, norms)
        self.steps.append(step)
        self.values.append(torch.stack([losses.double(), norms.double()]))  # (2, E)

    def read_due(self, step: int) -> bool:
        """Whether `step` ends a stretch of READ_EVERY steps, besides the checkpoints: a loop
        whose every trial diverged learns it within that many steps."""
        return step % READ_EVERY == 0

    def read(self) -> list[int]:
        """Hand the pending steps to the monitors, in order; the members still training."""
        if self.steps:
            read = torch.stack(self.values).tolist()  # (steps, 2, E): the one transfer
            monitors = self.monitors
            for step, (losses, norms) in zip(self.steps, read, strict=True):
                self.alive = [e for e in self.alive if monitors[e].step(step, losses[e], norms[e])]
            self.steps, self.values = [], []
        return self.alive

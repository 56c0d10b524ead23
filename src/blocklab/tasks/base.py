"""Task interface: a seeded generator of train/val/test splits with normalized targets."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from blocklab import options


@dataclass(frozen=True)
class Split:
    x: torch.Tensor  # (n, *input_shape) float32
    y: torch.Tensor  # (n, n_out) float32 for regression, (n,) int64 for classification

    def __len__(self) -> int:
        return self.x.shape[0]


@dataclass(frozen=True)
class TaskData:
    train: Split
    val: Split  # carved from the training data; used to choose learning rates
    test: Split
    kind: Literal["regression", "classification"]
    n_out: int  # regression outputs, or number of classes
    info: dict[str, Any] = field(
        default_factory=dict
    )  # facts worth reporting (balance, bounds, ...)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])


class Task(abc.ABC):
    """Subclass, decorate with `@TASKS.register`, define `Options` (a frozen dataclass) and `make`.

    Regression tasks are scored by test MSE on standardized targets (lower is better; predicting the
    mean scores 1.0); classification tasks by test accuracy (higher is better).
    """

    name: ClassVar[str]
    kind: ClassVar[Literal["regression", "classification"]]
    Options: ClassVar[type]
    # steps-to-threshold reads the validation loss curve against this loss unless the run states one
    default_threshold: ClassVar[float]
    # options that make the task small enough for the contract tests
    small_options: ClassVar[dict[str, Any]] = {}
    # False for fixed benchmarks whose data do not change with the seed
    seed_dependent: ClassVar[bool] = True

    def __init__(self, **opts: Any):
        self.options = options.build(self.Options, opts, what=f"task {self.name!r}")

    @abc.abstractmethod
    def make(self, seed: int) -> TaskData:
        """Generate the splits; the same seed gives the same data."""

    @property
    def threshold(self) -> float:
        """The loss that counts as converged; a task may make it depend on its options."""
        return self.default_threshold

    @property
    def metric(self) -> str:
        return "mse" if self.kind == "regression" else "accuracy"

    @property
    def higher_is_better(self) -> bool:
        return self.kind == "classification"


def standardize(train: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Scale every split by the training split's per-column mean and std (no test leakage)."""
    mean = train.mean(0, keepdim=True)
    std = train.std(0, keepdim=True).clamp_min(1e-8)
    return tuple((t - mean) / std for t in (train, *others))


def split_val(x: torch.Tensor, y: torch.Tensor, n_val: int, generator: torch.Generator):
    """Carve a validation split off the training data by a seeded permutation."""
    perm = torch.randperm(x.shape[0], generator=generator)
    val, train = perm[:n_val], perm[n_val:]
    return Split(x[train], y[train]), Split(x[val], y[val])


def regression_splits(
    x: torch.Tensor, y: torch.Tensor, n_train: int, n_val: int, noise: float, g: torch.Generator
) -> tuple[Split, Split, Split, torch.Tensor]:
    """Split (train, val, test) in order; label noise (a fraction of the target std) goes on train
    and val only, so the test score measures the target itself; targets standardized by train.

    Returns the splits and the per-output target std before standardization."""
    target_std = y[:n_train].std(0)  # (n_out,)
    fit = n_train + n_val
    y[:fit] += noise * target_std * torch.randn(fit, y.shape[1], generator=g, dtype=y.dtype)
    sizes = [n_train, n_val, x.shape[0] - fit]
    ys = [t.float() for t in standardize(*y.split(sizes))]
    train, val, test = (Split(a, b) for a, b in zip(x.split(sizes), ys, strict=True))
    return train, val, test, target_std

"""Task interface: a seeded generator of train/val/test splits with normalized targets."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F

from blocklab import options

# the label of a position that has no target (a STOP token, a prompt position): not scored, not
# trained on. PyTorch's cross-entropy ignores this value by default
IGNORE = -100


@dataclass(frozen=True)
class Split:
    # x: (n, F) for vector tasks, (n, T, F) for sequence tasks; float32. Token tasks
    #    (TaskData.vocab set) hold token ids instead: (n, T) int64
    # y: (n, n_out) float32 for regression, (n,) int64 for classification; per-position targets
    #    carry the position axis too: (n, T, n_out) and (n, T), a label IGNORE where a position
    #    has no target
    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return self.x.shape[0]


@dataclass(frozen=True)
class TaskData:
    train: Split
    val: Split  # carved from the training data; used to choose learning rates
    test: Split
    kind: Literal["regression", "classification"]
    n_out: int  # regression outputs, or number of classes
    info: dict[str, Any] = field(default_factory=dict)  # facts worth reporting (balance, bounds)
    sequence: bool = False  # inputs are (n, T, F): T positions of F features
    per_position: bool = False  # a target per position (else one per sequence)
    # regression scored as the fraction of output vectors within this L2 distance of the target
    tolerance: float | None = None
    # maps inputs (n, ...) to outputs in the model's format (logits or values) that score
    # perfectly; the contract tests check it, so a task's labels and its definition agree
    oracle: Callable[[torch.Tensor], torch.Tensor] | None = None
    # token tasks: x holds ids in [0, vocab) that the network embeds, not features
    vocab: int | None = None
    # per-position targets read from the last position's state alone (`models.Net`'s bottleneck):
    # the sequence must be compressed into one vector
    bottleneck: bool = False
    # generative tasks: (n, generator) -> n fresh training examples (x, y), distributed as the
    # train split (same target, same standardization, same label noise). Training draws every
    # batch from it, so the test loss measures approximation and optimization, not overfitting;
    # the train split then only fixes the standardization
    sample: Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]] | None = None

    @property
    def online(self) -> bool:
        return self.sample is not None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])

    @property
    def seq_len(self) -> int | None:
        return self.train.x.shape[1] if self.sequence else None


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

    # regression tasks that score within a tolerance (TaskData.tolerance) report accuracy
    scored_by_tolerance: ClassVar[bool] = False
    # sequence tasks give (n, T, F) inputs and have a `seq_len` option
    sequence: ClassVar[bool] = False

    @property
    def seq_len(self) -> int | None:
        """Positions per example, known before any data are made (blocks may depend on it)."""
        return self.options.seq_len if self.sequence else None

    @property
    def metric(self) -> str:
        return "mse" if self.kind == "regression" and not self.scored_by_tolerance else "accuracy"

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "accuracy"


def score_sums(
    out: torch.Tensor, y: torch.Tensor, kind: str, tolerance: float | None = None
) -> torch.Tensor:
    """`score` as a float64 tensor (3,) on the outputs' device: sums that add up over batches
    and are read back once, not three times a batch."""
    if kind == "classification":
        logits, labels = out.reshape(-1, out.shape[-1]), y.reshape(-1)  # (units, C), (units,)
        scored = labels != IGNORE  # unscored units add nothing and do not count
        loss = F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum")
        hits = ((logits.argmax(-1) == labels) & scored).sum()
        return torch.stack([loss.double(), hits.double(), scored.sum().double()])
    diff = (out - y).reshape(-1, y.shape[-1])  # (units, n_out)
    sq = diff.double().square().sum() / diff.shape[1]
    units = diff.new_full((), diff.shape[0], dtype=torch.float64)  # filled there, not copied
    if tolerance is None:
        return torch.stack([sq, sq, units])
    return torch.stack([sq, (diff.norm(dim=-1) <= tolerance).sum().double(), units])


def score(
    out: torch.Tensor, y: torch.Tensor, kind: str, tolerance: float | None = None
) -> tuple[float, float, int]:
    """(summed loss, summed metric, units) of outputs against targets.

    A unit is one target: an example, or one position of a per-position task. The loss is MSE
    per output (regression) or cross-entropy (classification); the metric is squared error per
    output, or 1 per correct unit (argmax for classes, within `tolerance` for regression)."""
    loss, metric, units = score_sums(out, y, kind, tolerance).tolist()
    return loss, metric, int(units)


def loss(out: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    """The training loss, the mean over units of what `score` sums."""
    if kind == "classification":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), ignore_index=IGNORE)
    return F.mse_loss(out, y)


def member_losses(out: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    """`loss` for each member of an ensemble: outputs and targets (E, B, ...) -> (E,), the mean
    squared error per output or cross-entropy per scored unit. Nothing is read back to the host
    (whether any unit is unscored included), so a GPU step does not wait here."""
    size = out.shape[0]
    if kind != "classification":
        return (out - y).square().reshape(size, -1).mean(1)
    labels = y.reshape(-1)  # (E * units,)
    scored = labels != IGNORE
    units = UnitCrossEntropy.apply(out.reshape(-1, out.shape[-1]), labels.clamp_min(0))
    units = torch.where(scored, units, 0.0).view(size, -1)  # (E, units): ignored rows get no grad
    return units.sum(1) / scored.view(size, -1).sum(1).clamp_min(1)


def underflow_free(logits: torch.Tensor, p: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """-log p_y of every row (n, C) -> (n,) from its logits and softmax, without the underflow of
    a tiny p_y: log sum exp z - z_y, the log-sum read off the largest probability (at least 1/C,
    so it never underflows) as max z - log p_max."""
    top, at = logits.max(-1)  # (n,), (n,)
    largest = p.gather(-1, at.unsqueeze(-1)).squeeze(-1)
    return top - largest.log() - logits.gather(-1, rows).squeeze(-1)


class UnitCrossEntropy(torch.autograd.Function):
    """F.cross_entropy(logits, labels, reduction="none") in fewer passes over the logits (n, C):
    one softmax, kept, whose gradient (softmax - one-hot) * g is then formed in place. An
    ensemble's language-model logits (E * B * T, vocab) are its largest tensor; the generic loss
    (log-softmax, a zero-filled gradient, a scatter, the log-softmax backward) passes over them
    more often and took two to three times as long on a CPU (16 x 1024 x 256 logits)."""

    @staticmethod
    # under autocast the loss runs in float32, as F.cross_entropy does there
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(logits, dim=-1)  # (n, C)
        rows = labels.unsqueeze(-1)  # (n, 1)
        picked = p.gather(-1, rows).squeeze(-1)  # (n,)
        losses = -picked.log()
        # a label far below the top logit underflows its probability: those rows go the long way
        tiny = picked < 1e-30
        if logits.is_cuda:  # asking whether any row is tiny would make the GPU wait: all go both
            losses = torch.where(tiny, underflow_free(logits, p, rows), losses)
        elif tiny.any():
            z = logits[tiny]  # (k, C)
            losses[tiny] = torch.logsumexp(z, -1) - z.gather(-1, rows[tiny]).squeeze(-1)
        ctx.save_for_backward(p, rows)
        ctx.spent = False
        return losses

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad: torch.Tensor):  # (n,)
        if ctx.spent:  # the softmax was overwritten by the first backward
            raise RuntimeError("UnitCrossEntropy backpropagates once (no retain_graph reuse)")
        ctx.spent = True
        p, rows = ctx.saved_tensors
        g = grad.unsqueeze(-1)  # (n, 1)
        out = p.mul_(g)  # (n, C): softmax * g
        out.scatter_add_(-1, rows, -g)  # minus g at each label
        return out, None


def moments(train: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column mean and std of the training split, (1, F) each: what targets are scaled by."""
    return train.mean(0, keepdim=True), train.std(0, keepdim=True).clamp_min(1e-8)


def split_val(x: torch.Tensor, y: torch.Tensor, n_val: int, generator: torch.Generator):
    """Carve a validation split off the training data by a seeded permutation."""
    perm = torch.randperm(x.shape[0], generator=generator)
    val, train = perm[:n_val], perm[n_val:]
    return Split(x[train], y[train]), Split(x[val], y[val])


def regression_splits(
    x: torch.Tensor,
    y: torch.Tensor,
    n_train: int,
    n_val: int,
    noise: float,
    g: torch.Generator,
    target: Callable[[torch.Tensor], torch.Tensor] | None = None,
    inputs: Callable[[int, torch.Generator], torch.Tensor] | None = None,
) -> tuple[Split, Split, Split, torch.Tensor, Callable | None]:
    """Split (train, val, test) in order; label noise (a fraction of the target std) goes on train
    and val only, so the test score measures the target itself; targets standardized by train.

    With `target` (raw inputs -> raw outputs) and `inputs` ((n, generator) -> raw inputs), also
    returns a sampler of fresh training examples (`TaskData.sample`) that draws, labels, adds
    noise and standardizes exactly as the train split was. Returns the splits, the per-output
    target std before standardization, and the sampler (or None)."""
    target_std = y[:n_train].std(0)  # (n_out,)
    fit = n_train + n_val
    y[:fit] += noise * target_std * torch.randn(fit, y.shape[1], generator=g, dtype=y.dtype)
    mean, std = moments(y[:n_train])  # (1, n_out) each
    sizes = [n_train, n_val, x.shape[0] - fit]
    ys = [((t - mean) / std).float() for t in y.split(sizes)]
    train, val, test = (Split(a, b) for a, b in zip(x.split(sizes), ys, strict=True))
    if target is None or inputs is None:
        return train, val, test, target_std, None

    def sample(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        xs = inputs(n, gen)  # (n, F) float32
        ys = target(xs)  # (n, n_out) float64
        ys = ys + noise * target_std * torch.randn(ys.shape, generator=gen, dtype=ys.dtype)
        return xs, ((ys - mean) / std).float()

    return train, val, test, target_std, sample



def check_generated(options: Any, *sizes: str) -> None:
    """The ranges every generated target's options share: each of `sizes` and the splits
    (`n_train`, `n_val`, `n_test`) at least 1, the label noise (`noise`) at least 0."""
    from blocklab.errors import UserError

    for key in (*sizes, "n_train", "n_val", "n_test"):
        if getattr(options, key) < 1:
            raise UserError(f"{key} must be >= 1, got {getattr(options, key)}")
    if options.noise < 0:
        raise UserError(f"noise must be >= 0, got {options.noise}")


def make_task(name: str, **opts) -> Task:
    """The registered task `name` (`blocklab.tasks.TASKS`, plugins' included) with `opts`."""
    from blocklab.tasks import TASKS  # the registry its entries, this module's subclasses, fill

    return TASKS.get(name)(**opts)

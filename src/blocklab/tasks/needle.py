"""One large score among many small ones (seed 004, "Why softmax attention outperforms linear
attention"): softmax attention picks the needle out, linear attention averages it away.

Seed 004's Definition 3.8 gives two datasets: D0, where every token's score <w, x_t> against a
direction w stays small, and D1, where exactly one token's score is large and the rest stay small.
Its formulas were lost in extraction, so this construction follows Definition 3.8 in spirit rather
than to the letter: token x_t = s_t w + sigma P_perp g_t with g_t ~ N(0, I) and P_perp the projector
orthogonal to w, so the score is exactly s_t. Background scores are s_t ~ Uniform[-tau0, tau0]; a D1
sequence sets s = tau1 > tau0 at one uniformly chosen position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS
from blocklab.tasks.base import Split, Task, TaskData

MARGIN = 10.0  # oracle logit margin


def sample_direction(dim: int, g: torch.Generator) -> torch.Tensor:
    """A uniform unit vector w: float64 (D,)."""
    w = torch.randn(dim, generator=g, dtype=torch.float64)
    return w / w.norm()


def sequences(
    n: int,
    w: torch.Tensor,
    seq_len: int,
    tau0: float,
    tau1: float,
    sigma: float,
    g: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """n sequences, exactly n // 2 of them D1 (label 1), in shuffled order.

    Returns x float32 (n, T, D) and labels int64 (n,)."""
    w = w.to(torch.float64)
    labels = (torch.arange(n) < n // 2).long()[torch.randperm(n, generator=g)]  # (n,)
    s = (2 * torch.rand(n, seq_len, generator=g, dtype=torch.float64) - 1) * tau0  # (n, T)
    where = torch.randint(0, seq_len, (n,), generator=g)  # (n,) the needle's position in D1
    rows = labels.nonzero().squeeze(1)
    s[rows, where[rows]] = tau1
    noise = torch.randn(n, seq_len, len(w), generator=g, dtype=torch.float64)  # (n, T, D)
    noise = noise - (noise @ w)[..., None] * w  # P_perp g: leaves the score <w, x_t> = s_t
    x = s[..., None] * w + sigma * noise  # (n, T, D)
    return x.float(), labels


@TASKS.register
class Needle(Task):
    """Classify a sequence as D0 (every score <w, x_t> <= tau0) or D1 (one score equals tau1).

    The seed draws w first, then the data, so `direction(seed)` rebuilds w alone (the random-weight
    experiment aims attention with it) and `sample` draws fresh evaluation sets."""

    kind = "classification"
    sequence = True
    default_threshold = 0.25  # cross-entropy, well under chance (ln 2 = 0.69)
    small_options: ClassVar[dict] = {"n_train": 256, "n_val": 64, "n_test": 128}

    @dataclass(frozen=True)
    class Options:
        seq_len: int = 16  # T
        dim: int = 8  # D
        tau0: float = 1.0  # background scores lie in [-tau0, tau0]
        tau1: float = 3.0  # the needle's score
        sigma: float = 1.0  # scale of the components orthogonal to w
        n_train: int = 8192
        n_val: int = 1024
        n_test: int = 2048

        def __post_init__(self):
            for key in ("seq_len", "dim"):
                if getattr(self, key) < 1:
                    raise UserError(f"{key} must be >= 1, got {getattr(self, key)}")
            if self.tau0 < 0:
                raise UserError(f"tau0 must be >= 0, got {self.tau0}")
            if self.tau1 <= self.tau0:
                raise UserError(f"tau1 must exceed tau0 = {self.tau0}, got {self.tau1}")
            if self.sigma < 0:
                raise UserError(f"sigma must be >= 0, got {self.sigma}")
            for key in ("n_train", "n_val", "n_test"):
                if getattr(self, key) < 2:  # both classes in every split
                    raise UserError(f"{key} must be >= 2, got {getattr(self, key)}")

    def direction(self, seed: int) -> torch.Tensor:
        """The unit direction w of `make(seed)`: float64 (D,)."""
        return sample_direction(self.options.dim, torch.Generator().manual_seed(seed))

    def sample(
        self, n: int, w: torch.Tensor, g: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """n fresh sequences, n // 2 of them D1, for direction w: x float32 (n, T, D), labels
        int64 (n,)."""
        o = self.options
        return sequences(n, w, o.seq_len, o.tau0, o.tau1, o.sigma, g)

    def make(self, seed: int) -> TaskData:
        o = self.options
        g = torch.Generator().manual_seed(seed)
        w = sample_direction(o.dim, g)  # (D,) drawn before the data
        train, val, test = (Split(*self.sample(n, w, g)) for n in (o.n_train, o.n_val, o.n_test))
        cut = (o.tau0 + o.tau1) / 2  # midway between the largest D0 score and the needle

        def oracle(x: torch.Tensor) -> torch.Tensor:
            has_needle = (x.double() @ w).amax(-1) > cut  # (n,)
            return MARGIN * (2 * torch.nn.functional.one_hot(has_needle.long(), 2).float() - 1)

        info = {
            "direction": w.tolist(),
            "tau0": o.tau0,
            "tau1": o.tau1,
            "sigma": o.sigma,
            "seq_len": o.seq_len,
            "dim": o.dim,
            "balance": float(train.y.double().mean()),  # fraction of D1 sequences, train split
        }
        return TaskData(
            train, val, test, self.kind, 2, info, sequence=True, per_position=False, oracle=oracle
        )

"""Targets of a chosen separation rank that favour no polynomial degree (seed 000 section 4.3,
seed 001 eq. 5): y(x1, x2) = sum_{r <= R} g_r(x1) h_r(x2) / r.

Each g_r and h_r is a random trigonometric polynomial, sum_{k <= K} a_k cos(k w x) + b_k sin(k w x)
with w = pi / sqrt 3 (one period over the input interval), coefficients N(0, 1) / k, scaled to unit
variance on the inputs. With K >= R / 2 frequencies the R functions g_r are linearly independent
(and so are the h_r) for almost every draw, so sep(y; {x1}, {x2}) is exactly R:
`blocklab.measures.separation_rank(task.target_fn(seed), 2, 1, vector=True)` measures it. None of
them is a polynomial, so no degree d represents y exactly at any depth: each approximates it by
polynomials of its own degrees d^L, and the target's rank, not its degree, is what it sets.

`poly_target` with n_in = 2 is no such family: its R monomials x1^a x2^b merge into a matrix of
(max_exponent - min_exponent + 1)^2 entries, so its rank is at most 2 or 3 whatever R, and its
total degree (at most 2 max_exponent) is reached exactly by a degree-4 layer, or two of degree 2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS
from blocklab.tasks.base import Task, TaskData, check_generated, regression_splits

OMEGA = math.pi / math.sqrt(3.0)  # cos(k OMEGA x) runs k whole half-periods over [-sqrt 3, sqrt 3]


@TASKS.register
class Separable(Task):
    """Inputs (x1, x2) uniform on [-sqrt 3, sqrt 3]^2 (unit variance), as the relu teachers';
    targets y = sum_{r <= R} g_r(x1) h_r(x2) / r, standardized by train statistics.

    The seed draws the functions first, then the data, so `target_fn(seed)` rebuilds the exact
    function behind `make(seed)`. With `online` (the default) training draws fresh inputs every
    step (`TaskData.sample`), as for `teacher`.
    """

    kind = "regression"
    default_threshold = 0.5
    small_options: ClassVar[dict] = {"n_train": 256, "n_val": 64, "n_test": 128}

    @dataclass(frozen=True)
    class Options:
        rank: int = 4  # R, the separation rank over ({x1}, {x2})
        frequencies: int = 4  # K, each factor's highest frequency: its smoothness
        n_train: int = 65536
        n_val: int = 2048
        n_test: int = 8192
        noise: float = 0.0  # label noise std on train/val, as a fraction of the target std
        online: bool = True  # fresh training inputs every step; False: the fixed train split

        def __post_init__(self):
            if self.rank < 1:
                raise UserError(f"rank must be >= 1, got {self.rank}")
            if 2 * self.frequencies < self.rank:
                raise UserError(
                    f"rank {self.rank} needs at least {math.ceil(self.rank / 2)} frequencies "
                    f"(2 K functions span at most 2 K dimensions), got {self.frequencies}"
                )
            check_generated(self)

    def _factors(self, g: torch.Generator) -> torch.Tensor:
        """(2, R, 2K) coefficients: [0] the g_r, [1] the h_r, over (cos k w x, sin k w x)_k."""
        o = self.options
        k = torch.arange(1, o.frequencies + 1, dtype=torch.float64).repeat(2)  # (2K,)
        c = torch.randn(2, o.rank, 2 * o.frequencies, generator=g, dtype=torch.float64) / k
        # on the uniform inputs each cos and sin has mean 0 and variance 1/2, all orthogonal
        return c / (c.square().sum(-1, keepdim=True) / 2).sqrt()

    def target_fn(self, seed: int) -> Callable[[torch.Tensor], torch.Tensor]:
        """The raw (unstandardized) target of `make(seed)`: float64 (B, 2) -> (B,)."""
        return _evaluator(self._factors(torch.Generator().manual_seed(seed)))

    def make(self, seed: int) -> TaskData:
        o = self.options
        g = torch.Generator().manual_seed(seed)
        fn = _evaluator(self._factors(g))  # drawn before the data

        n = o.n_train + o.n_val + o.n_test
        x = self._inputs(n, g)  # (n, 2) float32
        y = fn(x)[:, None]  # (n, 1), float64 from the float32 inputs the model sees
        train, val, test, target_std, sample = regression_splits(
            x, y, o.n_train, o.n_val, o.noise, g, lambda xs: fn(xs)[:, None],
            self._inputs if o.online else None,
        )  # fmt: skip
        info = {"separation_rank": o.rank, "target_std_before_norm": float(target_std)}
        return TaskData(train, val, test, self.kind, 1, info, sample=sample)

    def _inputs(self, n: int, g: torch.Generator) -> torch.Tensor:
        return (2 * torch.rand(n, 2, generator=g) - 1) * math.sqrt(3.0)  # (n, 2)


def _evaluator(factors: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    rank, terms = factors.shape[1], factors.shape[2] // 2
    k = torch.arange(1, terms + 1, dtype=torch.float64) * OMEGA  # (K,)
    weight = 1.0 / torch.arange(1, rank + 1, dtype=torch.float64)  # (R,)

    def basis(x: torch.Tensor) -> torch.Tensor:  # (B,) -> (B, 2K)
        z = x[:, None] * k
        return torch.cat([z.cos(), z.sin()], dim=1)

    def y(x: torch.Tensor) -> torch.Tensor:
        x = x.double()  # (B, 2)
        g = basis(x[:, 0]) @ factors[0].T  # (B, R)
        h = basis(x[:, 1]) @ factors[1].T  # (B, R)
        return (g * h) @ weight  # (B,)

    return y

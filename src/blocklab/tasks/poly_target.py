"""Random sparse polynomials (seed 000 section 5.1): y(x) = sum_l a_l prod_i x_i^alpha_il.

Each monomial factors as (a function of the variables in A) * (a function of those in B) for any
partition (A, B), so the separation rank of y is at most the number of monomials R.
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


@TASKS.register
class PolyTarget(Task):
    """Inputs x ~ Uniform(-sqrt 3, sqrt 3)^n (unit variance); targets a random R-term polynomial.

    The seed draws the polynomial first, then the data, so `target_fn(seed)` rebuilds the exact
    function behind `make(seed)` without its data. With `online` (the default) training draws
    fresh inputs every step (`TaskData.sample`), as for `teacher`.
    """

    kind = "regression"
    default_threshold = 0.5
    small_options: ClassVar[dict] = {"n_train": 256, "n_val": 64, "n_test": 128}

    @dataclass(frozen=True)
    class Options:
        n_in: int = 6
        rank: int = 8  # R, the number of monomials
        max_exponent: int = 2
        min_exponent: int = 1  # seed 000 has every alpha >= 1; 0 lets monomials skip variables
        # scale each monomial to unit variance: otherwise the highest-degree monomial carries
        # nearly all the variance and the "R terms" are R in name only
        unit_monomials: bool = True
        n_train: int = 65536
        n_val: int = 2048
        n_test: int = 8192
        noise: float = 0.0  # label noise std on train/val, as a fraction of the target std
        online: bool = True  # fresh training inputs every step; False: the fixed train split

        def __post_init__(self):
            if self.n_in < 2:
                raise UserError(f"n_in must be >= 2 to have a partition, got {self.n_in}")
            if self.rank < 1:
                raise UserError(f"rank must be >= 1, got {self.rank}")
            if not (0 <= self.min_exponent <= self.max_exponent and self.max_exponent >= 1):
                raise UserError(
                    "need 0 <= min_exponent <= max_exponent and max_exponent >= 1 (else y is "
                    f"constant), got {self.min_exponent}, {self.max_exponent}"
                )
            check_generated(self)

    def _polynomial(self, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.options
        lo, hi = o.min_exponent, o.max_exponent + 1
        exponents = torch.randint(lo, hi, (o.rank, o.n_in), generator=g)  # (R, n_in)
        coefficients = torch.randn(o.rank, generator=g, dtype=torch.float64)  # (R,)
        if o.unit_monomials:
            # x ~ U(-sqrt3, sqrt3): E[x^(2k)] = 3^k / (2k + 1), and the variables are independent
            k = exponents.double()
            coefficients = coefficients / (3.0**k / (2 * k + 1)).prod(-1).sqrt()
        return exponents, coefficients

    def target_fn(self, seed: int) -> Callable[[torch.Tensor], torch.Tensor]:
        """The raw (unstandardized) polynomial of `make(seed)`: float64 (B, n_in) -> (B,)."""
        return _evaluator(*self._polynomial(torch.Generator().manual_seed(seed)))

    def make(self, seed: int) -> TaskData:
        o = self.options
        g = torch.Generator().manual_seed(seed)
        exponents, coefficients = self._polynomial(g)
        fn = _evaluator(exponents, coefficients)

        n = o.n_train + o.n_val + o.n_test
        x = self._inputs(n, g)  # (n, n_in) float32
        y = fn(x)[:, None]  # (n, 1), in float64 from the float32 inputs the model sees
        train, val, test, target_std, sample = regression_splits(
            x,
            y,
            o.n_train,
            o.n_val,
            o.noise,
            g,
            lambda xs: fn(xs)[:, None],
            self._inputs if o.online else None,
        )
        info = {
            "sep_upper_bound": o.rank,
            "exponents": exponents.tolist(),
            "coefficients": coefficients.tolist(),
            "target_std_before_norm": float(target_std),
        }
        return TaskData(train, val, test, self.kind, 1, info, sample=sample)

    def _inputs(self, n: int, g: torch.Generator) -> torch.Tensor:
        return (2 * torch.rand(n, self.options.n_in, generator=g) - 1) * math.sqrt(3)  # (n, n_in)


def _evaluator(exponents: torch.Tensor, coefficients: torch.Tensor) -> Callable:
    def y(x: torch.Tensor) -> torch.Tensor:
        monomials = (x.double()[:, None, :] ** exponents).prod(-1)  # (B, R)
        return monomials @ coefficients  # (B,)

    return y

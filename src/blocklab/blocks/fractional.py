"""Real-degree block: y = (W_1 x) * ... * (W_n x) * spow(V x, f), n = floor(d), f = d - n.

V = V_2 V_1 has rank r = round(f * D_in D_out / (D_in + D_out)), so the fractional factor costs
about f * D_in * D_out parameters and the block about d * D_in * D_out: the cost model of seed 000
(params = d * N_dx) holds for real d. Integer d gives exactly the bias-free `poly` block.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from blocklab.blocks import BLOCKS
from blocklab.blocks.base import Block
from blocklab.blocks.poly import init_unit_factors, product_of_factors
from blocklab.errors import UserError


def spow(z: torch.Tensor, f: float, eps: float) -> torch.Tensor:
    """Signed power z |z|^(f-1), smoothed: odd, finite gradient at 0, degree f for |z| >> eps."""
    return z * (z * z + eps * eps) ** ((f - 1.0) / 2.0)


def fractional_rank(f: float, d_in: int, d_out: int) -> int:
    """Rank of V; at least 1 when f > 0 so that a small width never silently drops the fraction."""
    if f <= 0:
        return 0
    return max(1, round(f * d_in * d_out / (d_in + d_out)))


def split_degree(degree: float) -> tuple[int, float]:
    n = math.floor(degree + 1e-12)  # 3.0000000001 from a float parse is still degree 3
    f = degree - n
    return n, (0.0 if f < 1e-9 else f)


@BLOCKS.register
class Fractional(Block):
    stackable = True
    examples = [{"degree": math.e}, {"degree": 1.5}, {"degree": 2.0}, {"degree": 3.25, "eps": 1e-4}]

    def __init__(self, d_in: int, d_out: int, degree: float = math.e, eps: float = 1e-3):
        super().__init__(d_in, d_out)
        if isinstance(degree, bool) or not isinstance(degree, (int, float)):
            raise UserError(f"fractional block needs a real degree >= 1, got {degree!r}")
        if not math.isfinite(degree) or degree < 1:
            raise UserError(f"fractional block needs a real degree >= 1, got {degree!r}")
        self.degree, self.eps = float(degree), eps
        self.n, self.f = split_degree(self.degree)
        self.rank = fractional_rank(self.f, d_in, d_out)
        self.proj = nn.Linear(d_in, self.n * d_out, bias=False)
        init_unit_factors(self.proj)
        if self.rank:
            self.v1 = nn.Linear(d_in, self.rank, bias=False)
            self.v2 = nn.Linear(self.rank, d_out, bias=False)
            init_unit_factors(self.v1)
            init_unit_factors(self.v2)

    @property
    def homogeneous_degree(self) -> float | None:
        return self.degree  # exact for integer d, up to O((eps / |Vx|)^2) otherwise

    @classmethod
    def count_params(cls, d_in: int, d_out: int, degree: float = math.e, eps: float = 1e-3) -> int:
        n, f = split_degree(float(degree))
        return n * d_in * d_out + fractional_rank(f, d_in, d_out) * (d_in + d_out)

    @torch.no_grad()
    def scale_output_(self, c: float) -> None:
        self.proj.weight[: self.d_out] *= c  # the first integer factor (n >= 1 for d >= 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = product_of_factors(self.proj(x), self.n, self.d_out)  # (..., D_out)
        if self.rank:
            y = y * spow(self.v2(self.v1(x)), self.f, self.eps)  # (..., D_out)
        return y

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, n={self.n}, f={self.f:.4f}, rank={self.rank}"

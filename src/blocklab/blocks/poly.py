"""Per-token polynomial block of integer degree d: y = (W_1 x + b_1) * ... * (W_d x + b_d)."""

from __future__ import annotations

import math

import torch
from torch import nn

from blocklab.blocks import BLOCKS
from blocklab.blocks.base import Block
from blocklab.errors import UserError


def product_of_factors(z: torch.Tensor, degree: int, d_out: int) -> torch.Tensor:
    """Multiply the `degree` slices of width d_out that a fused projection produced."""
    # unbind, not indexing: indexing's backward zero-fills a full-size buffer per factor
    first, *rest = z.unflatten(-1, (degree, d_out)).unbind(-2)  # d x (..., D_out)
    out = first
    for factor in rest:  # a loop beats torch.prod: its backward has a slow zero-safe path
        out = out * factor
    return out  # (..., D_out)


def init_unit_factors(linear: nn.Linear) -> None:
    """Each factor W_k x gets unit variance for unit-variance x, so the product keeps unit scale."""
    nn.init.normal_(linear.weight, std=1.0 / math.sqrt(linear.in_features))
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


@BLOCKS.register
class Poly(Block):
    """Elementwise product of d affine maps; homogeneous of degree d without bias (seed 000 3.1)."""

    stackable = True

    examples = [
        {"degree": 1},
        {"degree": 2, "bias": False},
        {"degree": 3},
        {"degree": 3, "bias": False},
        {"degree": 4, "bias": False},
    ]

    def __init__(self, d_in: int, d_out: int, degree: int = 3, bias: bool = True):
        super().__init__(d_in, d_out)
        if isinstance(degree, float) and degree.is_integer():
            degree = int(degree)
        if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
            raise UserError(f"poly block needs an integer degree >= 1, got {degree!r}")
        self.degree, self.bias = degree, bias
        # one fused projection for all d factors: a single matmul instead of d small ones
        self.proj = nn.Linear(d_in, degree * d_out, bias=bias)
        init_unit_factors(self.proj)

    @property
    def homogeneous_degree(self) -> float | None:
        return None if self.bias else float(self.degree)

    @classmethod
    def count_params(cls, d_in: int, d_out: int, degree: int = 3, bias: bool = True) -> int:
        return int(degree) * (d_in * d_out + (d_out if bias else 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return product_of_factors(self.proj(x), self.degree, self.d_out)  # (..., D_out)

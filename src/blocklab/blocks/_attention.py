"""Shared pieces of the attention blocks: argument checks, projections, heads, causal masks.

Every attention block reads only the trailing dimensions of its input, so it runs on (B, T, D)
and, in an ensemble, on (E, B, T, D) with stacked weights (`Block.stackable`): shapes below are
written for (B, T, D), and any leading dimensions ride along in front of B."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from blocklab.blocks.base import Block
from blocklab.blocks.poly import init_unit_factors
from blocklab.errors import UserError


def positive_int(value: Any, what: str) -> int:
    """An int >= 1 (an integer-valued float from a parsed option counts); UserError otherwise."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{what} must be an integer >= 1, got {value!r}")
    return value


def flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{what} must be true or false, got {value!r}")
    return value


def head_shape(d_out: int, heads: Any, head_dim: Any) -> tuple[int, int]:
    heads = positive_int(heads, "attention heads")
    head_dim = max(1, d_out // heads) if head_dim is None else positive_int(head_dim, "head_dim")
    return heads, head_dim


def linear(d_in: int, d_out: int, bias: bool) -> nn.Linear:
    layer = nn.Linear(d_in, d_out, bias=bias)
    init_unit_factors(layer)  # unit-variance outputs, zero biases
    return layer


def split_heads(z: torch.Tensor, heads: int) -> torch.Tensor:
    return z.unflatten(-1, (heads, -1)).transpose(-3, -2)  # (..., T, H*Dh) -> (..., H, T, Dh)


def merge_heads(y: torch.Tensor) -> torch.Tensor:
    return y.transpose(-3, -2).flatten(-2)  # (..., H, T, Dh) -> (..., T, H*Dh)


def causal_mask(t: int, device: torch.device | None = None) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()  # (T, T), True = attended


def n_attended(t: int, causal: bool, like: torch.Tensor) -> torch.Tensor:
    """Number of positions each query sees: i + 1 when causal, else T."""
    if causal:
        return torch.arange(1, t + 1, dtype=like.dtype, device=like.device)[:, None]  # (T, 1)
    return torch.full((t, 1), float(t), dtype=like.dtype, device=like.device)  # (T, 1)


class Attention(Block):
    """Multi-head base: one d_in -> A projection per name in `projections`, then Wo: A -> d_out.

    A = heads * head_dim; head_dim defaults to d_out // heads, so (D, D) with the three
    projections q, k, v costs 4 D^2 without bias (the transformer count 12 L D^2 relies on it).
    """

    mixes_tokens = True
    stackable = True  # weights in nn.Linear only; scores, masks and softmax on the last two dims
    projections: ClassVar[tuple[str, ...]] = ("q", "k", "v")
    # projections that take no bias even with bias=True, because it could not learn anything
    no_bias: ClassVar[tuple[str, ...]] = ()
    examples = [
        {},
        {"heads": 2},
        {"causal": True},
        {"heads": 2, "head_dim": 3, "causal": True, "bias": True},
    ]

    def __init__(
        self,
        d_in: int,
        d_out: int,
        heads: int = 1,
        head_dim: int | None = None,
        causal: bool = False,
        bias: bool = False,
    ):
        super().__init__(d_in, d_out)
        self.heads, self.head_dim = head_shape(d_out, heads, head_dim)
        self.causal, self.bias = flag(causal, "causal"), flag(bias, "bias")
        width = self.heads * self.head_dim
        for name in self.projections:
            setattr(self, name, linear(d_in, width, bias and name not in self.no_bias))
        self.o = linear(width, d_out, bias)

    @property
    def homogeneous_degree(self) -> float | None:
        return None if (self.bias or self.degree is None) else float(self.degree)

    @classmethod
    def count_params(
        cls,
        d_in: int,
        d_out: int,
        heads: int = 1,
        head_dim: int | None = None,
        causal: bool = False,
        bias: bool = False,
    ) -> int:
        heads, head_dim = head_shape(d_out, heads, head_dim)
        width = heads * head_dim
        n, biased = len(cls.projections), len(cls.projections) - len(cls.no_bias)
        return n * d_in * width + width * d_out + ((biased * width + d_out) if bias else 0)

    def project(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The projections of x, in the order of `projections`, each split into heads."""
        return [split_heads(getattr(self, name)(x), self.heads) for name in self.projections]

    def output(self, y: torch.Tensor) -> torch.Tensor:
        return self.o(merge_heads(y))  # (B, H, T, Dh) -> (B, T, D_out)

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, heads={self.heads}, head_dim={self.head_dim}, "
            f"causal={self.causal}, bias={self.bias}"
        )

"""Quadratic token mixing: y_i = (W_1 x_i) * mean_j (W_2 x_j), `*` elementwise.

The mean runs over all positions, or j <= i when causal. The cheapest token mixer of degree 2
(homogeneous without bias): each output multiplies its own token with a pooled summary.
"""

from __future__ import annotations

import torch

from blocklab.blocks import BLOCKS
from blocklab.blocks._attention import flag, linear
from blocklab.blocks.base import Block


@BLOCKS.register
class QuadraticMixing(Block):
    mixes_tokens = True
    stackable = True  # two Linear maps; the pooling runs over dim -2 whatever leads it
    degree = 2
    examples = [{}, {"causal": True}, {"bias": True}, {"causal": True, "bias": True}]

    def __init__(self, d_in: int, d_out: int, causal: bool = False, bias: bool = False):
        super().__init__(d_in, d_out)
        self.causal, self.bias = flag(causal, "causal"), flag(bias, "bias")
        self.w1, self.w2 = linear(d_in, d_out, bias), linear(d_in, d_out, bias)

    @property
    def homogeneous_degree(self) -> float | None:
        return None if self.bias else 2.0

    @classmethod
    def count_params(cls, d_in: int, d_out: int, causal: bool = False, bias: bool = False) -> int:
        return 2 * (d_in * d_out + (d_out if bias else 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.w2(x)  # (B, T, D_out)
        if self.causal:
            t = x.shape[-2]
            n = torch.arange(1, t + 1, dtype=z.dtype, device=z.device)[:, None]  # (T, 1)
            pooled = z.cumsum(dim=-2) / n  # (B, T, D_out): mean over j <= i
        else:
            pooled = z.mean(dim=-2, keepdim=True)  # (B, 1, D_out)
        return self.w1(x) * pooled  # (B, T, D_out)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, causal={self.causal}, bias={self.bias}"

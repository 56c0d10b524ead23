"""Polynomial attention: weights w_ij = (<q_i, k_j> / sqrt(head_dim))^n replace the softmax,

    y_i = (1 / n_i) sum_j w_ij v_j,   then Wo,

n_i the number of attended positions. Degree 2n + 1 in the inputs (homogeneous without bias);
n = 1 is linearized attention (seed 001 eq. 3) with the same constant.
"""

from __future__ import annotations

import torch

from blocklab.blocks import BLOCKS
from blocklab.blocks._attention import Attention, causal_mask, n_attended, positive_int


@BLOCKS.register
class PolyAttention(Attention):
    examples = [
        {},
        {"n": 1},
        {"n": 3, "heads": 2},
        {"causal": True},
        {"n": 2, "heads": 2, "causal": True, "bias": True},
    ]

    def __init__(self, d_in: int, d_out: int, n: int = 2, **kwargs):
        n = positive_int(n, "poly_attention power n")
        super().__init__(d_in, d_out, **kwargs)
        self.n, self.degree = n, 2 * n + 1

    @classmethod
    def count_params(cls, d_in: int, d_out: int, n: int = 2, **kwargs) -> int:
        positive_int(n, "poly_attention power n")
        return super().count_params(d_in, d_out, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.project(x)  # (B, H, T, Dh) each
        t = q.shape[-2]
        w = ((q @ k.transpose(-1, -2)) * self.scale) ** self.n  # (B, H, T, T)
        if self.causal:
            w = w.masked_fill(~causal_mask(t, x.device), 0.0)
        # the fixed 1/n_i keeps the scale independent of T without changing the degree
        y = (w @ v) / n_attended(t, self.causal, w)  # (B, H, T, Dh)
        return self.output(y)  # (B, T, D_out)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, n={self.n}"

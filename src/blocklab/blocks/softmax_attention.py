"""Standard multi-head softmax self-attention (seed 001 eq. 1), optional causal mask.

Written out (scores, mask, softmax, weighted values) so that it can be checked against
torch.nn.functional.scaled_dot_product_attention. Not a polynomial: degree None.
"""

from __future__ import annotations

import torch

from blocklab.blocks import BLOCKS
from blocklab.blocks._attention import Attention, causal_mask


@BLOCKS.register
class SoftmaxAttention(Attention):
    degree = None
    mixing_degree = 3  # q, k and v: three projections of the input multiplied
    # a key bias b adds <q_i, b> to every score of query i, which the softmax cancels: it would
    # cost parameters and never learn
    no_bias = ("k",)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.project(x)  # (B, H, T, Dh) each
        scores = (q @ k.transpose(-1, -2)) * self.scale  # (B, H, T, T)
        if self.causal:
            # the diagonal is always attended, so no row is all -inf
            scores = scores.masked_fill(~causal_mask(q.shape[-2], x.device), float("-inf"))
        y = scores.softmax(dim=-1) @ v  # (B, H, T, Dh)
        return self.output(y)  # (B, T, D_out)

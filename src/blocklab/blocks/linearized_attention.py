"""Linearized self-attention of seed 001 eq. 3 (no softmax, no normalization layer):

    y_i = c_i * sum_j sum_h <Wq_h x_i, Wk_h x_j> Wo_h Wv_h x_j,   c_i = 1 / (sqrt(head_dim) n_i)

with n_i the number of attended positions (T, or i + 1 when causal). A polynomial of degree 3 in
the inputs; homogeneous of degree 3 without bias.
"""

from __future__ import annotations

import torch

from blocklab.blocks import BLOCKS
from blocklab.blocks._attention import Attention, causal_mask, n_attended


@BLOCKS.register
class LinearizedAttention(Attention):
    degree = 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.project(x)  # (B, H, T, Dh) each
        t = q.shape[-2]
        scores = q @ k.transpose(-1, -2)  # (B, H, T, T)
        if self.causal:
            scores = scores.masked_fill(~causal_mask(t, x.device), 0.0)
        # c_i is a fixed positive constant (not learned, not input-dependent), so the function
        # class and degree are those of eq. 3; it keeps the output scale from growing with T and
        # head_dim, so stacked layers stay O(1) instead of blowing up as (T sqrt(Dh))^(3^L)
        y = (scores @ v) * self.scale / n_attended(t, self.causal, scores)  # (B, H, T, Dh)
        return self.output(y)  # (B, T, D_out)

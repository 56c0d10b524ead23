"""Third-order (2-simplicial) attention: Clift et al. 2019, Sanford et al. 2023, Roy et al. 2025.

Per head, with five projections q, k, k2, v, v2 of the input:

    A_ijl = sum_c q_ic k_jc k2_lc / sqrt(head_dim),  S_i = softmax over the pairs (j, l) of A_i,
    y_i = sum_jl S_ijl (v_j * v2_l)   (elementwise product),  then Wo,

with j <= i and l <= i when causal. It equals standard attention over the T^2 pair tokens with
keys k_j * k2_l and values v_j * v2_l. k2 and v2 carry a bias only when bias=True, so there is no
hidden lower-order path. The logits take (B, H, T, T, T) memory: meant for the short sequences of
the separation tasks, not for long contexts. Not a polynomial: degree None.
"""

from __future__ import annotations

import torch

from blocklab.blocks import BLOCKS
from blocklab.blocks._attention import Attention, causal_mask


@BLOCKS.register
class TensorAttention(Attention):
    degree = None
    mixing_degree = 5  # q, k, k2, v and v2 multiplied
    projections = ("q", "k", "k2", "v", "v2")
    examples = [
        {},
        {"heads": 2},
        {"causal": True},
        {"heads": 2, "causal": True, "bias": True},
    ]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, k2, v, v2 = self.project(x)  # (B, H, T, Dh) each
        t = q.shape[-2]
        logits = torch.einsum("...ic,...jc,...lc->...ijl", q, k, k2) * self.scale  # (B, H, T, T, T)
        if self.causal:
            seen = causal_mask(t, x.device)  # (T, T): key j visible from query i
            allowed = seen[:, :, None] & seen[:, None, :]  # (T, T, T): j <= i and l <= i
            logits = logits.masked_fill(~allowed, float("-inf"))
        s = logits.flatten(-2).softmax(dim=-1).unflatten(-1, (t, t))  # joint over (j, l)
        y = torch.einsum("...ijl,...jc,...lc->...ic", s, v, v2)  # (B, H, T, Dh)
        return self.output(y)  # (B, T, D_out)

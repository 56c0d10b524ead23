"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"), per head:

    y_i = sum_j (phi(q_i) . phi(k_j)) v_j / sum_j phi(q_i) . phi(k_j),   phi(x) = elu(x) + 1,

j over all positions, or j <= i when causal. phi > 0 keeps the denominator positive. Not a
polynomial (elu, division): degree None.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from blocklab.blocks import BLOCKS
from blocklab.blocks._attention import Attention, causal_mask


def feature_map(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1.0


def linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    """Parallel form on (B, H, T, Dh) inputs: O(T Dh^2) without a mask, O(T^2 Dh) causal."""
    fq, fk = feature_map(q), feature_map(k)  # (B, H, T, Dh)
    if causal:
        # the masked T x T form: the cumulative-sum alternative holds a (T, Dh, Dh) state per head
        w = (fq @ fk.transpose(-1, -2)).masked_fill(~causal_mask(q.shape[-2], q.device), 0.0)
        return (w @ v) / w.sum(-1, keepdim=True)  # (B, H, T, T) -> (B, H, T, Dh)
    kv = fk.transpose(-1, -2) @ v  # (B, H, Dh, Dh): sum_j phi(k_j) v_j^T, before meeting queries
    z = fk.sum(-2, keepdim=True)  # (B, H, 1, Dh)
    return (fq @ kv) / (fq * z).sum(-1, keepdim=True)  # (B, H, T, Dh)


def linear_attention_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal reference as an RNN: S_t = S_{t-1} + phi(k_t) v_t^T, z_t = z_{t-1} + phi(k_t)."""
    fq, fk = feature_map(q), feature_map(k)  # (B, H, T, Dh)
    s = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])  # (B, H, Dh, Dv)
    z = q.new_zeros(*q.shape[:-2], q.shape[-1])  # (B, H, Dh)
    out = []
    for t in range(q.shape[-2]):
        s = s + fk[..., t, :, None] * v[..., t, None, :]  # (B, H, Dh, Dv)
        z = z + fk[..., t, :]
        num = (fq[..., t, :, None] * s).sum(-2)  # (B, H, Dv)
        out.append(num / (fq[..., t, :] * z).sum(-1, keepdim=True))
    return torch.stack(out, dim=-2)  # (B, H, T, Dv)


@BLOCKS.register
class LinearAttention(Attention):
    degree = None
    mixing_degree = 3  # phi(q), phi(k) and v multiplied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.project(x)  # (B, H, T, Dh) each
        return self.output(linear_attention(q, k, v, self.causal))  # (B, T, D_out)

"""Third-order (2-simplicial) attention: Clift et al. 2019, Sanford et al. 2023, Roy et al. 2025.

Per head, with five projections q, k, k2, v, v2 of the input:

    A_ijl = sum_c q_ic k_jc k2_lc / sqrt(head_dim),  S_i = softmax over the pairs (j, l) of A_i,
    y_i = sum_jl S_ijl (v_j * v2_l)   (elementwise product),  then Wo,

with j <= i and l <= i when causal. It equals standard attention over the T^2 pair tokens with
keys k_j * k2_l and values v_j * v2_l. k2 and v2 carry a bias only when bias=True, so there is no
hidden lower-order path. The logits take (B, H, T, T, T) memory: meant for the short sequences of
the separation tasks, not for long contexts. Not a polynomial: degree None.

`forward` computes it as batched matmuls, causal queries in chunks that skip the pairs they cannot
see; `forward_reference` is the formula in one einsum each, and the tests hold the two equal on
forward and backward.
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
        if not self.causal:
            return self.output(attend(q, k, k2, v, v2, self.scale))  # (B, T, D_out)
        # causal: a chunk of queries needs only the keys up to its end, so chunks skip most of
        # the masked (j, l) pairs; with 4 chunks the logits cost about half of T^3
        chunk = max(QUERY_CHUNK, -(-t // 4))
        parts = []
        for lo in range(0, t, chunk):
            hi = min(t, lo + chunk)
            seen = causal_mask(hi, x.device)[lo:hi]  # (C, S): key j visible from query i
            keys = (a[..., :hi, :] for a in (k, k2, v, v2))
            parts.append(attend(q[..., lo:hi, :], *keys, self.scale, seen))  # (B, H, C, Dh)
        return self.output(torch.cat(parts, dim=-2))  # (B, T, D_out)

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        """The definition as written, every (i, j, l) at once: what `forward` must equal."""
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


QUERY_CHUNK = 8  # the fewest queries per causal chunk: shorter chunks cost more in overhead


def attend(q, k, k2, v, v2, scale, seen=None):
    """Queries (B, H, C, Dh) over the key pairs of k, k2 (B, H, S, Dh), as batched matmuls:
    (q_i * k_j) @ k2^T gives the logits, and S @ v2 then * v summed over j the output, never a
    (C, S, S, Dh) product. `seen` (C, S) masks the keys a query may not see."""
    s = k.shape[-2]
    qk = q[..., :, None, :] * k[..., None, :, :]  # (B, H, C, S, Dh)
    logits = (qk @ k2[..., None, :, :].transpose(-1, -2)) * scale  # (B, H, C, S, S)
    if seen is not None:
        logits = logits.masked_fill(~(seen[:, :, None] & seen[:, None, :]), float("-inf"))
    weights = logits.flatten(-2).softmax(dim=-1).unflatten(-1, (s, s))  # joint over (j, l)
    pairs = weights @ v2[..., None, :, :]  # (B, H, C, S, Dh): sum over l of S_ijl v2_l
    return (pairs * v[..., None, :, :]).sum(-2)  # (B, H, C, Dh)

"""MLP-Mixer token mixing (Tolstikhin et al. 2021), the linear token mixer seed 000 compares:

    y = channel(token(x)),  token: a T x T map across positions shared by all channels,
                            channel: d_in -> d_out per position,

so d_in != d_out works. The token weights depend on the sequence length (`seq_len`). Linear:
degree 1, homogeneous without bias. `causal` keeps position i's mix to positions j <= i: the
token map is lower triangular and holds only those T (T + 1) / 2 weights, so the count is what
trains.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from blocklab.blocks import BLOCKS
from blocklab.blocks._attention import flag, linear, positive_int
from blocklab.blocks.base import Block, per_member
from blocklab.errors import UserError


@BLOCKS.register
class Mixer(Block):
    mixes_tokens = True
    needs_seq_len = True
    # the token weights are raw parameters read through `per_member`; the channel map a Linear
    stackable = True
    degree = 1
    examples = [{}, {"bias": True}, {"causal": True}, {"causal": True, "bias": True}]

    def __init__(
        self, d_in: int, d_out: int, seq_len: int, bias: bool = False, causal: bool = False
    ):
        super().__init__(d_in, d_out)
        self.seq_len = positive_int(seq_len, "mixer seq_len")
        self.bias, self.causal = flag(bias, "bias"), flag(causal, "causal")
        # random, not identity: an identity start would begin as a per-token block
        t = self.seq_len
        if causal:
            rows, cols = torch.tril_indices(t, t)  # (2, T (T + 1) / 2): the positions j <= i
            # where each weight sits in the flattened (T * T) map
            self.register_buffer("tril", rows * t + cols, persistent=False)
            # unit-variance outputs: row i mixes i + 1 positions
            self.token_weight = nn.Parameter(torch.randn(len(rows)) / (rows + 1.0).sqrt())
        else:
            self.token_weight = nn.Parameter(torch.randn(t, t) / math.sqrt(t))  # unit variance
        self.token_bias = nn.Parameter(torch.zeros(t, 1)) if bias else None
        self.channel = linear(d_in, d_out, bias)

    @property
    def homogeneous_degree(self) -> float | None:
        return None if self.bias else 1.0

    @classmethod
    def count_params(
        cls, d_in: int, d_out: int, seq_len: int, bias: bool = False, causal: bool = False
    ) -> int:
        t = positive_int(seq_len, "mixer seq_len")
        token = t * (t + 1) // 2 if causal else t * t
        return token + d_in * d_out + ((t + d_out) if bias else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2] != self.seq_len:
            raise UserError(
                f"mixer block was built for seq_len={self.seq_len} but got length {x.shape[-2]}"
            )
        w = self.token_weight  # (T, T) or (E, T, T); causal: (T (T + 1) / 2) or (E, ...)
        if self.causal:
            t = self.seq_len
            full = w.new_zeros(*w.shape[:-1], t * t)  # (..., T * T)
            w = full.index_copy(-1, self.tril, w).unflatten(-1, (t, t))  # (..., T, T)
        w = per_member(w, x, 2)  # (T, T), or (E, 1, T, T) in an ensemble
        z = w @ x  # (B, T, D_in)
        if self.token_bias is not None:
            # one bias per position, shared by the channels
            z = z + per_member(self.token_bias, z, 2)  # (B, T, D_in)
        return self.channel(z)  # (B, T, D_out)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, seq_len={self.seq_len}, bias={self.bias}, "
            f"causal={self.causal}"
        )

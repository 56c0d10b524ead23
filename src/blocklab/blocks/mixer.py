"""MLP-Mixer token mixing (Tolstikhin et al. 2021), the linear token mixer seed 000 compares:

    y = channel(token(x)),  token: a T x T map across positions shared by all channels,
                            channel: d_in -> d_out per position,

so d_in != d_out works. The token weights depend on the sequence length (`seq_len`). Linear:
degree 1, homogeneous without bias.
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
    examples = [{}, {"bias": True}]

    def __init__(self, d_in: int, d_out: int, seq_len: int, bias: bool = False):
        super().__init__(d_in, d_out)
        self.seq_len = positive_int(seq_len, "mixer seq_len")
        self.bias = flag(bias, "bias")
        # random, not identity: an identity start would begin as a per-token block
        t = self.seq_len
        self.token_weight = nn.Parameter(torch.randn(t, t) / math.sqrt(t))  # unit-variance outputs
        self.token_bias = nn.Parameter(torch.zeros(t, 1)) if bias else None
        self.channel = linear(d_in, d_out, bias)

    @property
    def homogeneous_degree(self) -> float | None:
        return None if self.bias else 1.0

    @classmethod
    def count_params(cls, d_in: int, d_out: int, seq_len: int, bias: bool = False) -> int:
        t = positive_int(seq_len, "mixer seq_len")
        return t * t + d_in * d_out + ((t + d_out) if bias else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2] != self.seq_len:
            raise UserError(
                f"mixer block was built for seq_len={self.seq_len} but got length {x.shape[-2]}"
            )
        w = per_member(self.token_weight, x, 2)  # (T, T), or (E, 1, T, T) in an ensemble
        z = w @ x  # (B, T, D_in)
        if self.token_bias is not None:
            # one bias per position, shared by the channels
            z = z + per_member(self.token_bias, z, 2)  # (B, T, D_in)
        return self.channel(z)  # (B, T, D_out)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, seq_len={self.seq_len}, bias={self.bias}"

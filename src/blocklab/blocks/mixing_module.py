"""Any token-mixing nn.Module as a block: `mixing_module(factory=package.module:function)`.

The factory is called as `function(width, seq_len)` and must return a module that maps
(B, T, width) to (B, T, width) with T = seq_len, mixing positions (an attention layer, a token
MLP); a factory that needs no sequence length ignores it. Only sequence tasks run it. Per-token
modules belong in `module`.
"""

from __future__ import annotations

import torch
from torch import nn

from blocklab.blocks import BLOCKS
from blocklab.blocks._attention import positive_int
from blocklab.blocks._factory import FactoryBlock


class ExampleMixer(nn.Module):
    """The module the contract checks build (`examples`), standing in for a user's: a learned
    T x T map across positions, then a tanh map across channels."""

    def __init__(self, width: int, seq_len: int):
        super().__init__()
        self.tokens = nn.Linear(seq_len, seq_len, bias=False)
        self.channels = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = self.tokens(x.transpose(-1, -2)).transpose(-1, -2)  # (B, T, D)
        return torch.tanh(self.channels(mixed))  # (B, T, D)


@BLOCKS.register
class MixingModule(FactoryBlock):
    mixes_tokens = True
    needs_seq_len = True
    examples = [{"factory": "blocklab.blocks.mixing_module:ExampleMixer"}]

    def __init__(self, d_in: int, d_out: int, factory: str, seq_len: int):
        super().__init__(d_in, d_out, factory, positive_int(seq_len, "mixing_module seq_len"))
        self.seq_len = seq_len

    @classmethod
    def count_params(cls, d_in: int, d_out: int, factory: str, seq_len: int) -> int:
        seq_len = positive_int(seq_len, "mixing_module seq_len")
        return cls.count_factory(factory, d_in, d_out, seq_len)

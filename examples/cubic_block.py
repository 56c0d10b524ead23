"""A plain cubic block, y = (A x) * (B x) * (C x), registered as `cubic_block` (the file's name):
a block that computes and counts, and nothing more. It defines no `scale_output_`: the depth
ladder silences an added layer through the last factor its output is linear in.
`blocklab check --import examples/cubic_block.py --only cubic_block`.
"""

import torch
from torch import nn

from blocklab.blocks import BLOCKS, Block


@BLOCKS.register  # registered as "cubic_block", the name of this file
class Cubic(Block):
    def __init__(self, d_in: int, d_out: int):
        super().__init__(d_in, d_out)
        self.a = nn.Linear(d_in, d_out, bias=False)
        self.b = nn.Linear(d_in, d_out, bias=False)
        self.c = nn.Linear(d_in, d_out, bias=False)

    @classmethod
    def count_params(cls, d_in: int, d_out: int) -> int:
        return 3 * d_in * d_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) * self.b(x) * self.c(x)  # (..., D_out)

"""A block from outside the package: a gated linear unit, y = (W x) * sigmoid(V x + c),
registered as `my_block` (the file's name). Check it, then compare it:
`blocklab check --import examples/my_block.py --only my_block`,
`blocklab degree-sweep --import examples/my_block.py --baselines my_block mlp`.
"""

import torch
from torch import nn

from blocklab.blocks import BLOCKS, Block


@BLOCKS.register  # registered as "my_block", the name of this file
class GatedLinear(Block):
    stackable = True  # weights only in nn.Linear, the rest per feature: ensembles batch it

    def __init__(self, d_in: int, d_out: int):
        super().__init__(d_in, d_out)
        self.value = nn.Linear(d_in, d_out, bias=False)
        self.gate = nn.Linear(d_in, d_out)

    @classmethod
    def count_params(cls, d_in: int, d_out: int) -> int:
        return 2 * d_in * d_out + d_out  # W, V and the gate's bias c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.value(x) * torch.sigmoid(self.gate(x))  # (..., D_out)

    @torch.no_grad()
    def scale_output_(self, c: float) -> None:
        # the output is linear in W: the degree sweep's depth ladder rescales a layer through it,
        # and silences an added one by c = 0 (the gradient to W, x * sigmoid(V x + c), lives on)
        self.value.weight *= c

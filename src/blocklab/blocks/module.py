"""Any nn.Module as a per-token block: `module(factory=package.module:function)`.

The factory is called as `function(width)` and must return a module that maps (..., width) to
(..., width) position by position (an MLP, a gated unit, a normalization with weights); d_in
equals d_out. Its parameters are counted from the module itself, and its degree is not known
(None). A factory whose module mixes positions belongs in `mixing_module`: whether a block mixes
tokens is stated by the block's class, which a factory cannot change (networks, experiments and
the contract checks read it before any module exists).
"""

from __future__ import annotations

from torch import nn

from blocklab.blocks import BLOCKS
from blocklab.blocks._factory import FactoryBlock


def example(width: int) -> nn.Module:
    """The factory the contract checks build (`examples`), standing in for a user's: a two-layer
    tanh map of one width."""
    return nn.Sequential(nn.Linear(width, 2 * width), nn.Tanh(), nn.Linear(2 * width, width))


@BLOCKS.register
class Module(FactoryBlock):
    examples = [{"factory": "blocklab.blocks.module:example"}]

    def __init__(self, d_in: int, d_out: int, factory: str):
        super().__init__(d_in, d_out, factory)

    @classmethod
    def count_params(cls, d_in: int, d_out: int, factory: str) -> int:
        return cls.count_factory(factory, d_in, d_out)

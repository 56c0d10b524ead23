"""A factory for the `module` block: `--baselines 'module(factory=my_factories:make)'` wraps the
module `make(width)` returns, which maps (..., width) to (..., width) per token. Imported with
`--import examples/my_factories.py`, under the file's name."""

from torch import nn


def make(width: int) -> nn.Module:
    """A two-layer perceptron of the block's width: its parameters are counted from it."""
    return nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

"""The control: a linear map followed by an activation (degree 1 before the activation)."""

from __future__ import annotations

import torch
from torch import nn

from blocklab.blocks import BLOCKS
from blocklab.blocks.base import Block
from blocklab.errors import UserError

SILENT = 1e-6  # the weight scale of a silenced layer (`silence_`)
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


@BLOCKS.register
class Mlp(Block):
    stackable = True
    examples = [{}, {"bias": False}, {"activation": "gelu"}, {"activation": "tanh", "bias": False}]

    def __init__(self, d_in: int, d_out: int, bias: bool = True, activation: str = "relu"):
        super().__init__(d_in, d_out)
        if activation not in ACTIVATIONS:
            raise UserError(
                f"mlp activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}"
            )
        self.bias, self.activation = bias, activation
        self.linear = nn.Linear(d_in, d_out, bias=bias)
        nn.init.kaiming_normal_(self.linear.weight, nonlinearity="relu")
        if bias:
            nn.init.zeros_(self.linear.bias)
        self.act = ACTIVATIONS[activation]()

    @property
    def homogeneous_degree(self) -> float | None:
        # ReLU(c z) = c ReLU(z) for c > 0: positively homogeneous of degree 1 without bias
        return 1.0 if (self.activation == "relu" and not self.bias) else None

    @classmethod
    def count_params(
        cls, d_in: int, d_out: int, bias: bool = True, activation: str = "relu"
    ) -> int:
        return d_in * d_out + (d_out if bias else 0)

    @torch.no_grad()
    def scale_output_(self, c: float) -> None:
        if self.activation != "relu":  # tanh and gelu are not homogeneous
            raise UserError(
                f"block mlp(activation={self.activation}) cannot rescale its output through its "
                "parameters: a depth ladder over it needs --no-scaled-residual, or --ladder off"
            )
        self.linear.weight *= c  # relu(c z) = c relu(z) for c >= 0
        if self.bias:
            self.linear.bias *= c

    @torch.no_grad()
    def silence_(self) -> bool:
        if self.activation != "relu":
            # tanh(0) = gelu(0) = 0 with a slope of 1 and 1/2 there: zero weights silence the
            # unit exactly and its gradient, act'(0) x, lives on
            self.linear.weight.zero_()
            if self.bias:
                self.linear.bias.zero_()
            return True
        # relu(0) has zero gradient, so an exactly silent unit would never move: the weights
        # shrink by SILENT instead, which changes the network's function by O(SILENT)
        self.scale_output_(SILENT)
        if self.bias:
            self.linear.bias.zero_()
        return False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x))  # (..., D_out)

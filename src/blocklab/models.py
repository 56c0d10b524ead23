"""Networks: embedding -> p layers (norm, block, activation, optional residual) -> readout.

An `Arm` names what a comparison varies: a polynomial degree (integer -> `poly`, real ->
`fractional`), a per-layer degree pattern (a mixed stack, cycled to the depth), or another
registered block such as the `mlp` control.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from blocklab.blocks import BLOCKS, make_block
from blocklab.errors import UserError


@dataclass(frozen=True)
class Arm:
    label: str
    block: str  # "poly" for the polynomial family, else a registered block name
    degrees: tuple[float, ...] = ()  # per-layer pattern, cycled; empty for non-polynomial arms
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def degree(self) -> float | None:
        """Average degree per layer over one pattern (None for non-polynomial arms)."""
        return sum(self.degrees) / len(self.degrees) if self.degrees else None

    def layer_blocks(self, depth: int, bias: bool = False) -> list[tuple[str, dict[str, Any]]]:
        if not self.degrees:
            return [(self.block, dict(self.kwargs))] * depth
        out = []
        for i in range(depth):
            d = self.degrees[i % len(self.degrees)]
            if float(d).is_integer():
                out.append(("poly", {"degree": int(d), "bias": bias, **self.kwargs}))
            elif bias:
                raise UserError(
                    f"degree {d:g} has no bias form (the fractional block is bias-free)"
                )
            else:
                out.append(("fractional", {"degree": float(d), **self.kwargs}))
        return out

    def block_params(self, depth: int, width: int, bias: bool = False) -> int:
        return sum(
            BLOCKS.get(name).count_params(width, width, **kw)
            for name, kw in self.layer_blocks(depth, bias)
        )


def format_degree(d: float) -> str:
    if abs(d - math.e) < 1e-12:
        return "e"
    return f"{d:g}"


def parse_arm(text: str) -> Arm:
    """'3' | 'e' | '2.5' | '[3,2,3]' -> a polynomial arm; a block name ('mlp') -> a control."""
    s = str(text).strip().replace(" ", "")
    if s.startswith("[") and s.endswith("]"):
        degrees = tuple(parse_degree(p) for p in s[1:-1].split(",") if p)
        if not degrees:
            raise UserError(f"empty degree list {text!r}")
        return Arm("mix[" + ",".join(format_degree(d) for d in degrees) + "]", "poly", degrees)
    if s in BLOCKS and s not in ("poly", "fractional"):
        return Arm(s, s)
    d = parse_degree(s)
    return Arm(f"d={format_degree(d)}", "poly", (d,))


def parse_degree(text: str) -> float:
    s = str(text).strip().lower()
    try:
        d = math.e if s == "e" else float(s)
    except ValueError:
        raise UserError(f"degree {text!r} is not a number or 'e'") from None
    if not math.isfinite(d) or d < 1:
        raise UserError(f"degree must be a real number >= 1, got {text!r}")
    return d


NORMS = ("none", "layer", "rms")
ACTIVATIONS = {"none": nn.Identity, "relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


def make_norm(kind: str, width: int) -> nn.Module:
    # no affine weights: the budget counts blocks only, and norms must not add hidden parameters
    if kind == "layer":
        return nn.LayerNorm(width, elementwise_affine=False)
    if kind == "rms":
        return nn.RMSNorm(width, elementwise_affine=False)
    if kind == "none":
        return nn.Identity()
    raise UserError(f"norm must be one of {', '.join(NORMS)}, got {kind!r}")


class Layer(nn.Module):
    """x + act(block(norm(x))) with residual, act(block(norm(x))) without."""

    def __init__(self, block: nn.Module, width: int, norm: str, activation: str, residual: bool):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise UserError(
                f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}"
            )
        self.norm, self.block, self.act = make_norm(norm, width), block, ACTIVATIONS[activation]()
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.block(self.norm(x)))  # (B, D)
        return x + y if self.residual else y


class Net(nn.Module):
    """Vector-input network; the embedding and readout are the same for every arm at a width."""

    def __init__(
        self,
        arm: Arm,
        depth: int,
        width: int,
        n_in: int,
        n_out: int,
        *,
        bias: bool = False,
        norm: str = "layer",
        activation: str = "none",
        residual: bool = True,
    ):
        super().__init__()
        self.embed = nn.Linear(n_in, width)
        blocks = [
            make_block(name, width, width, **kw) for name, kw in arm.layer_blocks(depth, bias)
        ]
        self.layers = nn.ModuleList(Layer(b, width, norm, activation, residual) for b in blocks)
        self.norm_out = make_norm(norm, width)
        self.readout = nn.Linear(width, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x.flatten(1))  # (B, D)
        for layer in self.layers:
            h = layer(h)  # (B, D)
        return self.readout(self.norm_out(h))  # (B, n_out)

    def param_counts(self) -> dict[str, int]:
        def n(m: nn.Module) -> int:
            return sum(p.numel() for p in m.parameters())

        counts = {"embed": n(self.embed), "blocks": n(self.layers), "readout": n(self.readout)}
        counts["total"] = n(self)
        return counts

"""Per-token polynomial block of integer degree d: y = (W_1 x + b_1) * ... * (W_d x + b_d)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from blocklab.blocks import BLOCKS
from blocklab.blocks.base import Block
from blocklab.errors import UserError


def product_of_factors_reference(z: torch.Tensor, degree: int, d_out: int) -> torch.Tensor:
    """Multiply the `degree` slices of width d_out that a fused projection produced: the plain
    form, differentiated by autograd, that `product_of_factors` is tested against."""
    # unbind, not indexing: indexing's backward zero-fills a full-size buffer per factor
    first, *rest = z.unflatten(-1, (degree, d_out)).unbind(-2)  # d x (..., D_out)
    out = first
    for factor in rest:  # a loop beats torch.prod: its backward has a slow zero-safe path
        out = out * factor
    return out  # (..., D_out)


class _ProductOfFactors(torch.autograd.Function):
    """`product_of_factors_reference` with its backward written out. Autograd's backward of the
    chain of multiplies makes one gradient per factor and then concatenates them (a copy of the
    whole (..., d * D) gradient, about 5% of a small network's step); this one writes each
    factor's gradient into its slice of one buffer, with the same 2 (d - 1) multiplies, reusing
    the running products of the forward pass."""

    @staticmethod
    def forward(z: torch.Tensor, degree: int, d_out: int):
        f = z.unflatten(-1, (degree, d_out))  # (..., d, D_out)
        prefixes = [f[..., 0, :]]  # prefixes[k] = f_0 * ... * f_k
        for k in range(1, degree):
            prefixes.append(prefixes[-1] * f[..., k, :])
        return prefixes[-1], prefixes[:-1]

    @staticmethod
    def setup_context(ctx, inputs, output):
        z, ctx.degree, ctx.d_out = inputs
        ctx.save_for_backward(z, *output[1])
        ctx.save_for_forward(z)
        ctx.mark_non_differentiable(*output[1])

    @staticmethod
    def jvp(ctx, dz: torch.Tensor, *_):
        """Forward mode (torch.func.jacfwd, a Gauss-Newton Jacobian): the product rule along the
        running products, d(p_k) = d(p_{k-1}) f_k + p_{k-1} df_k."""
        z = ctx.saved_tensors[0]  # (..., d * D_out)
        f = z.unflatten(-1, (ctx.degree, ctx.d_out))  # (..., d, D_out)
        df = dz.unflatten(-1, (ctx.degree, ctx.d_out))
        p, dp = f[..., 0, :], df[..., 0, :]  # (..., D_out)
        for k in range(1, ctx.degree):
            p, dp = p * f[..., k, :], dp * f[..., k, :] + p * df[..., k, :]
        return dp, None  # the running products are an output without a derivative

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor, *_):  # grad (..., D_out)
        z, *prefixes = ctx.saved_tensors
        d = ctx.degree
        f = z.unflatten(-1, (d, ctx.d_out))  # (..., d, D_out)
        if torch._C._are_functorch_transforms_active():
            # inside torch.func transforms (a per-example gradient under vmap) out= has no
            # batching rule: the same products, stacked
            grads, after = [], grad
            for k in range(d - 1, 0, -1):
                grads.append(after * prefixes[k - 1])
                after = after * f[..., k, :]
            return torch.stack([after, *reversed(grads)], -2).flatten(-2), None, None
        out = torch.empty_like(f)  # (..., d, D_out): one slice per factor's gradient
        # d out / d f_k = (f_0 ... f_{k-1}) (f_{k+1} ... f_{d-1}); `after` runs over the second
        # product times grad, from the last factor down
        after = grad
        for k in range(d - 1, 0, -1):
            torch.mul(after, prefixes[k - 1], out=out[..., k, :])
            after = after * f[..., k, :]
        out[..., 0, :] = after
        return out.flatten(-2), None, None

    @staticmethod
    def vmap(info, in_dims, z, degree, d_out):
        # elementwise over every leading dimension: a batch dimension is one more of them
        if in_dims[0] is None:
            return _ProductOfFactors.apply(z, degree, d_out), (None, None)
        y, prefixes = _ProductOfFactors.apply(z.movedim(in_dims[0], 0), degree, d_out)
        return (y, prefixes), (0, [0] * len(prefixes))


def product_of_factors(z: torch.Tensor, degree: int, d_out: int) -> torch.Tensor:
    """Multiply the `degree` slices of width d_out that a fused projection produced
    (`product_of_factors_reference`, with a hand-written backward)."""
    if degree == 1:
        return z
    return _ProductOfFactors.apply(z, degree, d_out)[0]  # (..., D_out)


def init_unit_factors(linear: nn.Linear) -> None:
    """Each factor W_k x gets unit variance for unit-variance x, so the product keeps unit scale."""
    nn.init.normal_(linear.weight, std=1.0 / math.sqrt(linear.in_features))
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


@BLOCKS.register
class Poly(Block):
    """Elementwise product of d affine maps; homogeneous of degree d without bias (seed 000 3.1)."""

    stackable = True

    examples = [
        {"degree": 1},
        {"degree": 2, "bias": False},
        {"degree": 3},
        {"degree": 3, "bias": False},
        {"degree": 4, "bias": False},
    ]

    def __init__(self, d_in: int, d_out: int, degree: int = 3, bias: bool = True):
        super().__init__(d_in, d_out)
        if isinstance(degree, float) and degree.is_integer():
            degree = int(degree)
        if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
            raise UserError(f"poly block needs an integer degree >= 1, got {degree!r}")
        self.degree, self.bias = degree, bias
        # one fused projection for all d factors: a single matmul instead of d small ones
        self.proj = nn.Linear(d_in, degree * d_out, bias=bias)
        init_unit_factors(self.proj)

    @property
    def homogeneous_degree(self) -> float | None:
        return None if self.bias else float(self.degree)

    @classmethod
    def count_params(cls, d_in: int, d_out: int, degree: int = 3, bias: bool = True) -> int:
        return int(degree) * (d_in * d_out + (d_out if bias else 0))

    @torch.no_grad()
    def scale_output_(self, c: float) -> None:
        # the output is linear in the last factor's weights and bias together
        last = slice((self.degree - 1) * self.d_out, None)
        self.proj.weight[last] *= c
        if self.proj.bias is not None:
            self.proj.bias[last] *= c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return product_of_factors(self.proj(x), self.degree, self.d_out)  # (..., D_out)

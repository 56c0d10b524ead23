"""The rank of a network's input Jacobian over a sample of inputs: whether it can see every input.

A network that depends on its n inputs only through k < n linear combinations (LayerNorm without
affine weights at width <= n removes the all-ones direction from every block input and from the
readout) has every per-example input gradient in one k-dimensional subspace, so the gradients of
a sample, stacked, have rank k: no fit can recover what the hidden directions carry. The rank is
read in float64 from the singular values, relative to the largest (`RANK_RTOL`).

Where every example's gradients are the same (`affine`: the network is affine in its inputs, as
logistic regression is), the stacked rank is one example's, at most its number of outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

RANK_RTOL = 1e-8  # a singular value below this share of the largest counts as zero (float64)
# every example's gradient within this share of the largest entry of the first's: affine inputs
AFFINE_RTOL = 1e-9


@dataclass(frozen=True)
class InputRank:
    rank: int
    inputs: int  # the input dimension: the columns of the stacked Jacobian
    singular_values: tuple[float, ...]  # descending
    rows: int  # the finite rows read: 0 when every output overflowed (nothing measured)
    outputs: int = 0  # each example's outputs: the rows it adds to the stack
    affine: bool = False  # every example's gradients are the first's: the network is affine

    @property
    def full(self) -> bool:
        return self.rank >= self.inputs


def input_rank(model: nn.Module, x: torch.Tensor, rtol: float = RANK_RTOL) -> InputRank:
    """Stack the input gradient of every output of every example of `x` (B, ...) into a
    (B * outputs, inputs) matrix, each row scaled to unit length, and count its singular values
    above `rtol` of the largest. The
    examples must not interact (no batch statistics), which holds for every blocklab network."""
    model = model.double()
    x = x.detach().double().requires_grad_(True)  # (B, ...)
    out = model(x).reshape(len(x), -1)  # (B, outputs)
    rows = [
        torch.autograd.grad(out[:, j].sum(), x, retain_graph=j + 1 < out.shape[1])[0].reshape(
            len(x), -1
        )  # (B, inputs): example i's gradient in row i
        for j in range(out.shape[1])
    ]
    affine = len(x) > 1 and all(_same(g) for g in rows)  # one example alone says nothing
    jac = torch.cat(rows)  # (B * outputs, inputs)
    jac = jac[torch.isfinite(jac).all(1)]  # a row that overflowed says nothing about the rank
    # each gradient to unit length: the rank counts the directions the gradients span, which an
    # example whose gradient is 1e20 times the others' (a deep network without norms) would hide
    norms = jac.norm(dim=1, keepdim=True)
    jac = jac[norms[:, 0] > 0] / norms[norms[:, 0] > 0]
    if not len(jac):
        return InputRank(0, x[0].numel(), (), 0, out.shape[1])
    s = torch.linalg.svdvals(jac)
    rank = int((s > rtol * s[0]).sum()) if len(s) and s[0] > 0 else 0
    singular = tuple(float(v) for v in s)
    return InputRank(rank, jac.shape[1], singular, len(jac), out.shape[1], affine)


def _same(g: torch.Tensor) -> bool:
    """Every example's gradient of one output (rows of `g`, (B, inputs)) equals the first's,
    within AFFINE_RTOL of its largest entry."""
    if not torch.isfinite(g).all():
        return False
    scale = float(g[0].abs().max())
    return float((g - g[:1]).abs().max()) <= AFFINE_RTOL * scale

"""Rank collapse (seed 003, after Dong et al.): how close a layer's T token vectors come to being
one and the same vector, layer after layer.

res(X) = X - 1 x^T with x the column mean of X (T, D). Seed 003 defines x as the argmin of
||X - 1 x^T||; the column mean is the exact minimiser in the Frobenius norm, and for the composite
norm it is the usual choice, not necessarily the minimiser. ||X||_{1,inf} = sqrt(||X||_1 ||X||_inf)
(seed 003 Definition 2.1), with ||X||_1 the largest absolute column sum and ||X||_inf the largest
absolute row sum. The measured curve is the per-layer ratio ||res(X_l)|| / ||res(X_0)||.

Beside it, for a stack of pure single-head softmax attention layers (no skip, feed-forward or
normalization, seed 003 section 2.1), the bound of seed 003 Theorem 2.2 with beta read from the
weights: ||W_QK||_1 ||W_V||_{1,inf}, W_QK = Wq^T Wk and W_V = Wv^T Wo in the row convention
X (T, D), maximised over layers, as the theorem takes one beta for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from blocklab import theory
from blocklab.blocks.softmax_attention import SoftmaxAttention
from blocklab.errors import UserError
from blocklab.measures import MEASURES
from blocklab.measures.base import Measure

NORMS = ("composite", "frobenius")


def residual(x: torch.Tensor) -> torch.Tensor:
    """res(X) = X - 1 x^T, x the mean over the token axis; x: (..., T, D)."""
    return x - x.mean(-2, keepdim=True)  # (..., T, D)


def composite_norm(x: torch.Tensor) -> torch.Tensor:
    """||X||_{1,inf} = sqrt(max_j sum_i |X_ij| * max_i sum_j |X_ij|) per matrix; x: (..., T, D)."""
    a = x.abs()
    return (a.sum(-2).amax(-1) * a.sum(-1).amax(-1)).sqrt()  # (...)


def matrix_norm(x: torch.Tensor, norm: str) -> torch.Tensor:
    if norm == "composite":
        return composite_norm(x)
    if norm == "frobenius":
        return torch.linalg.matrix_norm(x)  # (...)
    raise UserError(f"unknown norm {norm!r} (known: {', '.join(NORMS)})")


def layer_states(model: nn.Module | Sequence[nn.Module], x: torch.Tensor) -> list[torch.Tensor]:
    """[X_0, X_1, ..., X_L]: for a blocklab `Net` X_0 is the embedded input and X_l the output of
    layer l; for an nn.Sequential, ModuleList or list of modules X_0 is x itself."""
    if hasattr(model, "layers") and hasattr(model, "embed"):
        if getattr(model, "seq_len", 1) is None:
            raise UserError("rank collapse needs a sequence network (tokens), not a vector one")
        first, layers = model.embed, _layers(model)
    elif isinstance(model, nn.Sequential | nn.ModuleList | list | tuple):
        first, layers = None, list(model)
    else:
        raise UserError(
            "rank collapse reads a network layer by layer: give a blocklab Net, an nn.Sequential, "
            f"an nn.ModuleList or a list of modules, not {type(model).__name__}"
        )
    if x.dim() != 3:
        raise UserError(f"rank collapse needs token inputs (B, T, D), got {tuple(x.shape)}")
    with torch.no_grad():
        states = [first(x) if first is not None else x]  # (B, T, D)
        for layer in layers:
            states.append(layer(states[-1]))  # (B, T, D)
    return states


def _layers(model: nn.Module | Sequence[nn.Module]) -> list[nn.Module]:
    return list(model.layers) if hasattr(model, "layers") else list(model)


def pure_attention(layer: nn.Module) -> nn.Module | None:
    """The single-head, bias-free softmax attention block that `layer` consists of, else None."""
    block = layer
    if hasattr(layer, "block"):  # a models.Layer: only the block may act, nothing around it
        plain = all(isinstance(m, nn.Identity) for m in (layer.norm, layer.act))
        if not plain or layer.residual or layer.ff is not None:
            return None
        block = layer.block
    if not isinstance(block, SoftmaxAttention) or block.heads != 1 or block.bias:
        return None
    return block


def attention_beta(block: nn.Module) -> float:
    """||W_QK||_1 ||W_V||_{1,inf} of a single-head softmax attention block (seed 003 Thm 2.2)."""
    with torch.no_grad():
        w_qk = block.q.weight.double().T @ block.k.weight.double()  # (D, D)
        w_v = block.v.weight.double().T @ block.o.weight.double().T  # (D, D)
        one = w_qk.abs().sum(0).max()  # largest absolute column sum
        return float(one * composite_norm(w_v))


def seed003_bound(
    model: nn.Module | Sequence[nn.Module], residual0: np.ndarray
) -> np.ndarray | None:
    """ln of Theorem 2.2's bound on the ratio at layers 1..L, per sequence (L, B); None unless
    every layer is pure single-head softmax attention."""
    blocks = [pure_attention(layer) for layer in _layers(model)]
    if not blocks or any(b is None for b in blocks):
        return None
    beta = max(attention_beta(b) for b in blocks)
    d_qk = blocks[0].head_dim
    return np.array(
        [
            [theory.collapse_bound_ratio_log(depth, beta, d_qk, float(r)) for r in residual0]
            for depth in range(1, len(blocks) + 1)
        ]
    )


@dataclass(frozen=True, eq=False)
class CollapseResult:
    """Per-layer residual ratios of every input sequence: `ratios[norm]` is (L + 1, B)."""

    ratios: dict[str, np.ndarray]
    residual0: dict[str, np.ndarray]  # ||res(X_0)|| per sequence, (B,)
    # ln of seed 003's bound on the composite-norm ratio at layers 1..L, (L, B); None where the
    # theorem does not apply (anything but pure single-head softmax attention)
    bound_log: np.ndarray | None = None

    def median(self, norm: str = "composite") -> np.ndarray:
        """The median ratio over the input sequences at each layer, (L + 1,)."""
        return np.median(self.ratios[norm], axis=1)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": float(self.median()[-1])}
        for norm, r in self.ratios.items():
            out[norm] = {
                "median": np.median(r, axis=1).tolist(),
                "q25": np.quantile(r, 0.25, axis=1).tolist(),
                "q75": np.quantile(r, 0.75, axis=1).tolist(),
                "residual0_median": float(np.median(self.residual0[norm])),
            }
        if self.bound_log is not None:
            # log10, as the bound leaves the float range within a few layers
            out["composite"]["bound_log10_median"] = (
                np.median(self.bound_log, axis=1) / np.log(10)
            ).tolist()
        return out


def rank_collapse(
    model: nn.Module | Sequence[nn.Module], x: torch.Tensor, norms: Sequence[str] = NORMS
) -> CollapseResult:
    """||res(X_l)|| / ||res(X_0)|| for every layer l and input sequence, in each norm."""
    states = layer_states(model, x)
    ratios, residual0 = {}, {}
    for norm in norms:
        sizes = torch.stack([matrix_norm(residual(s.double()), norm) for s in states])  # (L+1, B)
        if (sizes[0] <= 0).any():
            raise UserError(
                "an input sequence has identical tokens: res(X_0) = 0 and the ratio is undefined"
            )
        ratios[norm] = (sizes / sizes[0]).cpu().numpy()  # the model's device: to the host
        residual0[norm] = sizes[0].cpu().numpy()
    bound = seed003_bound(model, residual0["composite"]) if "composite" in norms else None
    return CollapseResult(ratios, residual0, bound)


@MEASURES.register
class Collapse(Measure):
    """Rank collapse through depth: the median residual ratio after the last layer (headline)
    and at every layer, over standard normal input sequences."""

    @dataclass(frozen=True)
    class Options:
        sequences: int = 32  # input sequences (drawn, or the first of those given) per median

        def __post_init__(self):
            if self.sequences < 1:
                raise ValueError(f"sequences must be >= 1, got {self.sequences}")

    examples = [{}, {"sequences": 5}]

    def measure(self, model, seq_len, dim, seed=0, inputs=None) -> dict[str, Any]:
        param = next(model.parameters(), torch.empty(0))
        if inputs is None:
            g = torch.Generator().manual_seed(seed)
            inputs = torch.randn(self.options.sequences, seq_len, dim, generator=g)  # (B, T, D)
        x = inputs[: self.options.sequences].to(param.device, param.dtype)  # (B, T, D)
        return rank_collapse(model, x).summary()

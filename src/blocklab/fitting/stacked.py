"""The ensemble's "stacked" forward path: E networks of one architecture as one network whose
weights carry a leading member axis, run on (E, B, ...) inputs (`blocklab.fitting.ensemble`).

`stack_weights` rewrites a copy of one member in place: each nn.Linear becomes a `StackedLinear`
(one batched matmul, (E, out, in) weights), each nn.Embedding a `StackedEmbedding` (a lookup in
(E, V, D) tables), and every other parameter becomes its (E, *shape) stack, which the module that
holds it reads through `blocks.per_member`. `stackable` says which networks this is exact for.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from blocklab.blocks.base import Block
from blocklab.models import Net


class _StackedMatmul(torch.autograd.Function):
    """x W^T + b for E members. Written out so the weight gradient comes out contiguous in the
    weight's own layout (E, out, in); autograd's transpose would cost a copy per weight.

    Under autocast it computes as nn.Linear does: inputs cast to autocast's dtype, saved in it,
    and the backward's matmuls in that dtype too. The backward runs after the autocast region
    has exited, so it cannot rely on autocast to cast for it (a bf16 gradient against a float32
    weight fails: "expected scalar type BFloat16 but found Float"); the gradients return in each
    input's own dtype."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.has_bias = bias is not None
        if not torch.is_autocast_enabled(x.device.type):
            ctx.save_for_backward(x, weight)
            return _matmul(x, weight, bias)
        dtype = torch.get_autocast_dtype(x.device.type)
        x, weight = x.to(dtype), weight.to(dtype)
        bias = None if bias is None else bias.to(dtype)
        ctx.save_for_backward(x, weight)
        with torch.autocast(x.device.type, enabled=False):
            return _matmul(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: Tensor):  # (E, N, out)
        x, weight = ctx.saved_tensors
        grad = _cast(grad, x.dtype)
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        grad_x = _cast(torch.bmm(grad, weight), x_dtype) if ctx.needs_input_grad[0] else None
        grad_w = _cast(torch.bmm(grad.mT, x), w_dtype)  # (E, out, in)
        grad_b = _cast(grad.sum(1), b_dtype) if ctx.has_bias else None
        return grad_x, grad_w, grad_b


def _cast(t: Tensor, dtype: torch.dtype) -> Tensor:
    # `t.to(dtype)` without its call where the dtype already is `dtype`: a no-op `to` is still one
    # more operator dispatched, four per layer's backward, each a GPU step's overhead
    return t if t.dtype == dtype else t.to(dtype)


def _matmul(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    if bias is None:
        return torch.bmm(x, weight.mT)  # (E, N, out)
    return torch.baddbmm(bias.unsqueeze(1), x, weight.mT)  # (E, N, out)


class StackedLinear(nn.Module):
    """E nn.Linear maps at once: (E, ..., in) -> (E, ..., out) by one batched matmul."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        super().__init__()
        self.weight = nn.Parameter(weight)  # (E, out, in)
        self.bias = None if bias is None else nn.Parameter(bias)  # (E, out)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(x.shape[0], -1, x.shape[-1])  # (E, N, in)
        y = _StackedMatmul.apply(flat, self.weight, self.bias)  # (E, N, out)
        return y.view(*x.shape[:-1], y.shape[-1])


class StackedEmbedding(nn.Module):
    """E nn.Embedding tables at once: ids (E, ...) -> (E, ..., D), member e reading table e."""

    def __init__(self, weight: Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight)  # (E, V, D)

    def forward(self, ids: Tensor) -> Tensor:
        size, vocab = self.weight.shape[:2]
        # one lookup in the tables laid end to end: member e's ids move to rows e * V onwards
        shift = torch.arange(0, size * vocab, vocab, device=ids.device)  # (E,)
        rows = ids + shift.view(size, *[1] * (ids.dim() - 1))  # (E, ...)
        return F.embedding(rows, self.weight.flatten(0, 1))  # (E, ..., D)


def _plain_embedding(m: nn.Module) -> bool:
    # the options that change a lookup's values or gradient have no stacked form here
    return (
        type(m) is nn.Embedding
        and m.padding_idx is None
        and m.max_norm is None
        and not (m.sparse or m.scale_grad_by_freq)
    )


def stackable(model: nn.Module) -> bool:
    """Whether the "stacked" path can run the model: a `Net` of `stackable` blocks whose
    parameters all sit in nn.Linear maps, plain nn.Embedding tables, or modules that read their
    raw parameters through `per_member` (a stackable block's own, the network's positions)."""
    if not isinstance(model, Net):
        return False
    if not all(getattr(layer.block, "stackable", False) for layer in model.layers):
        return False
    for m in model.modules():
        if not any(True for _ in m.parameters(recurse=False)):
            continue
        if type(m) is nn.Linear or _plain_embedding(m) or m is model:
            continue
        if not (isinstance(m, Block) and m.stackable):
            return False
    return True


def parent_of(root: nn.Module, name: str) -> tuple[nn.Module, str]:
    """The module holding the dotted `name` under root, and the name's last part."""
    path, _, leaf = name.rpartition(".")
    return (root.get_submodule(path) if path else root), leaf


def stack_weights(net: nn.Module, stacked: dict[str, Tensor]) -> None:
    """Give `net` (a copy of one member) every member's weights: `stacked` maps each parameter
    name to its (E, ...) stack. Run only on networks that are `stackable`."""
    for name, mod in list(net.named_modules()):
        if type(mod) is nn.Linear:
            parent, leaf = parent_of(net, name)
            bias = stacked.get(f"{name}.bias")
            setattr(parent, leaf, StackedLinear(stacked[f"{name}.weight"], bias))
        elif type(mod) is nn.Embedding:
            parent, leaf = parent_of(net, name)
            setattr(parent, leaf, StackedEmbedding(stacked[f"{name}.weight"]))
    for name, _ in list(net.named_parameters()):
        parent, leaf = parent_of(net, name)
        if not isinstance(parent, (StackedLinear, StackedEmbedding)):
            # a raw parameter: its module reads the (E, *shape) stack through `per_member`
            setattr(parent, leaf, nn.Parameter(stacked[name]))

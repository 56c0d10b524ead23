"""Block interface: a module (B, ..., D_in) -> (B, ..., D_out) that states its degree and size."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from blocklab.errors import UserError


class Block(nn.Module):
    """Subclass, decorate with `@BLOCKS.register`, and define `count_params` in closed form.

    `degree` is the polynomial degree in the input (None when the block is not a polynomial).
    `homogeneous_degree` is k when f(c x) = c^k f(x) holds for c > 0 (bias-free polynomials, and
    ReLU maps without bias), else None: the contract tests check it by scaling the input.
    """

    name: ClassVar[str]
    # constructor kwargs the contract tests instantiate (besides d_in, d_out)
    examples: ClassVar[list[dict[str, Any]]] = [{}]
    # token-mixing blocks take (B, T, D_in) and mix positions; per-token ones any (B, ..., D_in)
    mixes_tokens: ClassVar[bool] = False
    # blocks whose weights depend on the sequence length take it as the keyword `seq_len`
    needs_seq_len: ClassVar[bool] = False
    # blocks an ensemble may run on stacked weights, all members in one computation
    # (`blocklab.fitting.ensemble`): the forward takes any leading dimensions, (E, B, T, D) as
    # (B, T, D), by reading only the input's trailing ones (x.shape[-2], `...` einsums,
    # softmax(dim=-1), masks on the last two dimensions); its nn.Linear weights become one batched
    # matmul each; and a raw nn.Parameter it holds itself (such as a position-mixing (T, T) matrix)
    # arrives stacked as (E, *shape), which the block reads through `per_member`. Any other block is
    # run under torch.func.vmap.
    stackable: ClassVar[bool] = False
    # blocks defined for d_in == d_out only (a wrapped module of one width): networks use them
    # width to width, and the contract checks build them so
    same_width: ClassVar[bool] = False

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.d_in, self.d_out = d_in, d_out

    degree: float | None = None
    # the degree of the block's multiplicative skeleton, softmax, feature maps and normalizations
    # read as the identity: attention's (x Wq)(x Wk)^T (x Wv) is 3, as seed 000 counts it. None:
    # the polynomial `degree` stands for it (`nominal_degree`)
    mixing_degree: ClassVar[float | None] = None

    @property
    def nominal_degree(self) -> float | None:
        """The degree a comparison of blocks by degree reads: `mixing_degree`, else `degree`."""
        return self.degree if self.mixing_degree is None else self.mixing_degree

    @property
    def homogeneous_degree(self) -> float | None:
        return None

    @classmethod
    def count_params(cls, d_in: int, d_out: int, **kwargs: Any) -> int:
        raise TypeError(f"block {cls.__name__} must define count_params in closed form")

    @classmethod
    def code_modules(cls, **kwargs: Any) -> tuple[str, ...]:
        """Modules besides the block's own whose code shapes it (such as a wrapped factory's):
        their source joins the fingerprint of every trial that uses the block."""
        return ()

    def scale_output_(self, c: float) -> None:
        """Multiply the block's output by `c` >= 0 through its parameters, in place: a network
        rescales a residual branch this way without changing its function (the degree sweep's
        depth ladder). By default through the block's last nn.Linear where its output is that
        Linear's own (an output projection: W h + b is c times itself when W and b are), else
        through the last of its modules in whose own parameters the output is homogeneous of
        degree one (`linear_factor`: one factor of a product such as a(x) * b(x) * c(x)). A
        block whose output is neither cannot join a ladder (`models.check_ladder` says so)
        unless it overrides this."""
        final = self.final_linear() or self.linear_factor()
        if final is None:
            raise UserError(
                f"block {self.registered_name} cannot rescale its output through its parameters "
                "(its output is neither an nn.Linear's own nor linear in one module's "
                "parameters: implement scale_output_)"
            )
        with torch.no_grad():
            for p in final.parameters(recurse=False):
                p.mul_(c)

    def linear_factor(self) -> nn.Module | None:
        """The last module (in `modules()` order) whose own parameters the block's output is
        homogeneous of degree one in, found by probing: every one of its parameters times 2
        doubles the output, on random inputs, to float rounding. None where no module's does."""
        first = next(self.parameters(), None)
        seq_len = getattr(self, "seq_len", None) if self.needs_seq_len else 2
        if first is None or not isinstance(seq_len, int):
            return None
        # the probe draws no random numbers that a fit would otherwise have drawn
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            x = torch.randn(2, seq_len, self.d_in, dtype=first.dtype, device=first.device)
            try:
                y = self(x)  # (2, T, D_out)
            except Exception:  # a block that cannot run on the probe does not qualify
                return None
            if y.abs().max() == 0:  # an output of zeros doubles under anything
                return None
            found = None
            for module in self.modules():
                own = [p for p in module.parameters(recurse=False) if p.requires_grad]
                if not own:
                    continue
                for p in own:
                    p.mul_(2.0)
                try:
                    twice = self(x)
                finally:
                    for p in own:
                        p.div_(2.0)  # times 2 then over 2: the same bits back
                tol = 1e-4 if y.dtype != torch.float64 else 1e-10
                if torch.allclose(twice, 2 * y, rtol=tol, atol=tol * float(y.abs().max())):
                    found = module
        return found

    def silence_(self) -> bool:
        """Make the block output zero while its gradient stays alive, in place: a layer added
        to a fitted network then leaves its function unchanged (the depth ladder). Returns
        whether the output is exactly zero. The default zeroes what `scale_output_` scales,
        which for a product of factors leaves the other factors' gradient to the zeroed one."""
        self.scale_output_(0.0)
        return True

    @property
    def registered_name(self) -> str:
        """The name the block is registered under (`BLOCKS`), as arms and flags name it."""
        return getattr(type(self), "name", type(self).__name__.lower())

    def final_linear(self) -> nn.Linear | None:
        """The nn.Linear whose output the block returns as its own, found by one probe call:
        the block's output is that very tensor, the module ran once and shares no parameter
        with another module. None when there is none (a product, an activation after it)."""
        linears = [m for m in self.modules() if isinstance(m, nn.Linear)]
        first = next(self.parameters(), None)
        seq_len = getattr(self, "seq_len", None) if self.needs_seq_len else 2
        if not linears or first is None or not isinstance(seq_len, int):
            return None
        calls: list[tuple[nn.Module, object]] = []
        hooks = [
            m.register_forward_hook(lambda m, args, out: calls.append((m, out))) for m in linears
        ]
        x = torch.ones(1, seq_len, self.d_in, dtype=first.dtype, device=first.device)
        try:
            # the probe draws no random numbers that a fit would otherwise have drawn
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                y = self(x)  # (1, T, D_out)
        except Exception:  # a block that cannot run on the probe does not qualify
            return None
        finally:
            for hook in hooks:
                hook.remove()
        last = [m for m, out in calls if out is y]
        if len(last) != 1 or sum(m is last[0] for m, _ in calls) != 1:
            return None
        final = last[0]
        own = {id(p) for p in final.parameters()}
        for module in self.modules():
            if module is not final and any(id(p) in own for p in module.parameters(recurse=False)):
                return None  # a shared weight moves more than the output
        return final

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_out={self.d_out}, degree={self.degree}"


def per_member(param: Tensor, like: Tensor, rank: int) -> Tensor:
    """A raw parameter of `rank` dimensions as it meets `like` by broadcasting: as it is in one
    network; an ensemble's stacked copy (E, *shape) as (E, 1, ..., 1, *shape) with the rank of
    `like` (E, B, ...), so member e's slice meets member e's inputs alone."""
    if param.dim() == rank:
        return param
    return param.view(param.shape[0], *[1] * (like.dim() - param.dim()), *param.shape[1:])


def make_block(name: str, d_in: int, d_out: int, **kwargs) -> Block:
    """The registered block `name` (`blocklab.blocks.BLOCKS`, plugins' included), d_in -> d_out."""
    from blocklab.blocks import BLOCKS  # the registry its entries, this module's subclasses, fill

    return BLOCKS.get(name)(d_in, d_out, **kwargs)

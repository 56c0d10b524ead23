"""Functional dimension (Kileel, Trager, Bruna 2019, "On the expressive power of deep polynomial
neural networks", arXiv 1905.12207): the dimension of the set of functions a network's
architecture computes, read as the rank of the Jacobian of its outputs on generic inputs with
respect to its parameters, at the module's current (for a fresh network, generic) values.

The parameter map theta -> (f_theta(x_1), ..., f_theta(x_n)) has, at a generic theta and enough
generic inputs, a Jacobian whose rank is the dimension of the function space (the
neurovariety's, for a polynomial network). Every direction in its kernel is a redundancy of the
parametrization: a degree-d product layer (W_1 x) * ... * (W_d x) of width w has (d - 1) w of
them, as row i of one factor times c and row i of another times 1/c leave the product unchanged
(a bias moving with its row), so a stack of L such layers spans at most P - (d - 1) w L
dimensions. Fewer are reached where the network cannot show them: inputs of lower dimension
than its width, a readout of fewer outputs without norms before it, low degrees, and ReLU units
that few inputs switch on (a unit is seen only through those), which also makes a ReLU network's
rank depend on the inputs read.

The rank is numerical: singular values of the float64 Jacobian at or below `rtol` of the largest
are not counted. A redundant direction's singular value is float64 rounding (about 1e-16 of the
largest), a genuine one of a small network sits many orders above it; RTOL = 1e-9 sits in that
gap (the same margin as the grid ranks, `blocklab.numerics`). The rank is therefore a lower bound
of the generic rank, reached when the inputs are enough and the spectrum does not decay past
`rtol`; `saturated` says the matrix capped it: at `params`, no redundancy at all; at `rows`,
more inputs may find more.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from blocklab.errors import UserError
from blocklab.jacobian import FlatParams
from blocklab.measures import MEASURES
from blocklab.measures.base import Measure
from blocklab.numerics import RTOL
from blocklab.options import meta, validate

PARAMS = ("trainable", "budgeted")
# Jacobian numbers (rows x parameters) computed at once: a chunk's block is 32 MiB in float64,
# and the rows seen so far are folded into a (P, P) triangle, so memory does not grow with rows
CHUNK_NUMBERS = 1 << 22
MIN_INPUTS = 256  # generic inputs drawn by default, at least
ROWS_PER_PARAM = 4  # and at least this many Jacobian rows per parameter


@dataclass(frozen=True)
class FunctionalDimension:
    """The numerical rank of d(outputs)/d(parameters): `rank` <= `params`, ">=" when
    `saturated` by the rows."""

    rank: int
    params: int  # the parameters differentiated: the Jacobian's columns
    singular_values: tuple[float, ...]  # min(rows, params), descending, of the unit rows
    saturated: bool  # rank == min(rows, params): the matrix, not the network, capped the rank
    rtol: float
    rows: int  # the finite Jacobian rows read: inputs x outputs per input
    skipped: int = 0  # rows left out because the network overflowed on their input

    @property
    def redundant(self) -> int:
        """Parameter directions that do not change the function (at these inputs)."""
        return self.params - self.rank

    def rank_at(self, rtol: float) -> int:
        """The numerical rank at another relative tolerance, from the stored spectrum."""
        s = self.singular_values
        return int(sum(v > rtol * s[0] for v in s)) if s and s[0] > 0 else 0

    def summary(self) -> dict[str, Any]:
        s, r = self.singular_values, self.rank
        top = s[0] if s else 0.0
        return {
            "value": r,
            "rank": r,
            "params": self.params,
            "per_param": r / self.params,
            "redundant": self.redundant,
            "saturated": self.saturated,
            "rows": self.rows,
            "skipped": self.skipped,
            "rtol": self.rtol,
            # the gap the tolerance cuts: the largest value, and the last kept and first dropped
            # as shares of it (None where nothing is kept or dropped)
            "singular_values": {
                "max": top,
                "smallest_kept": s[r - 1] / top if r else None,
                "largest_dropped": s[r] / top if r < len(s) and top > 0 else None,
            },
        }


def enough_inputs(params: int, outputs: int) -> int:
    """Generic inputs for a rank over `params` parameters when each input gives `outputs` rows:
    ROWS_PER_PARAM rows per parameter, and at least MIN_INPUTS inputs."""
    return max(MIN_INPUTS, math.ceil(ROWS_PER_PARAM * params / max(1, outputs)))


def selected_parameters(module: nn.Module, params: str = "trainable") -> dict[str, torch.Tensor]:
    """name -> parameter differentiated: every one with requires_grad ("trainable"), or for a
    blocklab `Net` the budgeted ones, its layers (the names its `param_counts()["blocks"]`
    counts: "layers."); a module that is not a Net has no budget, so "budgeted" = trainable."""
    if params not in PARAMS:
        raise UserError(f"params must be one of {', '.join(PARAMS)}, got {params!r}")
    chosen = {n: p for n, p in module.named_parameters() if p.requires_grad}
    # a Net, recognized by what it has: this layer cannot import `blocklab.models`
    is_net = callable(getattr(module, "param_counts", None)) and hasattr(module, "layers")
    if params == "budgeted" and is_net:
        chosen = {n: p for n, p in chosen.items() if n.startswith("layers.")}
    return chosen


def functional_dimension(
    module: nn.Module, inputs: torch.Tensor, rtol: float = RTOL, params: str = "trainable"
) -> FunctionalDimension:
    """The rank of the Jacobian of every output of every input (rows of `inputs`, (N, ...)) with
    respect to the chosen parameters (`selected_parameters`), at the module's current values.

    Computed on a float64 copy in eval mode, so `module` is left as it was. The rows are the
    per-example Jacobian the second-order fits read (`blocklab.jacobian.FlatParams`: by layers
    where every parameter differentiated is an nn.Linear's, else vmap over inputs of jacrev over
    parameters): inputs must not interact, which holds for every network without batch
    statistics. The rows are folded chunk by chunk into
    the R factor of a QR decomposition, whose singular values are the Jacobian's, and the SVD is
    of that triangle: never of J^T J, which would square the condition number and lose half the
    digits that separate a redundant direction from a genuine one.

    Each row is scaled to unit length first (as `measures._jacobian.input_rank` does), which
    leaves the rank as it is: without it the few inputs in a Gaussian's tail, where a deep
    polynomial's gradients are orders of magnitude above the rest, set the largest singular value
    and push everything the other inputs see below the tolerance (a width-8, depth-4 stack of
    degree 4 without norms then reads 5 where its rank is 1056). The columns are not rescaled:
    that would lift a column of pure rounding (a parameter direction the outputs do not depend
    on, such as one a norm removes) to the size of the others."""
    if not isinstance(inputs, torch.Tensor) or inputs.dim() < 1 or len(inputs) < 1:
        raise UserError("functional_dimension needs a tensor of inputs (N, ...) with N >= 1")
    return _Jacobian(module, params).rank(inputs, rtol)


class _Jacobian:
    """A float64 eval-mode copy of a module and the parameters differentiated."""

    def __init__(self, module: nn.Module, params: str):
        self.model = copy.deepcopy(module).double().eval()  # the caller's module stays as it was
        self.chosen = selected_parameters(self.model, params)
        self.theta = {n: p.detach() for n, p in self.chosen.items()}
        self.params = sum(p.numel() for p in self.theta.values())
        if not self.params:
            raise UserError(f"the module has no {params} parameters to differentiate")
        self.device = next(iter(self.theta.values())).device

    def cast(self, x: torch.Tensor) -> torch.Tensor:
        """Inputs on the model's device, features in float64 (token ids stay integers)."""
        x = x.detach().to(self.device)
        return x.to(torch.float64) if x.is_floating_point() else x

    def output_shape(self, one: torch.Tensor) -> torch.Size:
        """The shape of one input's outputs (`one` shaped as a row of the inputs)."""
        with torch.no_grad():
            out = functional_call(self.model, self.theta, (self.cast(one).unsqueeze(0),))
        return out.shape[1:]  # (1, ...) without its batch of one

    def per_input(self, one: torch.Tensor) -> int:
        """The Jacobian rows one input gives: its outputs."""
        return self.output_shape(one).numel()

    def rank(self, inputs: torch.Tensor, rtol: float) -> FunctionalDimension:
        if not rtol > 0:
            raise UserError(f"rtol must be > 0, got {rtol!r}")
        x = self.cast(inputs)  # (N, ...)
        shape = self.output_shape(x[0])
        chunk = max(1, CHUNK_NUMBERS // max(1, shape.numel() * self.params))
        theta = torch.cat([p.reshape(-1) for p in self.theta.values()])  # (P,)
        tri = torch.zeros(0, self.params, dtype=torch.float64, device=self.device)  # (r, P)
        rows = skipped = 0
        path = None  # the first chunk's Jacobian path, kept for the others
        for start in range(0, len(x), chunk):
            part = x[start : start + chunk]  # (b, ...)
            zeros = torch.zeros(len(part), *shape, dtype=torch.float64, device=self.device)
            flat = FlatParams(self.model, part, zeros, self.chosen)  # residuals = outputs
            flat.path = path
            block = flat.jacobian(theta)  # (b K, P): example i's output k in row i K + k
            path = flat.path
            with torch.no_grad():
                finite = torch.isfinite(block).all(1)
                rows, skipped = rows + int(finite.sum()), skipped + int((~finite).sum())
                block = block[finite]
                norms = block.norm(dim=1, keepdim=True)  # (b K, 1); a zero row stays zero
                block = block / torch.where(norms > 0, norms, 1.0)
                stacked = torch.cat([tri, block])  # (r + b K, P)
                # the R factor of every row so far: J^T J = R^T R, the same singular values
                tri = torch.linalg.qr(stacked, mode="r").R  # (min(r + b K, P), P)
        with torch.no_grad():
            if not rows:
                raise UserError("the network's outputs overflowed on every input: nothing to read")
            s = torch.linalg.svdvals(tri).cpu()  # descending: those of the unit-row Jacobian
        rank = int((s > rtol * s[0]).sum()) if s[0] > 0 else 0
        return FunctionalDimension(
            rank=rank,
            params=self.params,
            singular_values=tuple(float(v) for v in s),
            saturated=rank == min(rows, self.params),
            rtol=rtol,
            rows=rows,
            skipped=skipped,
        )


@MEASURES.register
class Functional(Measure):
    """The functional dimension of a network (see `functional_dimension`) over standard normal
    input sequences drawn from the seed, or over the inputs given."""

    @dataclass(frozen=True)
    class Options:
        n_inputs: int = field(
            default=0,
            metadata=meta("inputs read (0: enough for the parameters, `enough_inputs`)", ge=0),
        )
        rtol: float = field(default=RTOL, metadata=meta("relative rank tolerance", gt=0, lt=1))
        params: str = field(
            default="trainable",
            metadata=meta("parameters differentiated: trainable, budgeted", choices=PARAMS),
        )

        def __post_init__(self):
            validate(self)

    examples = [{}, {"params": "budgeted", "n_inputs": 16}]

    def measure(self, model, seq_len, dim, seed=0, inputs=None) -> dict[str, Any]:
        o = self.options
        jacobian = _Jacobian(model, o.params)
        if inputs is None:
            one = torch.zeros(seq_len, dim, dtype=torch.float64)  # (T, D): its rows per input
            n = o.n_inputs or enough_inputs(jacobian.params, jacobian.per_input(one))
            g = torch.Generator().manual_seed(seed)
            inputs = torch.randn(n, seq_len, dim, generator=g, dtype=torch.float64)  # (N, T, D)
        elif o.n_inputs:
            inputs = inputs[: o.n_inputs]  # (N, T, D)
        return jacobian.rank(inputs, o.rtol).summary()

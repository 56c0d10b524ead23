"""Budget solver: the depth and width at which an arm's blocks cost a given number of parameters.

Seed 000 eq. 4: a stack of p degree-d layers of width D costs p * d * D^2, so at budget B the fixed
-width depth is p = B / (d D^2). Depth is rounded first, then the width adjusted so that the actual
count lands within `tol` of B; the actual count is what gets recorded.

Beside the nominal count, `functional_params` gives a cell's functional one: the dimension of the
function space its layers span (`blocklab.measures.functional`), what the nominal count pays for
less the redundant directions of its parametrization.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from blocklab.errors import UserError
from blocklab.models import Net, block_params
from blocklab.specs import BUDGET_TOLERANCE as TOLERANCE
from blocklab.specs import Arm, NetShape

if TYPE_CHECKING:
    from blocklab.measures.functional import FunctionalDimension


@dataclass(frozen=True)
class Shape:
    depth: int
    width: int
    block_params: int
    budget: int

    @property
    def deviation(self) -> float:
        return self.block_params / self.budget - 1.0


Cost = Callable[[int, int], int]  # (depth, width) -> parameters of the layers


def _best_width(cost: Cost, depth: int, budget: int, near: int) -> tuple[int, int]:
    """The width whose count is nearest the budget (counts grow with width); ties go to `near`."""
    lo, hi = 1, max(2, near)
    while cost(depth, hi) < budget:
        hi *= 2
    while lo < hi:  # first width with count >= budget
        mid = (lo + hi) // 2
        if cost(depth, mid) >= budget:
            hi = mid
        else:
            lo = mid + 1
    candidates = [w for w in (lo - 1, lo) if w >= 1]
    return min(
        ((w, cost(depth, w)) for w in candidates),
        key=lambda wc: (abs(wc[1] - budget), abs(wc[0] - near)),
    )


def solve(
    arm: Arm,
    budget: int,
    *,
    mode: str = "width",
    width: int = 32,
    depth: int = 4,
    bias: bool = False,
    ff: str = "none",
    seq_len: int | None = None,
    tol: float = TOLERANCE,
    hint: str = "",
) -> Shape:
    """mode 'width': depth from B / (per-layer cost at `width`), then width adjusted.
    mode 'depth': the depth is fixed and the width solved. The budget covers whole layers:
    blocks and, with `ff`, their feed-forward sublayers. A budget no shape meets is refused with
    one line ending in `hint`: the caller's settings that would change the answer."""
    tail = f"; {hint}" if hint else ""

    def cost(depth: int, width: int) -> int:
        return block_params(arm, depth, width, bias, ff, seq_len)

    if budget <= 0:
        raise UserError(f"budget must be a positive parameter count, got {budget}")
    if mode == "depth":
        if depth < 1:
            raise UserError(f"depth must be >= 1, got {depth}")
        if cost(depth, 1) > budget * (1 + tol):
            raise UserError(f"budget {budget} is too small for {depth} layers of {arm.label}{tail}")
        w, count = _best_width(cost, depth, budget, near=1)
        candidates = [(depth, w, count)]
    elif mode == "width":
        if width < 1:
            raise UserError(f"width must be >= 1, got {width}")
        one_layer = cost(1, width)
        if one_layer > budget * (1 + tol):
            raise UserError(
                f"budget {budget} is too small for one layer of {arm.label} at width {width} "
                f"(one layer costs {one_layer}){tail}"
            )
        p = 1
        while cost(p + 1, width) <= budget:
            p += 1

        # rounding: the depth at nominal width closest to the budget and its neighbours; at small
        # widths one width step can jump past the tolerance, so look further before refusing
        def shapes(depths):
            return [(q, *_best_width(cost, q, budget, near=width)) for q in depths]

        candidates = shapes(sorted({max(1, p - 1), p, p + 1}))
        within = [c for c in candidates if abs(c[2] / budget - 1) <= tol]
        if not within:
            candidates = shapes(range(1, 2 * p + 2))
            within = [c for c in candidates if abs(c[2] / budget - 1) <= tol]
        if within:  # the shape within tolerance whose width stays closest to the requested one
            candidates = [min(within, key=lambda c: (abs(c[1] - width), abs(c[2] - budget)))]
    else:
        raise UserError(f"mode must be 'width' or 'depth', got {mode!r}")
    q, w, count = min(candidates, key=lambda c: abs(c[2] - budget))
    if abs(count / budget - 1) > tol:
        raise UserError(
            f"no shape of {arm.label} costs within {tol:.0%} of budget {budget} "
            f"(closest: depth {q}, width {w}, {count} parameters){tail}"
        )
    return Shape(depth=q, width=w, block_params=count, budget=budget)


def functional_params(
    arm: Arm,
    shape: NetShape,
    n_in: int,
    n_out: int = 1,
    seed: int = 0,
    n_inputs: int | None = None,
) -> FunctionalDimension:
    """The functional dimension of a cell's layers: a vector `Net(arm, shape, n_in, n_out)` at
    its initialization from `seed` (drawn without touching the global random state), the rank of
    its outputs' Jacobian over its budgeted parameters (`param_counts()["blocks"]`, so the
    embedding and readout stay fixed) on standard normal inputs from `seed`: `n_inputs`, or
    enough for the count (`measures.functional.enough_inputs`)."""
    import torch

    from blocklab.measures.functional import enough_inputs, functional_dimension

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = Net(arm, shape, n_in, n_out)
    n = n_inputs or enough_inputs(net.param_counts()["blocks"], n_out)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, n_in, generator=g, dtype=torch.float64)  # (N, n_in)
    return functional_dimension(net, x, params="budgeted")

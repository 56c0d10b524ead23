"""What the degree sweep measures exactly, beside what it trains: each cell's functional count
(`functional_counts`) and each arm's exact per-parameter measures at the run's width
(`exact_measures`), both computed in seconds before any fit.

- Functional dimension (Kileel, Trager, Bruna 2019, arXiv 1905.12207; `measures.functional`):
  the rank of the Jacobian of the network's outputs with respect to its block parameters at
  generic values. A degree-d product layer of width w spends (d-1) w of its d w^2 parameters
  on rescalings of one factor's rows against another's, so per nominal parameter a poly stack
  has 1 - (d-1) / (d w) functional ones: the count favours low degrees, most at small widths.
- Exact separation rank (`measures.exact_rank`, over F_p): a degree-d network on two scalar
  variables is a polynomial of degree d^p, whose separation rank is d^p + 1 (seed 000 eq. 16;
  `experiments.seprank_degree`). At one budget every integer arm reaches (12 w^2 for d = 2, 3, 4:
  depths 6, 4, 3), its log per parameter is seed 000's degree proxy, which h(d) = ln d / d
  ranks d = 3 first.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import reduce
from typing import TYPE_CHECKING, Any

from blocklab.experiments.degree_sweep.config import (
    CONTROL_LABEL,
    CONTROLLED,
    DegreeSweepConfig,
)
from blocklab.experiments.degree_sweep.networks import Networks
from blocklab.experiments.degree_sweep.plan import Cells

if TYPE_CHECKING:
    from blocklab.specs import Arm

MAX_TEMPLATES = 1024  # an exact grid of M^2 points: beyond this the rank is left unmeasured
# the functional count's Jacobian has 4 rows per parameter, so its QR costs O(P^3): beyond this
# many parameters a cell's count is left unmeasured (None) and only the nominal count is fitted
MAX_FUNCTIONAL = 1024
VARIABLES = 2  # the separation rank's closed form (d^p + 1) holds for two scalar variables


def functional_counts(
    cfg: DegreeSweepConfig, cells: Cells, nets: Networks | None = None
) -> dict[tuple[int, str], dict[str, Any]]:
    """Per (budget, arm): the functional dimension of the cell's network at initialization
    (seed 0, teacher 0) over its budgeted parameters, on the task's first test inputs (at least
    four rows per parameter and output). `nets`: the cells' networks (`networks.Networks`)."""
    from blocklab.measures.functional import enough_inputs, functional_dimension

    nets = nets or Networks(cfg, cells)
    data = nets.data
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for key, (arm, shape) in cells.items():
        if shape.block_params > MAX_FUNCTIONAL:
            out[key] = {"functional_params": None, "params": shape.block_params, "saturated": None}
            continue
        model = nets.cell(arm, shape.depth, shape.width)  # measured on a float64 copy
        budgeted = model.param_counts()["blocks"]
        rows = enough_inputs(budgeted, max(1, math.prod(data.test.y.shape[1:])))
        got = functional_dimension(model, data.test.x[:rows], params="budgeted")
        out[key] = {"functional_params": got.rank, "params": got.params, "saturated": got.saturated}
    return out


def with_counts(counts, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with its cell's `functional_params` (`functional_counts`) beside `block_params`."""
    for r in rows:
        r["functional_params"] = counts[(int(r["budget"]), r["arm"])]["functional_params"]
    return rows


def _common_depths(degrees: list[int]) -> dict[int, int]:
    """Per integer degree, the depth at which every one costs lcm(degrees) layers of d w^2."""
    lcm = reduce(math.lcm, degrees, 1)
    return {d: lcm // d for d in degrees}


def exact_measures(cfg: DegreeSweepConfig, arms: list[Arm]) -> dict[str, dict[str, Any]]:
    """Per arm at the run's width: its functional dimension per nominal parameter (the run's
    shape: norm, residual, bias; on as many inputs as the width) with the closed form
    1 - (d-1) / (d w) for a poly arm, and for
    integer-degree arms the exact separation rank on two variables at the budget they share
    (`_common_depths`), the natural log of that rank per parameter and seed 000's d^p + 1. The
    control (`config.CONTROL_LABEL`) is d=3's block at d=3's shapes: its entry is d=3's."""
    from blocklab.budget import functional_params
    from blocklab.experiments._seprank import ANALYZED, build_net
    from blocklab.measures.exact_rank import exact_grid_rank
    from blocklab.models import block_params

    width = cfg.shape.width
    integer = sorted({int(a.degrees[0]) for a in arms if _integer_degree(a)})
    depths = _common_depths(integer)
    budget = (reduce(math.lcm, integer, 1) * width**2) if integer else None
    out: dict[str, dict[str, Any]] = {}
    for arm in arms:
        if arm.label == CONTROL_LABEL and CONTROLLED in out:  # the same network, measured once
            out[arm.label] = dict(out[CONTROLLED])
            continue
        d = int(arm.degrees[0]) if _integer_degree(arm) else None
        # the functional count's depth: the shared budget's for integer arms; the others near it
        depth = depths[d] if d else _depth_near(arm, cfg, budget)
        shape = replace(cfg.shape, depth=depth, bias=cfg.bias(arm))
        # as many inputs as the width: fewer would starve the first layer's rows, and the count
        # would measure the inputs rather than the architecture (width 8 on 2 inputs: 25 of 128)
        nominal = block_params(arm, depth, width, shape.bias, shape.ff, None)
        inputs = max(VARIABLES, width)
        fd = functional_params(arm, shape, inputs) if nominal <= MAX_FUNCTIONAL else None
        entry: dict[str, Any] = {
            "depth": depth,
            "params": nominal,
            "functional_dimension": fd.rank if fd else None,
            "functional_dimension_per_param": fd.rank / nominal if fd else None,
            "functional_predicted": (1 - (d - 1) / (d * width)) if d else None,
            "separation_rank": None,
            "separation_rank_per_param": None,
            "separation_predicted": None,
        }
        if d:
            predicted = d**depth + 1
            templates = 1 << max(1, math.ceil(math.log2(predicted + 1)))
            if templates <= MAX_TEMPLATES:
                analysed = build_net(arm, replace(ANALYZED, depth=depth, width=width), 2, 1, 0)
                rank = exact_grid_rank(analysed, VARIABLES, 1, "half", templates, 0, vector=True)
                params = block_params(arm, depth, width)
                entry.update(
                    separation_rank=rank.rank,
                    separation_rank_per_param=math.log(rank.rank) / params,
                    separation_predicted=predicted,
                )
        out[arm.label] = entry
    return out


def _integer_degree(arm: Arm) -> bool:
    return arm.block == "poly" and len(arm.degrees) == 1 and float(arm.degrees[0]).is_integer()


def _depth_near(arm: Arm, cfg: DegreeSweepConfig, budget: int | None) -> int:
    """The depth whose block count comes closest to `budget` (None: the arm's deepest, its
    --arm-depths entry's where it has one)."""
    from blocklab.models import block_params

    if budget is None:
        own = cfg.depths_by_arm().get(arm.label) if not cfg.budgets else None
        return max(own or cfg.depths or (cfg.shape.depth,))
    per_layer = block_params(arm, 1, cfg.shape.width, cfg.bias(arm), cfg.shape.ff, None)
    return max(1, round(budget / per_layer))

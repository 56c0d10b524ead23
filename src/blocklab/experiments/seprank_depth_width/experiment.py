"""`blocklab seprank depth-width` (seed 001, Theorems 1-2): grid ranks of linearized attention
networks vs depth L and width dx, between the theorems' bounds, across the threshold L = log3 dx.

The analyzed network of eq. 3 is `Net` with arm
linearized_attention(heads=H), no normalization, no residual, no feed-forward: the library's own
stack, so the measured object is what the library trains. Its embedding maps each position's
dx inputs by an invertible affine map (n_in = dx), and sep is unchanged by any invertible map
applied per position; the readout row folds into the last W_O, and its bias is a separable term
that the position-local terms absorb. So the measured function is seed 001's eq. 4 for a generic
weight draw. The grid has N = 2 positions (an M x M matrix): more positions multiply the rank so
fast that every depth but the first saturates at a feasible grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from blocklab.experiments import EXPERIMENTS, Command, Experiment, Trials
from blocklab.experiments._seprank import Point, check_grid, measure_points
from blocklab.numerics import RTOL
from blocklab.options import meta, validate
from blocklab.store import Store

if TYPE_CHECKING:
    from blocklab.specs import Arm


@dataclass(frozen=True)
class DepthWidthConfig:
    """Quick grid: N = 2, M = 1024 (a 1024 x 1024 matrix). dx = 10 is the smallest width with two
    depths below the threshold (L = 1, 2 < log3 10 = 2.1), and its L = 2 rank fits the grid;
    dx = 2, 3, 4 give several unsaturated depths above it."""

    widths: tuple[int, ...] = field(default=(2, 3, 4, 10), metadata=meta("widths dx", ge=1))
    depths: tuple[int, ...] = field(default=(1, 2, 3, 4), metadata=meta("depths L", ge=1))
    heads: int = field(default=1, metadata=meta("attention heads H per layer", ge=1))
    positions: int = field(default=2, metadata=meta("positions N (the grid is M^N points)", ge=2))
    templates: int = field(default=1024, metadata=meta("templates M per position", ge=1))
    seeds: int = field(default=3, metadata=meta("weight and template draws per point", ge=1))
    rtol: float = field(
        default=RTOL, metadata=meta("relative tolerance of the float64 rank", gt=0, lt=1)
    )

    def __post_init__(self):
        validate(self)
        if min(self.widths) <= self.heads:
            raise ValueError(f"every width must exceed heads = {self.heads} (seed 001: dx > H)")
        check_grid(self.positions, self.templates)

    @classmethod
    def full(cls) -> DepthWidthConfig:
        return cls(widths=(2, 3, 4, 6, 12), depths=(1, 2, 3, 4, 5), templates=2048, seeds=3)


def attention_arm(heads: int) -> Arm:
    from blocklab.models import parse_arm

    return parse_arm(f"linearized_attention(heads={heads})")


def run(cfg: DepthWidthConfig, store: Store, *, resources=None, progress=True) -> Trials:
    """Every point planned at once and measured on the CPU in `resources.workers` processes
    (`_seprank.measure_points`; one without `resources`): the exact rank is CPU arithmetic."""
    from blocklab.measures.exact_rank import PRIME
    from blocklab.models import code_modules

    arm = attention_arm(cfg.heads)
    block = f"linearized_attention(heads={cfg.heads})"  # what `attention_arm` parses
    planned, keys = [], []
    for dx in cfg.widths:
        for depth in cfg.depths:
            config = {"block": arm.label, "depth": depth, "width": dx, "positions": cfg.positions}
            config |= {"templates": cfg.templates, "rtol": cfg.rtol, "prime": PRIME}
            for seed in range(cfg.seeds):
                point = Point(block, depth, dx, cfg.positions, dx, cfg.templates, seed, cfg.rtol)
                planned.append((config, point, [__name__, *code_modules(arm)]))
                keys.append({"width": dx, "depth": depth, "seed": seed})
    records = measure_points(
        store, "seprank-depth-width", planned, resources=resources, progress=progress
    )
    rows = [
        row | rec["metrics"] | {"id": rec["id"]} for row, rec in zip(keys, records, strict=True)
    ]
    return Trials(rows, [])


@EXPERIMENTS.register
class SeprankDepthWidth(Experiment):
    Config = DepthWidthConfig
    run = staticmethod(run)
    forms = {"full": None}
    commands = (
        Command(
            "seprank depth-width",
            "seed 001: rank vs depth and width",
            "runs/seprank-depth-width",
        ),
    )
    pool = False  # the exact rank is CPU arithmetic: no devices, ensembles or executors
    workers = True  # the points measured in --workers processes

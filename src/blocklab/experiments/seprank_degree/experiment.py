"""`blocklab seprank degree` (seed 000 eq. 16-17, Task 1): does the separation rank of a
degree-d network grow like d^p, and which d grows fastest per parameter?

Per-token polynomial networks of bias-free degree-d blocks (no norm, no residual, no
activation), a vector network on N = 2 scalar variables (x, y). There the separation rank is
known in closed form: a polynomial f = sum c_ab x^a y^b of degree D has sep = rank(C) <= D + 1,
and = D + 1 when every top coefficient c_(a, D-a) is nonzero (C is then triangular after
reversing its columns, with a nonzero diagonal). The network has degree
D = d^p (eq. 16) with generic, nonzero top coefficients, so sep = d^p + 1, and an M-template
grid sees it exactly when M > d^p (the Vandermonde of distinct templates has full rank). More
variables would only give monomial-count bounds; two variables make the prediction exact. The
real degree e (`fractional`) is not a polynomial: its grid rank is bounded by the grid alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blocklab.experiments import EXPERIMENTS, Command, Experiment, Trials
from blocklab.experiments._seprank import Point, check_grid, measure_points
from blocklab.numerics import RTOL
from blocklab.options import meta, validate
from blocklab.specs import format_degree, parse_degree
from blocklab.store import Store


@dataclass(frozen=True)
class DegreeConfig:
    degrees: tuple[str, ...] = field(
        default=("2", "e", "3", "4"), metadata=meta("layer degrees d (integer: poly, real: e)")
    )
    width: int = field(default=8, metadata=meta("width w of every layer", ge=1))
    templates: int = field(
        default=512, metadata=meta("templates M per variable (M x M grid)", ge=1)
    )
    max_depth: int = field(
        default=12,
        metadata=meta("deepest p; each degree stops at its first saturated depth", ge=1),
    )
    seeds: int = field(default=3, metadata=meta("weight and template draws per point", ge=1))
    rtol: float = field(
        default=RTOL, metadata=meta("relative tolerance of the float64 rank", gt=0, lt=1)
    )
    alpha: float = field(
        default=0.05, metadata=meta("1 - level of the slope intervals", gt=0, lt=1)
    )

    def __post_init__(self):
        validate(self)
        for d in self.degrees:
            _degree(d)  # a single degree: 2, e, 3, ...
        check_grid(2, self.templates)

    @classmethod
    def full(cls) -> DegreeConfig:
        return cls(width=16, templates=2048, seeds=5)


def _degree(text: str) -> float:
    """A single layer's degree: 2, e, 3; a block's name or a per-layer list fails, saying what a
    degree is."""
    return parse_degree(text)


def degree_depths(d: float, cfg: DegreeConfig) -> list[int]:
    """1, 2, ... up to the first depth whose degree d^p reaches the grid (rank >= M there)."""
    depths = []
    for p in range(1, cfg.max_depth + 1):
        depths.append(p)
        if d**p + 1 > cfg.templates:
            break
    return depths


def run(cfg: DegreeConfig, store: Store, *, resources=None, progress=True) -> Trials:
    """Every point planned at once and measured on the CPU in `resources.workers` processes
    (`_seprank.measure_points`; one without `resources`): the exact rank is CPU arithmetic."""
    from blocklab.measures.exact_rank import PRIME
    from blocklab.models import block_params, code_modules, parse_arm

    planned, keys = [], []
    for text in cfg.degrees:
        arm, d = parse_arm(text), _degree(text)
        for p in degree_depths(d, cfg):
            config = {"block": arm.label, "depth": p, "width": cfg.width, "positions": 2}
            config |= {"templates": cfg.templates, "rtol": cfg.rtol, "prime": PRIME}
            for seed in range(cfg.seeds):
                # the real degree e is no polynomial: no exact rank
                exact = float(d).is_integer()
                point = Point(text, p, cfg.width, 2, 1, cfg.templates, seed, cfg.rtol, exact)
                planned.append((config, point, [__name__, *code_modules(arm)]))
                row = {"arm": format_degree(d), "degree": d, "depth": p, "seed": seed}
                keys.append(row | {"block_params": block_params(arm, p, cfg.width)})
    records = measure_points(
        store, "seprank-degree", planned, resources=resources, progress=progress
    )
    rows = [
        row | rec["metrics"] | {"id": rec["id"]} for row, rec in zip(keys, records, strict=True)
    ]
    return Trials(rows, [])


@EXPERIMENTS.register
class SeprankDegree(Experiment):
    Config = DegreeConfig
    run = staticmethod(run)
    forms = {"full": None}
    commands = (
        Command(
            "seprank degree",
            "seed 000: rank of degree-d networks vs depth",
            "runs/seprank-degree",
        ),
    )
    pool = False  # the exact rank is CPU arithmetic: no devices, ensembles or executors
    workers = True  # the points measured in --workers processes

"""Measures of expressive power: one family per file, registered by module name.

The registered measures apply to a network; the functions behind them apply to anything:
`separation_rank` (measure `seprank`) to any callable or module, `rank_collapse` (measure
`collapse`) to a network's layers, `exact_grid_rank` (measure `exact_rank`) to a polynomial
network's architecture over F_p, `functional_dimension` (measure `functional`) to any module.
"""

from blocklab.measures.base import Measure, make_measure, parse_measure
from blocklab.plugins import GROUPS
from blocklab.registry import Registry, import_submodules

MEASURES: Registry[type[Measure]] = Registry("measure", GROUPS["measure"])
import_submodules(__name__)

from blocklab.measures.collapse import CollapseResult, composite_norm, rank_collapse, residual  # noqa: E402
from blocklab.measures.functional import FunctionalDimension, functional_dimension  # noqa: E402
from blocklab.measures.seprank import SeparationRank, separation_rank  # noqa: E402

__all__ = [
    "MEASURES",
    "CollapseResult",
    "FunctionalDimension",
    "Measure",
    "SeparationRank",
    "composite_norm",
    "functional_dimension",
    "make_measure",
    "parse_measure",
    "rank_collapse",
    "residual",
    "separation_rank",
]

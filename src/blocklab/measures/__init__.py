"""Measures of expressive power: one family per file, registered by module name.

The registered measures apply to a network; the functions behind them apply to anything:
`separation_rank` (measure `seprank`) to any callable or module, `rank_collapse` (measure
`collapse`) to a network's layers, `exact_grid_rank` (measure `exact_rank`) to a polynomial
network's architecture over F_p, `functional_dimension` (measure `functional`) to any module.
"""

from blocklab.errors import UserError
from blocklab.measures.base import Measure
from blocklab.options import parse_pairs, split_list
from blocklab.plugins import GROUPS
from blocklab.registry import Registry, import_submodules

MEASURES: Registry[type[Measure]] = Registry("measure", GROUPS["measure"])
import_submodules(__name__)

from blocklab.measures.collapse import CollapseResult, composite_norm, rank_collapse, residual  # noqa: E402
from blocklab.measures.functional import FunctionalDimension, functional_dimension  # noqa: E402
from blocklab.measures.seprank import SeparationRank, separation_rank  # noqa: E402


def make_measure(name: str, **opts) -> Measure:
    return MEASURES.get(name)(**opts)


def parse_measure(text: str) -> Measure:
    """'collapse' or 'seprank(templates=8,partition=interleaved)' -> the measure."""
    s = str(text).strip().replace(" ", "")
    name, _, rest = s.partition("(")
    if rest and not rest.endswith(")"):
        raise UserError(f"measure {text!r}: options go in parentheses, e.g. seprank(templates=8)")
    return make_measure(name, **parse_pairs(split_list(rest[:-1]), f"measure {name}"))


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

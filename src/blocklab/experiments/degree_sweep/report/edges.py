"""What the degree sweep's status says of what sits at its edge (`analysis.cells.EDGE`): a
design check whose figure's band straddles its threshold, and a shape test whose named arms one
unit's absence changes (`degree_sweep.analysis.multiplier.ShapeTest.stable`)."""

from functools import partial

from blocklab.experiments.degree_sweep.analysis import capacity as cap
from blocklab.experiments.degree_sweep.report.intervals import after, p_value, spread


def names(d: cap.Decision) -> list[str]:
    """The checks at their edge by name, and the shape test where it is."""
    return [c.name for c in d.edges] + (["shape test"] if d.shape_edge else [])


def _figure(c, v: float) -> str:
    """A check's figure as its line says it: a share in percent, a ratio as a number."""
    return f"{100 * v:.3g}%" if c.name in ("converged", "plateau") else f"{v:.3g}"


def edge_words(c) -> str:
    """A check at its edge in a clause: its figure and band, which straddles the threshold."""
    side = ">=" if c.name in ("converged", "plateau", "curve") else "<="
    lo, hi = c.band if c.band is not None else (c.figure, c.figure)
    band = after(lo, hi, partial(_figure, c), spread)  # none: a band of one unit
    return f"{c.name} {_figure(c, c.figure)}{band} straddles {side} {_figure(c, c.threshold)}"


def _unit(u) -> str:
    return f"(teacher {u[0]}, seed {u[1]})"


def shape_edge_words(shape) -> str:
    """The shape test at its edge: the arms it names with every unit, and without which unit
    it names others."""
    flips = shape.flips
    without = ", ".join(_unit(u) for u in flips[:3]) + (" and more" if len(flips) > 3 else "")
    return (
        f"the shape test names {', '.join(shape.differs)} (an exponent of its own, F test p = "
        f"{p_value(shape.p)}) but not with {without} left out"
    )

"""How the degree sweep's report and page say an interval: `[low, high]` where one was computed,
"-" where none could be (an end that is NaN: too few units or degrees of freedom; or a band of
one unit, low = high = its figure, `analysis.cells.log_band`), the reason said once by the
sentence or the clause that introduces them, never "[nan, nan]"."""

from __future__ import annotations

import math
from collections.abc import Callable

NONE = "-"  # an interval that could not be computed, in a table's cell or a list


def three(v: float) -> str:
    """A figure to 3 significant digits; an unbounded end reads "inf"."""
    return "inf" if math.isinf(v) else f"{v:.3g}"


def computed(lo: float, hi: float) -> bool:
    """Whether (lo, hi) is an interval: both ends known (an infinite end is known: unbounded)."""
    return not (math.isnan(lo) or math.isnan(hi))


def spread(lo: float, hi: float) -> bool:
    """Whether a check's band over units (`analysis.cells.log_band`) is an interval: it is
    low = high = the figure where one unit leaves no spread to read."""
    return computed(lo, hi) and lo != hi


Known = Callable[[float, float], bool]


def cell(lo: float, hi: float, say: Callable[[float], str] = three, known: Known = computed) -> str:
    """An interval as a table cell: "[lo, hi]", or "-" where none was computed."""
    return f"[{say(lo)}, {say(hi)}]" if known(lo, hi) else NONE


def after(
    lo: float, hi: float, say: Callable[[float], str] = three, known: Known = computed
) -> str:
    """An interval after its figure in running text: " [lo, hi]", or nothing where none was
    computed (the figure then stands alone; its sentence says why)."""
    return f" [{say(lo)}, {say(hi)}]" if known(lo, hi) else ""


def p_value(p: float) -> str:
    """A p value in 2 digits; "-" where the test could not be made (no degrees of freedom)."""
    return f"{p:.2g}" if math.isfinite(p) else NONE


def no_interval(model) -> str | None:
    """Why the shared model's intervals (`degree_sweep.analysis.multiplier.MultiplierFit`) could not
    be computed, said once where they are introduced (they read "-"); None where they were: a t
    interval needs two groups that fitted (teachers, or one teacher's seeds), a bootstrap two
    units."""
    if model.units < 2 if model.method == "bootstrap" else model.df < 1:
        units = f"{model.units} (teacher, seed) unit{'s' * (model.units != 1)}"
        return f"none: {units} fitted, too few to compute one from (shown as -)"
    return None


def level(model) -> str:
    """The intervals' level before the words on how they were made; none where there are none."""
    return "" if no_interval(model) else f"{model.level:.0%} "


def interval_words(model) -> str:
    """How the model's intervals were made (`multiplier.METHODS`), in a clause; where none
    could be, why (`no_interval`)."""
    if none := no_interval(model):
        return none
    if model.method == "bootstrap":
        return (
            f"percentiles of {model.n_boot} paired bootstrap draws over {model.units} (teacher, "
            "seed) units, resampled within teachers"
        )
    over = (
        f"the means of {model.teachers} teachers (a random effect: it covers the spread between "
        "targets)"
        if model.teachers > 1
        else f"{model.units} seeds of one teacher (it says nothing of other targets)"
    )
    return (
        f"t interval (df {model.df:g}) over {over}, each unit's multipliers refitted on its own "
        "cells; such intervals covered >= 90% in simulations at 3-8 units and 1-3 teachers "
        "(benchmarks/coverage.py)"
    )

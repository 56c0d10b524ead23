"""The sample size of a t interval: how many groups an interval of a given half width needs,
from the half width a run of known size reached. The degree sweep sizes its runs by it before any
fit (`experiments.degree_sweep.sizing`) and its analysis reads it after (what +-3% would need):
one calculation, below both.
"""

from __future__ import annotations

import math


def units_for(
    half_width_log: float, units: int, target: float = 0.03, df: float | None = None,
    level: float = 0.95,
) -> int | None:  # fmt: skip
    """(teacher, seed) units for a +-`target` interval on a multiplier, from the half width this
    run reached with `units` and `df` (a `MultiplierFit`'s df; None: units - 1). A t interval over
    G = df + 1 groups is t_{G-1} s / sqrt(G): the run grows by whole groups (teachers, where they
    are the groups) until that is <= log(1 + target). df = inf (bootstrap): 1 / sqrt(units)."""
    df = units - 1 if df is None else df
    if not (math.isfinite(half_width_log) and half_width_log > 0 and units > 0 and df >= 1):
        return None
    goal = math.log1p(target)
    if math.isinf(df):
        return math.ceil(units * (half_width_log / goal) ** 2)
    from scipy import stats as st  # here: the command line's help imports this module

    q = lambda n: float(st.t.ppf((1 + level) / 2, n - 1))  # noqa: E731
    sd = half_width_log / q(df + 1) * math.sqrt(df + 1)  # the groups' own spread
    grow = max(2, math.ceil((float(st.norm.ppf((1 + level) / 2)) * sd / goal) ** 2))  # t > z
    while q(grow) * sd / math.sqrt(grow) > goal:
        grow += 1
    return math.ceil(grow * units / (df + 1))


def units_interval(
    half_width_log: float, units: int, target: float = 0.03, df: float | None = None,
    level: float = 0.95, coverage: float = 0.95,
) -> tuple[int, int] | None:  # fmt: skip
    """The units `units_for` asks for under the `coverage` interval of the groups' own spread:
    a run of df + 1 groups knows its variance s^2 only to df s^2 / chi2_df, a factor of about
    150 between the ends at df = 2. (low, high); None where `units_for` sizes nothing or the
    spread is a bootstrap's (df = inf: no chi-square interval)."""
    df = units - 1 if df is None else df
    if units_for(half_width_log, units, target, df, level) is None or math.isinf(df):
        return None
    from scipy import stats as st

    tail = (1 - coverage) / 2
    low = half_width_log * math.sqrt(df / float(st.chi2.ppf(1 - tail, df)))
    high = half_width_log * math.sqrt(df / float(st.chi2.ppf(tail, df)))
    return (
        units_for(low, units, target, df, level) or 1,
        units_for(high, units, target, df, level) or 1,
    )


def variance_factor(df: float, coverage: float = 0.95) -> float:
    """How far apart the ends of a variance's `coverage` interval from df degrees of freedom
    are, as a factor: what a pilot of df + 1 groups leaves of the units' uncertainty."""
    from scipy import stats as st

    tail = (1 - coverage) / 2
    return float(st.chi2.ppf(1 - tail, df) / st.chi2.ppf(tail, df))

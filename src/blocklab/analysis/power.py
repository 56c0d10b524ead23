"""The power of the t-tests the experiments use, for choosing seeds before a run.

Power is the chance that a one-sided test at level alpha rejects when the true difference of
means is `effect` and each group's standard deviation is `sd`: the tail of the noncentral t
distribution past the test's critical value (Cohen 1988, ch. 2).
- unpaired (two groups of n, equal sd, df = 2n - 2): the noncentrality is effect / (sd sqrt(2/n)).
  Welch's test, which the transition search runs, has df between n - 1 and 2n - 2; the equal-sd
  df is where the two coincide when the groups' sds agree.
- paired (n pairs; sd is the sd of the pairwise differences, df = n - 1): effect / (sd / sqrt(n)).
"""

import math
from dataclasses import asdict, dataclass

from scipy import stats

from blocklab.errors import UserError


@dataclass(frozen=True)
class Power:
    """One planned comparison: the effect and sd it assumes, the seeds, level and power."""

    effect: float
    sd: float
    n: int
    alpha: float
    paired: bool
    power: float

    def to_dict(self):
        return asdict(self)


def t_test_power(effect, sd, n, alpha, *, paired=False) -> Power:
    """The power of a one-sided t-test of a difference `effect` > 0 (see the module docstring)."""
    if not (math.isfinite(effect) and effect > 0 and math.isfinite(sd) and sd > 0):
        raise UserError(f"power needs an effect > 0 and an sd > 0, got {effect!r} and {sd!r}")
    if n < 2 or not 0 < alpha < 1:
        raise UserError(f"power needs n >= 2 and 0 < alpha < 1, got n={n!r}, alpha={alpha!r}")
    df = n - 1 if paired else 2 * n - 2
    ncp = effect / (sd / math.sqrt(n)) if paired else effect / (sd * math.sqrt(2 / n))
    critical = stats.t.ppf(1 - alpha, df)
    power = float(stats.nct.sf(critical, df, ncp))
    return Power(float(effect), float(sd), int(n), float(alpha), paired, power)


def design_power(effect, sd, n, alpha, *, paired=False, measured_sds=()) -> dict:
    """A design's power as JSON-ready data (`Power`'s fields), and beside it the power at the sd
    a run measured: `measured_sd`, the root mean square of `measured_sds` (finite ones), and
    `power_at_measured_sd`. With fewer than 2 seeds a t-test cannot run: power None and `why`."""
    stds = [float(x) for x in measured_sds if math.isfinite(x)]
    pooled = math.sqrt(sum(x * x for x in stds) / len(stds)) if stds else None
    if n < 2:
        planned = {"effect": effect, "sd": sd, "n": n, "alpha": alpha, "paired": paired}
        why = {"power": None, "why": "a t-test needs 2 seeds or more"}
        return planned | why | {"measured_sd": pooled, "power_at_measured_sd": None}
    at = t_test_power(effect, pooled, n, alpha, paired=paired).power if pooled else None
    out = t_test_power(effect, sd, n, alpha, paired=paired).to_dict()
    return out | {"measured_sd": pooled, "power_at_measured_sd": at}


def seeds_for(effect, sd, alpha, target=0.9, *, paired=False, most=64) -> int | None:
    """The fewest seeds (n >= 2) whose power reaches `target`; None when `most` do not."""
    for n in range(2, most + 1):
        if t_test_power(effect, sd, n, alpha, paired=paired).power >= target:
            return n
    return None

"""Statistics across seeds that the experiments' analyses share: the Student-t interval of a mean,
a slope's interval, Holm-Bonferroni adjusted p-values and a paired t-test's p-value. The degree
sweep's arm comparisons built on them are its own (`experiments.degree_sweep.analysis.arms`).
"""

import math
import warnings

import numpy as np
from scipy import stats

NAN = float("nan")


def interval(values, level=0.95):
    """(mean, std, lo, hi, n): sample std (ddof=1) and the Student-t interval for the mean.

    One value has no spread estimate: std, lo and hi are nan (never an infinite interval).
    No values: everything nan and n = 0.
    """
    x = np.asarray([float(v) for v in values], dtype=float)
    n = len(x)
    if n == 0:
        return NAN, NAN, NAN, NAN, 0
    mean = float(x.mean())
    if n == 1:
        return mean, NAN, NAN, NAN, 1
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, df=n - 1)) * std / math.sqrt(n)
    return mean, std, mean - half, mean + half, n


def slope_interval(xs, ys, alpha=0.05):
    """Least squares of ys on xs: the slope, its two-sided (1 - alpha) Student-t half-width
    (infinite with 2 points) and the number of points; None with fewer than 2 distinct xs."""
    if len(set(xs)) < 2:
        return None
    fit = stats.linregress(xs, ys)
    half = stats.t.ppf(1 - alpha / 2, len(xs) - 2) * fit.stderr if len(xs) > 2 else math.inf
    return fit.slope, half, len(xs)


def holm(pvalues):
    """Holm-Bonferroni adjusted p-values (step-down), in the order given."""
    p = np.asarray(pvalues, dtype=float)
    adjusted, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(np.argsort(p, kind="stable")):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))  # max keeps them monotone
        adjusted[i] = running
    return adjusted


def paired_p(a, b):
    if np.all(a == b):
        return 1.0  # ttest_rel gives nan for zero variance; no difference at all is p = 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # near-constant differences: p -> 0, right
        return float(stats.ttest_rel(a, b).pvalue)

"""Depth-to-width allocation from the transition between depth-efficiency regimes (seed 001).

Levine et al., section 5.2.2 and appendix D: per pair of adjacent depths, the shallower network's
transition width dx is where it becomes significantly worse than the deeper one at the same size;
a weighted line log dx = a + b L (natural log) through those widths gives the transition size
N_transition(L) = 12 L e^(2a) e^(2bL) (eq. 10), and inverting it gives the depth for a budget.
"""

import math
from dataclasses import dataclass
from enum import Enum
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
from scipy import stats
from scipy.special import lambertw

from blocklab.errors import UserError


def _number(name, value, positive=False):
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise UserError(f"{name} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise UserError(f"{name} must be > 0, got {value!r}")
    return float(value)


def _seq(x):
    return isinstance(x, list | tuple)


@dataclass(frozen=True)
class Fit:
    """log dx = a + b L with the covariance of (a, b), fit quality and the depths it rests on."""

    a: float
    b: float
    cov: tuple
    chi2: float
    dof: int
    chi2_red: float
    r2: float
    n_points: int
    depths: tuple
    source: str = "weighted fit of log dx = a + b L"

    @property
    def sigma_a(self):
        return math.sqrt(self.cov[0][0])

    @property
    def sigma_b(self):
        return math.sqrt(self.cov[1][1])

    def to_dict(self):
        """JSON-ready; an undefined chi2_red (no degrees of freedom) or R^2 is written as null."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        none = {k: None for k in ("chi2_red", "r2") if math.isnan(d[k])}
        return d | {"cov": [list(r) for r in self.cov], "depths": list(self.depths)} | none

    @classmethod
    def from_dict(cls, d):
        """The inverse of to_dict, refusing anything that is not a usable fit."""
        if not isinstance(d, dict):
            raise UserError(f"a fit must be a JSON object, got {type(d).__name__}")
        keys = set(cls.__dataclass_fields__)
        if missing := sorted(keys - set(d)):
            raise UserError(f"fit is missing keys: {', '.join(missing)}")
        if unknown := sorted(set(d) - keys):
            raise UserError(f"fit has unknown keys: {', '.join(unknown)}")
        cov, depths = d["cov"], d["depths"]
        if not isinstance(cov, list | tuple) or [len(r) if _seq(r) else 0 for r in cov] != [2, 2]:
            raise UserError("fit cov must be a 2x2 matrix [[var_a, cov_ab], [cov_ab, var_b]]")
        c = np.array([[_number("fit cov entry", x) for x in row] for row in cov])
        scale = max(np.abs(c).max(), 1e-300)
        if abs(c[0, 1] - c[1, 0]) > 1e-9 * scale:
            raise UserError("fit cov must be symmetric")
        if np.linalg.eigvalsh(c).min() < -1e-12 * scale:
            raise UserError("fit cov must be positive semi-definite")
        for k in ("dof", "n_points"):
            if isinstance(d[k], bool) or not isinstance(d[k], int) or d[k] < 0:
                raise UserError(f"fit {k} must be a non-negative integer, got {d[k]!r}")
        if not _seq(depths) or len(depths) != d["n_points"]:
            raise UserError("fit depths must be a list of n_points numbers")
        if not isinstance(d["source"], str):
            raise UserError("fit source must be a string")
        opt = {
            k: math.nan if d[k] is None else _number(f"fit {k}", d[k]) for k in ("chi2_red", "r2")
        }
        num = {k: _number(f"fit {k}", d[k]) for k in ("a", "b", "chi2")}
        cov = tuple(tuple(float(x) for x in row) for row in c)
        depths = tuple(_number("fit depth", x) for x in depths)
        return cls(**d | num | opt | {"cov": cov, "depths": depths})


# eq. 11 and the fit quality of section 5.2.2 (chi2 = chi2_red * dof, as the paper gives no chi2)
PAPER_FIT = Fit(
    a=5.039,
    b=5.55e-2,
    cov=((9.4e-4, -3.74e-5), (-3.74e-5, 1.7e-6)),
    chi2=0.854 * 3,
    dof=3,
    chi2_red=0.854,
    r2=0.998,
    n_points=5,
    depths=(6, 12, 18, 24, 30),
    source="Levine et al. (seed 001) eq. 11",
)

# Table 4(a); each delta is half the spacing of the two measured widths that bracket the transition
# (208 and 220 give 214 +- 6), though the text of section 5.2.2 calls it "the distance".
PAPER_TRANSITIONS = {
    "depths": (6, 12, 18, 24, 30),
    "widths": (214, 308, 436, 572, 824),
    "errors": (6, 12, 20, 12, 16),
}


def fit_transitions(depths, widths, errors, source=None):
    """Weighted least squares of y = log dx on L, sigma_y = delta dx / dx (Table 4(b)).

    cov = (X^T W X)^-1 with W = diag(1 / sigma_y^2), not rescaled by chi2_red: the errors are taken
    as absolute, which is what reproduces eq. 11 from Table 4(a). chi2 follows eq. 58. R^2 follows
    eq. 59 with y-bar the weighted mean sum(w y) / sum(w): eq. 59 as printed,
    (1/n) sum(y / sigma^2), is not a mean of y and would give R^2 = 1.0000 on Table 4.
    """
    L, dx, err = (np.asarray(v, dtype=float).ravel() for v in (depths, widths, errors))
    if not len(L) == len(dx) == len(err):
        raise UserError("depths, widths and errors must have the same length")
    if not np.isfinite(np.concatenate([L, dx, err])).all() or (dx <= 0).any() or (err <= 0).any():
        raise UserError("depths must be finite, transition widths and their errors finite and > 0")
    if len(np.unique(L)) < 2:
        raise UserError("a line through transition widths needs at least 2 distinct depths")
    y, w = np.log(dx), (dx / err) ** 2
    X = np.column_stack([np.ones_like(L), L])
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    coef = cov @ (X.T @ (w * y))
    chi2 = float(np.sum(w * (y - X @ coef) ** 2))
    dof = len(L) - 2
    total = float(np.sum(w * (y - np.sum(w * y) / np.sum(w)) ** 2))
    chi2_red = chi2 / dof if dof > 0 else math.nan
    r2 = 1 - chi2 / total if total > 0 else math.nan
    cov = tuple(tuple(float(x) for x in row) for row in (cov + cov.T) / 2)
    source = source or f"weighted fit of log dx = a + b L to {len(L)} transitions"
    a, b = (float(x) for x in coef)
    return Fit(a, b, cov, chi2, dof, chi2_red, r2, len(L), tuple(float(x) for x in L), source)


# closed-form curves (the paper's eq. 10-11 at given depths, for a given fit): evaluating them
# computes no statistic, so a report's figure may draw them (tests/project/test_architecture.py)
FORMULAS = ("n_transition", "transition_width")


def n_transition(depth, fit=PAPER_FIT):
    """(N, delta N) of eq. 10 at depth L (scalar or array); the error is propagated from cov."""
    L = np.asarray(depth, dtype=float)
    if not (np.isfinite(L).all() and (L > 0).all()):
        raise UserError("depth must be a finite number > 0")
    (var_a, cov_ab), (_, var_b) = fit.cov
    N = 12 * L * np.exp(2 * fit.a + 2 * fit.b * L)
    # dN/da = 2N and dN/db = 2LN factor out of eq. 10's quadratic form
    dN = 2 * N * np.sqrt(np.maximum(var_a + L**2 * var_b + 2 * L * cov_ab, 0.0))
    return (float(N), float(dN)) if N.ndim == 0 else (N, dN)


def transition_width(depth, fit=PAPER_FIT):
    """(dx, delta dx) of eq. 11 at depth L: dx = e^(a + b L), the error propagated from cov."""
    L = _number("depth", depth, positive=True)
    (var_a, cov_ab), (_, var_b) = fit.cov
    dx = math.exp(fit.a + fit.b * L)
    return dx, dx * math.sqrt(max(var_a + L**2 * var_b + 2 * L * cov_ab, 0.0))


def optimal_depth(n_params, fit=PAPER_FIT):
    """The real L* with N_transition(L*) = n_params: W0(2 b N e^(-2a) / 12) / (2b)."""
    n = _number("n_params", n_params, positive=True)
    if fit.b <= 0:
        raise UserError(
            f"fit slope b = {fit.b:g} <= 0: the transition width does not grow with depth, "
            "so no depth is optimal for a given size"
        )
    return float(lambertw(2 * fit.b * n * math.exp(-2 * fit.a) / 12).real / (2 * fit.b))


@dataclass(frozen=True)
class Advice:
    """Depth and width for a budget of n_params non-embedding parameters (N = 12 L dx^2)."""

    n_params: float
    depth: int
    depth_exact: float
    depth_sigma: float
    width: float
    width_sigma: float
    depth_range: tuple
    extrapolated: bool
    fit: Fit
    # the nearest width a network is built at (a multiple of 64, a common head size) and the
    # budget it then spends
    buildable_width: int = 0
    buildable_params: float = 0.0
    multiple: int = 64

    def to_dict(self):
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "fit"}
        return d | {"depth_range": list(self.depth_range), "fit": self.fit.to_dict()}


def advise(n_params, fit=PAPER_FIT, multiple: int | None = None):
    """The optimal depth and width for n_params, with 1-sigma uncertainties from the fit, and the
    nearest width a multiple of `multiple` (None: 64 from width 256 up, else 8) with the
    parameters it spends at that depth.

    depth_range holds the lowest and highest integer depths whose N_transition lies within its own
    error of n_params (the depths the fit cannot tell from the optimum), or (depth, depth) when no
    integer does; the scan stops where that error reaches 100% of N_transition, beyond which a
    linear error model says nothing.
    """
    n = _number("n_params", n_params, positive=True)
    exact = optimal_depth(n, fit)
    depth = max(1, math.floor(exact + 0.5))
    _, dN = n_transition(exact, fit)
    # at fixed N, d log N_transition / dL = 1/L + 2b turns a relative error in N into one in L
    depth_sigma = (dN / n) / (1 / exact + 2 * fit.b)
    width = math.sqrt(n / (12 * depth))

    def within(L):
        N, dN = n_transition(L, fit)
        return abs(N - n) <= dN and dN < N

    # the depths within 1 sigma form an interval around L*; an integer-free one falls back to depth
    lo, hi = math.floor(exact), math.ceil(exact)
    while lo >= 1 and within(lo):
        lo -= 1
    while within(hi):
        hi += 1
    lo, hi = (lo + 1, hi - 1) if lo + 1 <= hi - 1 else (depth, depth)
    extrapolated = not min(fit.depths) <= exact <= max(fit.depths)
    width_sigma = width * depth_sigma / (2 * depth)
    multiple = multiple or (64 if width >= 256 else 8)
    built = max(multiple, multiple * round(width / multiple))
    return Advice(n, depth, exact, depth_sigma, width, width_sigma, (lo, hi), extrapolated, fit,
                  built, 12.0 * depth * built**2, multiple)  # fmt: skip


class OptimalShape(NamedTuple):
    depth: int
    width: float


def optimal_shape(n_params, fit=None):
    """(depth, width) for n_params; fit None means the paper's eq. 11."""
    advice = advise(n_params, PAPER_FIT if fit is None else fit)
    return OptimalShape(advice.depth, advice.width)


@dataclass(frozen=True)
class Point:
    """One measured architecture: mean and sample std (ddof=1) of the loss over n_seeds seeds."""

    n_params: float
    width: float
    mean_loss: float
    std_loss: float
    n_seeds: int

    def __post_init__(self):
        _number("n_params", self.n_params, positive=True)
        _number("width", self.width, positive=True)
        _number("mean_loss", self.mean_loss)
        if (
            isinstance(self.n_seeds, bool)
            or not isinstance(self.n_seeds, Integral)
            or self.n_seeds < 1
        ):
            raise UserError(f"n_seeds must be an integer >= 1, got {self.n_seeds!r}")
        # one seed has no spread estimate (nan): such a point is kept but never compared
        unset = self.n_seeds == 1 and isinstance(self.std_loss, Real) and math.isnan(self.std_loss)
        if not unset and _number("std_loss", self.std_loss) < 0:
            raise UserError(f"std_loss must be >= 0, got {self.std_loss!r}")


@dataclass(frozen=True)
class Comparison:
    n_params: float
    width: float
    shallow_mean: float
    shallow_std: float
    deep_mean: float
    deep_std: float
    p_value: float
    significant: bool


@dataclass(frozen=True)
class Transition:
    depth_shallow: int
    depth_deep: int
    width: float
    error: float
    n_params: float


class Reason(Enum):  # what a search found, or why it found no transition
    FOUND = "found"
    TOO_FEW = "too_few"  # fewer than 2 comparable points
    ALREADY_BETTER = "already_better"  # the deeper net is better at the smallest size already
    NEVER_WORSE = "never_worse"  # the shallower is never significantly worse in the range


FOUND, TOO_FEW, ALREADY_BETTER, NEVER_WORSE = Reason


@dataclass(frozen=True)
class TransitionSearch:
    depth_shallow: int
    depth_deep: int
    transition: Transition | None
    reason: Reason
    comparisons: tuple


_MS = ("mean_loss", "std_loss")
# widths rounded per depth make equal budgets differ a little: a size this close (in log) past
# the end of the deeper curve is compared with its end point rather than dropped
SIZE_SLACK = math.log(1.15)


def _p_greater(m1, s1, n1, m2, s2, n2):
    # noiseless means leave Welch's statistic undefined: the sign of the difference then decides
    if s1 == 0 and s2 == 0:
        return 0.0 if m1 > m2 else 1.0
    return float(stats.ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, False, "greater").pvalue)


def _sorted(points, depth):
    pts = sorted(points, key=lambda p: p.n_params)
    if len({p.n_params for p in pts}) < len(pts):
        raise UserError(f"depth {depth} has two points with the same n_params")
    return pts


def find_transition(shallow, deep, *, depth_shallow, depth_deep, alpha=0.05):
    """The shallower net's transition width against the next deeper one (section 5.2.2).

    Shallow points are compared, in increasing size, with the deep curve's mean and std linearly
    interpolated in log(n_params) (seed count: the smaller of the two bracketing points); a size
    up to 15% past an end of the deep curve takes that end's point (equal budgets round to
    slightly different sizes per depth); sizes further out and points with fewer than 2 seeds are
    not compared.
    Significantly worse: one-sided Welch t-test of shallow mean > deep mean with p < alpha; with
    both stds 0 a strictly larger shallow mean counts. The transition width is the mean of the
    widths at the first significant point and at the (non-significant) point before it; the error
    is half their spacing, as in Table 4(a).
    """
    if depth_shallow >= depth_deep:
        raise UserError(f"depth_shallow {depth_shallow} must be below depth_deep {depth_deep}")
    s_pts, d_pts = _sorted(shallow, depth_shallow), _sorted(deep, depth_deep)
    log_d = np.log([p.n_params for p in d_pts])
    comps = []
    for p in s_pts:
        x = math.log(p.n_params)
        if not d_pts or not log_d[0] - SIZE_SLACK <= x <= log_d[-1] + SIZE_SLACK:
            continue
        j = int(np.searchsorted(log_d, x))
        if x <= log_d[0] or x >= log_d[-1]:  # at or just past an end: that end's point
            k = slice(0, 1) if x <= log_d[0] else slice(len(log_d) - 1, len(log_d))
        else:
            k = slice(j, j + 1) if log_d[j] == x else slice(j - 1, j + 1)
        seeds = min(q.n_seeds for q in d_pts[k])
        if p.n_seeds < 2 or seeds < 2:
            continue
        m, s = (float(np.interp(x, log_d[k], [getattr(q, f) for q in d_pts[k]])) for f in _MS)
        pv = _p_greater(p.mean_loss, p.std_loss, p.n_seeds, m, s, seeds)
        comps.append(Comparison(p.n_params, p.width, p.mean_loss, p.std_loss, m, s, pv, pv < alpha))
    first = next((i for i, c in enumerate(comps) if c.significant), None)
    if len(comps) < 2:
        reason = TOO_FEW
    else:
        reason = NEVER_WORSE if first is None else ALREADY_BETTER if first == 0 else FOUND
    transition = None
    if reason == FOUND:
        (n0, w0), (n1, w1) = ((c.n_params, c.width) for c in comps[first - 1 : first + 1])
        transition = Transition(
            depth_shallow, depth_deep, (w0 + w1) / 2, abs(w1 - w0) / 2, (n0 + n1) / 2
        )
    return TransitionSearch(depth_shallow, depth_deep, transition, reason, tuple(comps))


def transitions(points_by_depth, alpha=0.05):
    """find_transition over each pair of adjacent depths, shallowest first."""
    depths = sorted(points_by_depth)
    return [
        find_transition(
            points_by_depth[s], points_by_depth[d], depth_shallow=s, depth_deep=d, alpha=alpha
        )
        for s, d in zip(depths, depths[1:], strict=False)
    ]

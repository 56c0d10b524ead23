"""One scaling law for every arm, with a parameter multiplier per arm (Ho et al. 2024, arXiv
2403.05812):

    L_a(P) = L_inf + A (P / m_a)^(-alpha),    m_ref = 1,

fitted by least squares on log loss to each cell's geometric-mean loss (the mean log loss over its
(teacher, seed) units) against the cell's actual parameter count. m_a > 1: arm a needs m_a times
the reference's parameters for every loss on the curve; the theory of seed 000 predicts
m_d = h(3) / h(d), so m_2 / m_4 = 1 exactly (h(2) = h(4)).

Intervals: a paired bootstrap over (teacher, seed) units, resampled within teachers (each teacher
keeps its count of seeds; with one teacher, a plain bootstrap over seeds). One draw of units serves
every arm, so noise a unit shares across arms cancels; the whole model is refitted per draw
(Besiroglu et al. 2024, arXiv 2404.10102: intervals on fitted scaling parameters come from
resampling real replicates). A multiplier that reaches its bound (LOG_M_MAX) in a draw counts as
unbounded there: 0 or inf.

Shape test (Roy et al. 2025, arXiv 2507.02754): the nested model with one exponent and one
coefficient per arm (L_inf shared) against the shared one, by an F test on the residual sums of
squares of the cells' log losses. When the per-arm exponents fit significantly better, no constant
multiplier describes the arms, and each arm's exponent is reported with its interval instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize
from scipy import stats as st

from blocklab.analysis.scaling import Observation, _quantiles, _table
from blocklab.analysis.stats import holm

ALPHA_MIN, ALPHA_MAX = 1e-3, 4.0
LOG_M_MAX = math.log(1e3)  # a multiplier beyond 1000x either way is unbounded for this design
_AT_BOUND = 1e-6  # within this of a bound counts as on it
NAN = float("nan")


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    @property
    def bounded(self) -> bool:
        return all(math.isfinite(v) and v > 0 for v in (self.value, self.low, self.high))

    def half_width_log(self) -> float:
        """Half the interval's width in log units (+-x% reads as exp(x) - 1)."""
        if not self.bounded:
            return math.inf
        return (math.log(self.high) - math.log(self.low)) / 2


@dataclass(frozen=True)
class ShapeTest:
    shared_alpha_preferred: bool  # no arm's own exponent fits significantly better
    p: float  # F test of every arm's own exponent against the shared one; NaN: no df left
    f: float
    df: tuple[int, int]
    level: float
    # per non-reference arm: the F test of that arm's own exponent (and coefficient) against
    # its multiplier in the shared model, Holm-adjusted over the arms
    arm_p: dict[str, float] = field(default_factory=dict)
    differs: tuple[str, ...] = ()  # arms whose exponent differs: no constant multiplier


@dataclass(frozen=True)
class MultiplierFit:
    reference: str
    arms: tuple[str, ...]
    L_inf: float
    A: float
    alpha: Interval
    # the reference at exactly 1; an arm whose exponent differs (`shape.differs`) has none: NaN
    multipliers: dict[str, Interval]
    ratio_2_4: Interval | None  # m_2 / m_4; None unless both d=2 and d=4 ran with a multiplier
    arm_alpha: dict[str, Interval]  # each arm's exponent in the per-arm model
    shape: ShapeTest
    units: int  # (teacher, seed) units in the bootstrap
    n_boot: int
    n_failed: int  # draws whose fit failed (dropped)
    level: float


def _within_teacher_counts(units, n_boot, rng):
    """(n_boot, U) times each unit is drawn: every teacher's seeds resampled with replacement,
    the teachers themselves kept."""
    counts = np.zeros((n_boot, len(units)))
    for t in sorted({u[0] for u in units}):
        cols = [i for i, u in enumerate(units) if u[0] == t]
        counts[:, cols] = rng.multinomial(len(cols), np.full(len(cols), 1 / len(cols)), n_boot)
    return counts


def _cells(arms, weights=None):
    """Per arm (log params, mean log loss) over the cells with a finished unit; `weights` (U,)
    are the times each unit is drawn (None: once each)."""
    out = {}
    for arm, (_, p, L) in arms.items():
        have = np.isfinite(L)
        w = np.ones(len(L)) if weights is None else weights
        n = w @ have
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (w @ np.where(have, np.log(np.where(have, L, 1.0)), 0.0)) / n
        ok = n > 0
        out[arm] = (np.log(p[ok]), mean[ok])
    return out


class _Model:
    """theta = (L_inf, log A, alpha, log m_a for each arm with a multiplier, then log A_b, alpha_b
    for each arm in `free`), on centred log params: the arms outside `free` share the exponent
    and differ by their multipliers (the reference by none); each arm in `free` has its own
    curve. Every non-reference arm free is the per-arm model."""

    def __init__(self, arms: list[str], reference: str, u0: float, free=frozenset()):
        self.arms, self.reference, self.u0 = arms, reference, u0
        self.free = [a for a in arms if a in free and a != reference]
        self.others = [a for a in arms if a != reference and a not in self.free]

    def size(self) -> int:
        return 3 + len(self.others) + 2 * len(self.free)

    def bounds(self, cmax: float):
        lo = [0.0, -np.inf, ALPHA_MIN] + [-LOG_M_MAX] * len(self.others)
        hi = [cmax, np.inf, ALPHA_MAX] + [LOG_M_MAX] * len(self.others)
        lo += [-np.inf, ALPHA_MIN] * len(self.free)
        hi += [np.inf, ALPHA_MAX] * len(self.free)
        return np.array(lo), np.array(hi)

    def terms(self, theta, arm):
        """(log A_a, alpha_a, log m_a) of an arm."""
        if arm in self.free:
            i = 3 + len(self.others) + 2 * self.free.index(arm)
            return theta[i], theta[i + 1], 0.0
        log_m = 0.0 if arm == self.reference else theta[3 + self.others.index(arm)]
        return theta[1], theta[2], log_m

    def alpha_index(self, arm) -> int:
        if arm in self.free:
            return 3 + len(self.others) + 2 * self.free.index(arm) + 1
        return 2

    def residuals(self, theta, cells):
        out = []
        for arm in self.arms:
            lp, y = cells[arm]
            log_a, alpha, log_m = self.terms(theta, arm)
            with np.errstate(over="ignore", invalid="ignore"):
                f = theta[0] + np.exp(log_a - alpha * (lp - self.u0 - log_m))
                out.append(np.log(f) - y)
        return np.concatenate(out)

    def fit(self, cells, starts):
        """The best least-squares fit from the given starts; None when every start failed."""
        ymin = min(float(np.exp(y.min())) for _, y in cells.values())
        lo, hi = self.bounds(ymin * (1 - 1e-6))
        best = None
        for x0 in starts:
            x0 = np.clip(x0, lo, hi)
            try:
                res = optimize.least_squares(
                    self.residuals, x0, bounds=(lo, hi), args=(cells,), method="trf",
                    x_scale="jac", ftol=1e-12, xtol=1e-12, gtol=1e-12, max_nfev=2000,
                )  # fmt: skip
            except (ValueError, np.linalg.LinAlgError):
                continue
            cost = float(np.sum(res.fun**2))
            if math.isfinite(cost) and (best is None or cost < best[1]):
                best = (res.x, cost)
        return best


def _starts(model: _Model, cells) -> list[np.ndarray]:
    """A small grid of starts: exponents and floors, log A matched to the reference's cells."""
    _, y_ref = cells[model.reference]
    ymin = min(float(np.exp(y.min())) for _, y in cells.values())
    starts = []
    for alpha in (0.1, 0.4, 1.0, 2.0):
        for floor in (0.0, 0.5 * ymin, 0.9 * ymin):
            gap = max(float(np.exp(np.mean(y_ref))) - floor, 1e-12 * ymin)
            log_a = math.log(gap)
            starts.append(
                np.array(
                    [floor, log_a, alpha]
                    + [0.0] * len(model.others)
                    + [log_a, alpha] * len(model.free)
                )
            )
    return starts


def _interval(point: float, draws: np.ndarray, level: float, n_failed: int, n_boot: int):
    if n_boot == 0 or 2 * n_failed > n_boot or not len(draws):
        return Interval(point, NAN, NAN)
    lo, hi = _quantiles(draws, level)  # an end among infinite draws is inf
    return Interval(point, lo, hi)


def _multiplier_value(log_m: float) -> float:
    """exp(log m), with a value on its bound read as unbounded (0 or inf)."""
    if log_m >= LOG_M_MAX - _AT_BOUND:
        return math.inf
    if log_m <= -LOG_M_MAX + _AT_BOUND:
        return 0.0
    return math.exp(log_m)


def fit(
    observations: list[Observation],
    reference: str = "d=3",
    n_boot: int = 1000,
    level: float = 0.95,
    shape_level: float = 0.05,
    seed: int = 0,
    on_draw: Callable[[int, int], None] | None = None,
) -> MultiplierFit | None:
    """The shared model, its shape tests, the per-arm model and their bootstrap (see the module
    docstring). An arm whose own exponent fits significantly better (`ShapeTest.differs`) keeps
    its own curve in the model every other arm's multiplier is read from. None when the
    reference arm, or every other arm, has fewer than 2 cells. `on_draw(done, n_boot)` is
    called after each draw, failed or not: the bootstrap is most of the time a fit takes."""
    arms_all, units = _table(observations)
    cells = _cells(arms_all)
    arms = [a for a, (lp, _) in cells.items() if len(lp) >= 2]
    if reference not in arms or len(arms) < 2:
        return None
    arms = [reference] + sorted(a for a in arms if a != reference)
    cells = {a: cells[a] for a in arms}
    u0 = float(np.mean(np.concatenate([cells[a][0] for a in arms])))
    shared = _Model(arms, reference, u0)
    per_arm = _Model(arms, reference, u0, frozenset(arms))
    first = shared.fit(cells, _starts(shared, cells))
    if first is None:
        return None
    point_arm = per_arm.fit(cells, _starts(per_arm, cells))
    shape = _shape_test(first[1], point_arm, cells, shared, per_arm, shape_level)
    model = _Model(arms, reference, u0, frozenset(shape.differs))
    point = model.fit(cells, _starts(model, cells)) if shape.differs else first
    if point is None:
        return None
    theta = point[0]

    # the bootstrap: the same draws of units for every arm and both models
    table = {a: arms_all[a] for a in arms}
    counts = _within_teacher_counts(units, n_boot, np.random.default_rng(seed))
    draws, draws_arm, failed = [], [], 0
    for i, w in enumerate(counts):  # a failed fit drops its draw
        got, got_arm = _draw(_cells(table, w), arms, model, theta, per_arm, point_arm)
        if on_draw is not None:
            on_draw(i + 1, n_boot)
        if got is None:
            failed += 1
            continue
        draws.append(got[0])
        draws_arm.append(got_arm[0] if got_arm else np.full(per_arm.size(), NAN))
    draws = np.array(draws).reshape(-1, model.size())
    draws_arm = np.array(draws_arm).reshape(-1, per_arm.size())

    multipliers = {reference: Interval(1.0, 1.0, 1.0)}
    for arm in model.free:
        multipliers[arm] = Interval(NAN, NAN, NAN)
    for k, arm in enumerate(model.others):
        values = np.vectorize(_multiplier_value)(draws[:, 3 + k]) if len(draws) else draws
        multipliers[arm] = _interval(
            _multiplier_value(float(theta[3 + k])), values, level, failed, n_boot
        )
    multipliers = {a: multipliers[a] for a in arms}
    ratio = None
    if "d=2" in model.others and "d=4" in model.others:
        ratio = _ratio(model, theta, draws, level, failed, n_boot)
    arm_alpha = {}
    if point_arm is not None:
        for arm in arms:
            i = per_arm.alpha_index(arm)
            col = draws_arm[:, i] if len(draws_arm) else draws_arm
            col = col[np.isfinite(col)] if len(col) else col
            arm_alpha[arm] = _interval(float(point_arm[0][i]), col, level, failed, n_boot)
    return MultiplierFit(
        reference=reference,
        arms=tuple(arms),
        L_inf=float(theta[0]),
        A=float(math.exp(theta[1] + theta[2] * u0)),
        alpha=_interval(float(theta[2]), draws[:, 2], level, failed, n_boot),
        multipliers=multipliers,
        ratio_2_4=ratio,
        arm_alpha=arm_alpha,
        shape=shape,
        units=len(units),
        n_boot=n_boot,
        n_failed=failed,
        level=level,
    )


def _draw(cells, arms, model: _Model, theta, per_arm: _Model, point_arm):
    """One bootstrap draw's fits of the model and the per-arm model, each from its point fit;
    (None, None) where an arm has fewer than 2 cells left or the model's fit failed."""
    if any(len(cells[a][0]) < 2 for a in arms):
        return None, None
    got = model.fit(cells, [theta])
    got_arm = per_arm.fit(cells, [point_arm[0]]) if point_arm else None
    return got, got_arm


def _ratio(model: _Model, theta, draws, level, failed, n_boot) -> Interval:
    """m_2 / m_4 and its interval; a draw with either multiplier on its bound is unbounded."""
    i2, i4 = (3 + model.others.index(a) for a in ("d=2", "d=4"))

    def values(t):
        on_bound = (np.abs(t[..., [i2, i4]]) >= LOG_M_MAX - _AT_BOUND).any(-1)
        return np.where(on_bound, NAN, np.exp(t[..., i2] - t[..., i4]))

    point = float(values(np.asarray(theta)))
    kept = values(draws) if len(draws) else np.empty(0)
    unbounded = int(np.isnan(kept).sum())
    return _interval(point, kept[np.isfinite(kept)], level, failed + unbounded, n_boot)


def _f_test(rss_small, rss_big, extra: int, df2: int) -> tuple[float, float]:
    """(F, p) of a nested model with `extra` more parameters and `df2` residual df."""
    if extra <= 0 or df2 <= 0 or not math.isfinite(rss_big):
        return NAN, NAN
    rss_big = min(rss_big, rss_small)  # the larger model nests the smaller
    if rss_big <= 0:
        return (math.inf, 0.0) if rss_small > 0 else (NAN, 1.0)
    f = ((rss_small - rss_big) / extra) / (rss_big / df2)
    return float(f), float(st.f.sf(f, extra, df2))


def _shape_test(rss_shared, point_arm, cells, shared: _Model, per_arm: _Model, level):
    """F tests on the cells' log losses: every arm's own exponent against the shared one, and per
    non-reference arm its own exponent alone (Holm over the arms), which names the arms whose
    exponent differs."""
    n = sum(len(lp) for lp, _ in cells.values())
    rss_arm = point_arm[1] if point_arm is not None else NAN
    f, p = _f_test(rss_shared, rss_arm, per_arm.size() - shared.size(), n - per_arm.size())
    raw = {}
    for arm in shared.others:
        one = _Model(shared.arms, shared.reference, shared.u0, frozenset([arm]))
        got = one.fit(cells, _starts(one, cells))
        if got is not None:
            raw[arm] = _f_test(rss_shared, got[1], one.size() - shared.size(), n - one.size())[1]
    tested = {a: v for a, v in raw.items() if math.isfinite(v)}
    adjusted = dict(zip(tested, holm(list(tested.values())).tolist(), strict=True))
    differs = tuple(a for a, v in adjusted.items() if v < level)
    return ShapeTest(not differs, p, f, (per_arm.size() - shared.size(), n - per_arm.size()),
                     level, adjusted, differs)  # fmt: skip


def units_for(half_width_log: float, units: int, target: float = 0.03) -> int | None:
    """(teacher, seed) units a run needs for a +-`target` interval on a multiplier, from the half
    width this run reached with `units`: the half width shrinks as one over the square root of
    the units (the bootstrap's spread is the units' spread over sqrt(n))."""
    if not (math.isfinite(half_width_log) and half_width_log > 0 and units > 0):
        return None
    return math.ceil(units * (half_width_log / math.log1p(target)) ** 2)

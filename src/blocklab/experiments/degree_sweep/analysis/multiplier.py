"""One scaling law for every arm, with a parameter multiplier per arm (Ho et al. 2024, arXiv
2403.05812):

    L_a(P) = L_inf + A (P / m_a)^(-alpha),    m_ref = 1,

fitted by least squares on log loss to each cell's geometric-mean loss (the mean log loss over its
(teacher, seed) units) against the cell's parameter count (`Observation.params`). m_a > 1: arm a
needs m_a times the reference's parameters for every loss on the curve; the theory of seed 000
predicts m_d = h(3) / h(d), so m_2 / m_4 = 1 exactly (h(2) = h(4)). Every point is this fit's.

Intervals by `method`, their coverage measured by simulation (`coverage`, and the table of
`benchmarks/coverage.py` the default rests on). "units": the model refitted to each unit's cells,
the pooled point +- t se of the units' mean log m, df = units - 1 (summary measures, Matthews et
al. 1990, BMJ 300: 230); with >= 2 teachers a random effect, se of the teachers' means, df =
teachers - 1 (Searle, Casella & McCulloch 1992), covering the spread between teachers.
"bootstrap": units resampled within teachers, percentiles (Besiroglu et al. 2024, arXiv
2404.10102); with few units (3: 10 distinct draws) or teachers it under-covers. One replicate
serves every arm, so noise a unit shares across arms cancels; a multiplier on its bound
(LOG_M_MAX) anywhere reads as unbounded: 0 or inf.

Shape test (Roy et al. 2025, arXiv 2507.02754): the nested model with one exponent and one
coefficient per arm (L_inf shared) against the shared one, by an F test on the residual sums of
squares of the cells' log losses. When the per-arm exponents fit significantly better, no constant
multiplier describes the arms, and each arm's exponent is reported with its interval instead.
The test is repeated with each (teacher, seed) unit left out (`ShapeTest.left_out`): arms that
one unit's absence unnames are a finding at its edge (`ShapeTest.stable`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import stats as st

from blocklab.analysis.stats import holm
from blocklab.experiments.degree_sweep.analysis.scaling import Observation, _quantiles, _table
from blocklab.experiments.degree_sweep.analysis.shared_law import LOG_M_MAX, SharedLaw, starts

_AT_BOUND = 1e-6  # within this of a bound counts as on it
NAN = float("nan")
METHODS = ("units", "bootstrap")


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
    # with each (teacher, seed) unit left out in turn: the arms the test names (None: no fit)
    # and its p; a finding that one unit's absence changes is at its edge (`stable`)
    left_out: tuple[tuple[str, ...] | None, ...] = ()
    left_out_p: tuple[float, ...] = ()
    units: tuple[tuple[int, int], ...] = ()  # the units, in the order of `left_out`

    @property
    def stable(self) -> bool:
        """Every unit left out in turn names the arms the whole run names (trivially with
        fewer than 2 units, which have none to leave out)."""
        return all(d == self.differs for d in self.left_out)

    @property
    def flips(self) -> tuple[tuple[int, int], ...]:
        """The units whose absence changes which arms the test names."""
        return tuple(u for u, d in zip(self.units, self.left_out, strict=True) if d != self.differs)


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
    units: int  # (teacher, seed) units
    n_boot: int  # the bootstrap's draws; 0 for "units"
    n_failed: int  # replicate fits that failed (a draw dropped, a unit left out)
    level: float
    method: str = "units"  # METHODS
    df: float = math.inf  # groups (units; teachers where >= 2) fitted, less 1; bootstrap: inf
    teachers: int = 1
    # method "units": each (teacher, seed) unit's own multipliers, in `unit_ids` order, per arm
    # with a multiplier and "m2/m4" (NaN where the unit's refit failed); empty for the bootstrap
    per_unit: dict[str, tuple[float, ...]] = field(default_factory=dict)
    unit_ids: tuple[tuple, ...] = ()


def _within_teacher_counts(units, n_boot, rng):
    """(n_boot, U) times each unit is drawn: each teacher's seeds resampled, teachers kept."""
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
        out[arm] = (np.log(p[n > 0]), mean[n > 0])
    return out


def shared_point(observations: list[Observation], reference: str = "d=3"):
    """((arms, table, units, cells, u0), the shared model, (theta, cost)) on the arms with >= 2
    cells, the reference first, before any shape test; None without the reference or a fit."""
    table, units = _table(observations)
    arms = [a for a, (lp, _) in _cells(table).items() if len(lp) >= 2]
    if reference not in arms or len(arms) < 2:
        return None
    table = {a: table[a] for a in [reference] + sorted(a for a in arms if a != reference)}
    cells, arms = _cells(table), list(table)
    u0 = float(np.mean(np.concatenate([cells[a][0] for a in arms])))
    shared = SharedLaw(arms, reference, u0)
    first = shared.fit(cells, starts(shared, cells))
    return None if first is None else ((arms, table, units, cells, u0), shared, first)


def groups(units) -> np.ndarray:
    """(U,) each unit's group: its teacher where >= 2 teachers ran, else the unit itself."""
    teachers = np.unique([u[0] for u in units], return_inverse=True)[1]
    return teachers if teachers.max(initial=0) > 0 else np.arange(len(units))


def replicates(table, fits, weights, on_draw=None, min_cells: int = 0) -> list[np.ndarray]:
    """Per (model, theta) in `fits`, (R, size): refitted from theta to each row of `weights`'
    cells (a row drawn twice, once); NaN rows where the reference has < 2 cells, an arm fewer than
    `min_cells` or the fit failed, NaN columns of an arm without a cell. `on_draw(i, R)` per row."""
    done, rows = {}, []
    for i, w in enumerate(weights):
        if (key := w.tobytes()) not in done:
            cells, done[key] = _cells(table, w), []
            for m, theta in fits:
                n = {a: len(cells[a][0]) for a in m.arms}
                ok = theta is not None and n[m.reference] >= 2 and min(n.values()) >= min_cells
                got = m.fit(cells, [theta]) if ok else None
                row = np.append(got[0], NAN) if got is not None else np.full(m.size + 1, NAN)
                row[[j for a in m.arms if not n[a] for j in m.index(a) if j > 2]] = NAN
                done[key].append(row[:-1])  # the last column: the index of "no multiplier"
        rows.append(done[key])
        if on_draw is not None:
            on_draw(i + 1, len(weights))
    return [np.reshape([r[k] for r in rows], (len(rows), m.size)) for k, (m, _) in enumerate(fits)]


def log_m(t) -> np.ndarray:
    """log m, with a value on its bound read as unbounded (+-inf); NaN stays NaN."""
    return np.where(np.abs(t) >= LOG_M_MAX - _AT_BOUND, np.copysign(np.inf, t), t)


def log_ratio(logs: np.ndarray) -> np.ndarray:
    """(..., 2) log m_2, log m_4 -> log(m_2 / m_4): inf where either is unbounded."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(logs).any(-1), np.inf, logs[..., 0] - logs[..., 1])


def t_interval(point: float, values, groups, level: float) -> tuple[float, float]:
    """`point` +- t_{G-1} se of `values` (per unit; NaN: none; +-inf: on a bound, unbounded)
    averaged within their G `groups`; (NaN, NaN) with G < 2."""
    ok = ~np.isnan(values)
    if np.isinf(values[ok]).any() or not math.isfinite(point):
        return -math.inf, math.inf
    g = np.asarray(groups)[ok]
    v = np.array([values[ok][g == k].mean() for k in np.unique(g)])
    if len(v) < 2:
        return NAN, NAN
    half = float(st.t.ppf((1 + level) / 2, len(v) - 1)) * float(np.std(v, ddof=1))
    return point - half / math.sqrt(len(v)), point + half / math.sqrt(len(v))


@dataclass(frozen=True)
class Reader:
    """A quantity's interval by `method`; more than half the bootstrap's draws failed: none."""

    method: str
    level: float
    groups: np.ndarray  # each unit's group (`groups`)
    failed: int = 0
    n_boot: int = 0

    def __call__(self, point: float, values, ratio=False) -> Interval:
        """`point`, `values`: logs of a positive quantity (+-inf: a multiplier on its bound);
        `ratio`: m_2 / m_4, which has no value where either multiplier is on a bound."""
        value = NAN if ratio and not math.isfinite(point) else math.exp(point)
        if self.method == "bootstrap":
            failed, values = self.failed, values[~np.isnan(values)]
            if ratio:  # a draw with either multiplier on its bound counts as failed
                failed += int(np.isinf(values).sum())
                values = values[np.isfinite(values)]
            if self.n_boot == 0 or 2 * failed > self.n_boot or not len(values):
                return Interval(value, NAN, NAN)
            return Interval(value, *_quantiles(np.exp(values), self.level))  # an inf draw: inf
        lo, hi = t_interval(point, values, self.groups, self.level)
        return Interval(value, math.exp(lo), math.exp(hi))


def fit(
    observations: list[Observation],
    reference: str = "d=3",
    n_boot: int = 1000,
    level: float = 0.95,
    shape_level: float = 0.05,
    seed: int = 0,
    on_draw: Callable[[int, int], None] | None = None,
    method: str = "units",
) -> MultiplierFit | None:
    """The shared model, its shape tests, the per-arm model and their intervals by `method`. An
    arm whose own exponent fits significantly better (`ShapeTest.differs`) keeps its own curve in
    the model the others' multipliers are read from. None when the reference arm, or every other
    arm, has < 2 cells. `on_draw(done, total)` after each replicate fit, failed or not."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    got = shared_point(observations, reference)
    if got is None:
        return None
    (arms, table, units, cells, u0), shared, first = got
    shape, per_arm, point_arm = _shape_of(cells, shared, first, shape_level)
    shape = _left_out(shape, table, units, shared)
    model = SharedLaw(arms, reference, u0, frozenset(shape.differs))
    point = model.fit(cells, starts(model, cells)) if shape.differs else first
    if point is None:
        return None
    theta, theta_arm = point[0], point_arm[0] if point_arm is not None else None
    rng, boot = np.random.default_rng(seed), method == "bootstrap"
    weights = _within_teacher_counts(units, n_boot, rng) if boot else np.eye(len(units))
    fits = [(model, theta), (per_arm, theta_arm)]
    reps, reps_arm = replicates(table, fits, weights, on_draw, min_cells=2 if boot else 0)
    held, g = ~np.isnan(reps[:, 0]), groups(units)  # held: the shared model's fit did
    reps, reps_arm = (reps[held], reps_arm[held]) if boot else (reps, reps_arm)
    read = Reader(method, level, g, int((~held).sum()), n_boot)
    col, logs = {a: 3 + i for i, a in enumerate(model.others)}, log_m(reps)  # col: a's log m
    multipliers = {a: Interval(NAN, NAN, NAN) for a in arms} | {reference: Interval(1.0, 1.0, 1.0)}
    multipliers |= {a: read(float(log_m(theta[j])), logs[:, j]) for a, j in col.items()}
    ratio = None
    if "d=2" in col and "d=4" in col:
        j = [col["d=2"], col["d=4"]]
        ratio = read(float(log_ratio(log_m(theta[j]))), log_ratio(logs[:, j]), ratio=True)
    per_unit = {} if boot else {a: tuple(np.exp(logs[:, j]).tolist()) for a, j in col.items()}
    if ratio is not None and not boot:
        pair = logs[:, [col["d=2"], col["d=4"]]]
        per_unit["m2/m4"] = tuple(np.exp(log_ratio(pair)).tolist())
    alphas = [(a, per_arm.index(a)[1]) for a in (arms if theta_arm is not None else ())]
    arm_alpha = {a: read(math.log(theta_arm[i]), np.log(reps_arm[:, i])) for a, i in alphas}
    return MultiplierFit(
        reference=reference, arms=tuple(arms), L_inf=float(theta[0]),
        A=float(math.exp(theta[1] + theta[2] * u0)),
        alpha=read(math.log(theta[2]), np.log(reps[:, 2])), multipliers=multipliers,
        ratio_2_4=ratio, arm_alpha=arm_alpha, shape=shape, units=len(units),
        teachers=len({u[0] for u in units}), n_boot=n_boot if boot else 0, n_failed=read.failed,
        level=level, method=method, df=math.inf if boot else max(len(np.unique(g[held])) - 1, 0),
        per_unit=per_unit, unit_ids=tuple(map(tuple, units)),
    )  # fmt: skip


def _f_test(rss_small, rss_big, extra: int, df2: int) -> tuple[float, float]:
    """(F, p) of a nested model with `extra` more parameters and `df2` residual df."""
    if extra <= 0 or df2 <= 0 or not math.isfinite(rss_big):
        return NAN, NAN
    rss_big = min(rss_big, rss_small)  # the larger model nests the smaller
    if rss_big <= 0:
        return (math.inf, 0.0) if rss_small > 0 else (NAN, 1.0)
    f = ((rss_small - rss_big) / extra) / (rss_big / df2)
    return float(f), float(st.f.sf(f, extra, df2))


def _shape_test(rss_shared, point_arm, cells, shared: SharedLaw, per_arm: SharedLaw, level):
    """F tests on the cells' log losses: every arm's own exponent against the shared one, and per
    non-reference arm its own exponent alone (Holm over the arms), which names the arms whose
    exponent differs."""
    n = sum(len(lp) for lp, _ in cells.values())
    rss_arm = point_arm[1] if point_arm is not None else NAN
    f, p = _f_test(rss_shared, rss_arm, per_arm.size - shared.size, n - per_arm.size)
    raw = {}
    for arm in shared.others:
        one = SharedLaw(shared.arms, shared.reference, shared.u0, frozenset([arm]))
        got = one.fit(cells, starts(one, cells))
        if got is not None:
            raw[arm] = _f_test(rss_shared, got[1], one.size - shared.size, n - one.size)[1]
    tested = {a: v for a, v in raw.items() if math.isfinite(v)}
    adjusted = dict(zip(tested, holm(list(tested.values())).tolist(), strict=True))
    differs = tuple(a for a, v in adjusted.items() if v < level)
    return ShapeTest(not differs, p, f, (per_arm.size - shared.size, n - per_arm.size),
                     level, adjusted, differs)  # fmt: skip


def _shape_of(cells, shared: SharedLaw, first, level: float):
    """(the shape test, the per-arm model, its fit) on `cells`, given the shared model's fit
    `first` there."""
    per_arm = SharedLaw(shared.arms, shared.reference, shared.u0, frozenset(shared.arms))
    point_arm = per_arm.fit(cells, starts(per_arm, cells))
    return _shape_test(first[1], point_arm, cells, shared, per_arm, level), per_arm, point_arm


def _left_out(shape: ShapeTest, table, units, shared: SharedLaw) -> ShapeTest:
    """`shape` with the test repeated with each unit left out in turn (none with < 2 units):
    a shape difference that one unit's absence makes or unmakes is one another machine's
    rounding of that unit's fits could make or unmake too."""
    if len(units) < 2:
        return shape
    named, ps = [], []
    for i in range(len(units)):
        w = np.ones(len(units))
        w[i] = 0.0
        cells = _cells(table, w)
        first = None
        if all(len(cells[a][0]) >= 2 for a in shared.arms):
            first = shared.fit(cells, starts(shared, cells))
        got = None if first is None else _shape_of(cells, shared, first, shape.level)[0]
        named.append(None if got is None else got.differs)
        ps.append(NAN if got is None else got.p)
    return replace(shape, left_out=tuple(named), left_out_p=tuple(ps),
                   units=tuple(tuple(u) for u in units))  # fmt: skip

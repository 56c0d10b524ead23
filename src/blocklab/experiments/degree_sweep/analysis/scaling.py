"""Scaling curves L(P) = L_inf + a P^-alpha per arm, and what each arm is worth in parameters.

A degree experiment trains every arm at several budgets over several units, a unit being a
(teacher, seed) pair. Each arm's curve is fit to its per-budget mean test losses against its ACTUAL
parameter counts (they differ from the nominal budget by up to 2%, a third of the effect we want to
resolve). The efficiency of an arm is the factor of parameters it needs to reach the loss the
reference arm reaches at P_ref, the middle of the reference's measured log range.

Bootstrap, hierarchical and paired: each draw resamples the teachers with replacement, then within
each drawn teacher its seeds with replacement (one teacher: a plain bootstrap over seeds). The same
drawn units serve every arm and every budget, so arms stay paired by (teacher, seed) and noise that
a unit shares across arms cancels in the multipliers. Per draw, arm and budget the loss is the mean
over the drawn units that have one (a diverged or missing trial is skipped; a budget left with none
is dropped from that draw); every arm is refit and the multipliers recomputed. Parameter counts are
the per-budget means over all units, fixed across draws. Intervals are percentiles at `level`.
A draw whose fit fails (fewer than 3 budgets left) is dropped and counted in n_failed; when more
than half the draws fail the interval is (nan, nan). Draws come from numpy's default_rng(seed).
"""

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from blocklab.experiments.degree_sweep.analysis.power_law import fit_batch, fit_power_law, power_law
from blocklab.formatting import plain

_NAMES = ("L_inf", "a", "alpha")
NAN = float("nan")


@dataclass(frozen=True)
class Observation:
    arm: str
    budget: int  # nominal budget: groups the points
    params: int  # actual parameter count of this arm at this budget
    unit: tuple[int, int]  # (teacher, seed)
    loss: float  # final test MSE; nan or inf for a diverged trial (skipped)


def _quantiles(values, level):
    """Percentile interval of the values at level; an end that reaches an infinite value is inf."""
    x = np.sort(np.asarray(values, dtype=float))
    out = []
    for q in ((1 - level) / 2, (1 + level) / 2):
        pos = q * (len(x) - 1)
        i, frac = int(math.floor(pos)), pos - math.floor(pos)
        lo, hi = x[i], x[min(i + 1, len(x) - 1)]
        out.append(float(lo if frac == 0 or lo == hi else lo + (hi - lo) * frac))
    return out[0], out[1]


def _interval(values, n_failed, n_boot, level):
    if n_boot == 0 or 2 * n_failed > n_boot:
        return NAN, NAN
    return _quantiles(values, level)


@dataclass(frozen=True)
class ArmFit:
    arm: str
    L_inf: float  # point fit on the per-budget means
    a: float
    alpha: float
    ci: dict[
        str, tuple[float, float]
    ]  # {"L_inf": (lo, hi), "a": ..., "alpha": ...}: bootstrap percentile intervals
    budgets: tuple[int, ...]  # the nominal budgets with a finite mean, ascending
    params: tuple[float, ...]  # mean actual parameter count per budget
    means: tuple[float, ...]  # mean loss per budget over the units that have one
    n_failed: int = 0  # bootstrap draws where this arm could not be fit

    def predict(self, p):
        """The fitted loss at p parameters."""
        return float(power_law(p, self.L_inf, self.a, self.alpha))

    def budget_for(self, loss):
        """The parameter count at which the curve reaches loss; inf at or below L_inf."""
        gap = float(loss) - self.L_inf
        if gap <= 0:
            return math.inf
        with np.errstate(over="ignore"):
            return float(np.exp((math.log(self.a) - math.log(gap)) / self.alpha))


@dataclass(frozen=True)
class Efficiency:
    arm: str
    reference: str
    ref_params: float  # P_ref: geometric middle of the reference's mean actual parameter counts
    target_loss: float  # the reference's fitted loss at P_ref
    multiplier: float  # this arm's parameters for target_loss / P_ref; inf if target <= its L_inf
    ci_low: float  # bootstrap percentile interval; an end may be inf
    ci_high: float
    extrapolated: bool  # the multiplier's parameter count lies outside this arm's measured range
    infinite_share: float  # fraction of the kept draws with an infinite multiplier
    n_failed: int = 0  # draws dropped because this arm or the reference could not be fit


@dataclass(frozen=True)
class ScalingResult:
    fits: dict[str, ArmFit]  # arm -> ArmFit, for arms with >= 3 budgets that have a finite mean
    efficiency: dict[
        str, Efficiency
    ]  # arm -> Efficiency for every fitted arm, the reference included (exactly 1)
    reference: str | None  # None when the reference arm could not be fit (efficiency is empty)
    n_boot: int
    level: float
    resolution: float | None  # median over the other arms of the half-width of finite intervals

    def to_dict(self):
        """Plain JSON: tuples become lists, and every non-finite float (inf, nan) becomes None.

        So an infinite multiplier (the target is below the arm's L_inf) reads as null, as does an
        interval that the bootstrap could not give; infinite_share tells the two apart.
        """
        fields = ("arm", "L_inf", "a", "alpha", "budgets", "params", "means", "n_failed")
        fits = {
            k: {f: getattr(v, f) for f in fields} | {"ci": {n: v.ci[n] for n in _NAMES}}
            for k, v in self.fits.items()
        }
        eff = {
            k: {f: getattr(v, f) for f in v.__dataclass_fields__}
            for k, v in self.efficiency.items()
        }
        return plain(
            {
                "reference": self.reference,
                "n_boot": self.n_boot,
                "level": self.level,
                "resolution": self.resolution,
                "fits": fits,
                "efficiency": eff,
            }
        )


def _draw_counts(units, n_boot, rng):
    """(n_boot, U) times each unit is drawn: teachers with replacement, then seeds within each.

    Drawing a teacher c times and each time its n seeds with replacement pools to c * n draws from
    a uniform multinomial over its seeds, which is how the seeds are drawn here.
    """
    teachers = sorted({t for t, _ in units})
    T = len(teachers)
    picks = rng.integers(0, T, size=(n_boot, T))
    offsets = (np.arange(n_boot)[:, None] * T + picks).ravel()
    times = np.bincount(offsets, minlength=n_boot * T).reshape(n_boot, T)
    counts = np.zeros((n_boot, len(units)))
    for j, t in enumerate(teachers):
        cols = [i for i, (tt, _) in enumerate(units) if tt == t]
        counts[:, cols] = rng.multinomial(
            times[:, j] * len(cols), np.full(len(cols), 1 / len(cols))
        )
    return counts


def _table(observations):
    """arm -> (budgets, mean params, loss matrix (U, n) with nan where missing), and the units."""
    losses, params = defaultdict(dict), defaultdict(list)
    for o in observations:
        unit = (int(o.unit[0]), int(o.unit[1]))
        key = (o.arm, int(o.budget))
        if unit in losses[key]:
            raise ValueError(
                f"two observations for arm/budget/unit {(*key, unit)}: pairing needs one"
            )
        loss = float(o.loss)
        if math.isfinite(loss) and loss <= 0:
            raise ValueError(f"loss must be > 0 (a log is taken), got {loss} for {(*key, unit)}")
        if not (math.isfinite(float(o.params)) and o.params > 0):
            raise ValueError(f"params must be > 0, got {o.params!r} for {(*key, unit)}")
        losses[key][unit] = loss
        params[key].append(float(o.params))
    units = sorted({u for d in losses.values() for u in d})
    index = {u: i for i, u in enumerate(units)}
    arms = {}
    for arm in sorted({a for a, _ in losses}):
        budgets = sorted(b for a, b in losses if a == arm)
        L = np.full((len(units), len(budgets)), NAN)
        for j, b in enumerate(budgets):
            for u, v in losses[(arm, b)].items():
                L[index[u], j] = v
        L[~np.isfinite(L)] = NAN
        p = np.array([np.mean(params[(arm, b)]) for b in budgets])
        arms[arm] = (np.array(budgets), p, L)
    return arms, units


def _multiplier(ref, arm, p_ref):
    """Per draw: arm's parameters to reach the reference's loss at p_ref, over p_ref."""
    c_r, a_r, al_r = ref
    c, a, al = arm
    with np.errstate(all="ignore"):
        target = c_r + a_r * p_ref ** (-al_r)
        gap = target - c
        m = np.exp((np.log(a) - np.log(np.where(gap > 0, gap, 1.0))) / al - math.log(p_ref))
    failed = np.isnan(c_r) | np.isnan(c)
    return np.where(failed, NAN, np.where(gap > 0, m, np.inf))


def analyze(observations, reference="d=3", n_boot=1000, level=0.95, seed=0, on_draw=None):
    """Fit every arm's scaling curve and its parameter multiplier against the reference arm.

    See the module docstring for the bootstrap; n_boot = 0 gives point estimates with nan intervals.
    `on_draw(done, total)`, when given, is called as each arm's draws are refitted (all of an
    arm's at once): `done` counts the draws refitted so far over every arm, `total` is n_boot
    per arm.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    arms, units = _table(observations)
    point, data = {}, {}
    for arm, (budgets, p, L) in arms.items():
        have = np.isfinite(L)
        with np.errstate(invalid="ignore"):
            means = np.where(have, L, 0.0).sum(0) / have.sum(0)
        ok = np.isfinite(means)
        if ok.sum() < 3:
            continue
        fit = fit_power_law(p[ok], means[ok])
        if fit is None:
            continue
        point[arm] = (budgets[ok], p[ok], means[ok], fit)
        data[arm] = L[:, ok]

    draws = {}
    if n_boot and point:
        counts = _draw_counts(units, n_boot, np.random.default_rng(seed))
        for k, (arm, L) in enumerate(data.items()):
            have = np.isfinite(L)
            n_drawn = counts @ have
            with np.errstate(invalid="ignore"):
                means = (counts @ np.where(have, L, 0.0)) / n_drawn
            draws[arm] = np.column_stack(fit_batch(point[arm][1], means, n_drawn > 0))
            if on_draw is not None:
                on_draw((k + 1) * n_boot, len(data) * n_boot)

    fits = {}
    for arm, (budgets, p, means, (c, a, alpha)) in point.items():
        d = draws.get(arm, np.empty((0, 3)))
        kept = d[np.isfinite(d).all(1)]
        n_failed = len(d) - len(kept)
        ci = {n: _interval(kept[:, i], n_failed, n_boot, level) for i, n in enumerate(_NAMES)}
        fits[arm] = ArmFit(
            arm,
            c,
            a,
            alpha,
            ci,
            tuple(int(b) for b in budgets),
            tuple(float(x) for x in p),
            tuple(float(x) for x in means),
            n_failed,
        )

    if reference not in fits:
        return ScalingResult(fits, {}, None, n_boot, level, None)
    ref = fits[reference]
    p_ref = math.sqrt(min(ref.params) * max(ref.params))
    target = ref.predict(p_ref)
    efficiency = {}
    for arm, fit in fits.items():
        if arm == reference:
            efficiency[arm] = Efficiency(arm, reference, p_ref, target, 1.0, 1.0, 1.0, False, 0.0)
            continue
        need = fit.budget_for(target)
        mult = need / p_ref
        lo, hi, share, n_failed = NAN, NAN, NAN, n_boot
        if n_boot:
            m = _multiplier(draws[reference].T, draws[arm].T, p_ref)
            m = m[~np.isnan(m)]
            n_failed = n_boot - len(m)
            lo, hi = _interval(m, n_failed, n_boot, level)
            share = float(np.isinf(m).mean()) if len(m) else NAN
        outside = not min(fit.params) <= need <= max(fit.params)
        efficiency[arm] = Efficiency(
            arm, reference, p_ref, target, mult, lo, hi, outside, share, n_failed
        )
    widths = [
        (e.ci_high - e.ci_low) / 2
        for arm, e in efficiency.items()
        if arm != reference and math.isfinite(e.ci_low) and math.isfinite(e.ci_high)
    ]
    resolution = float(np.median(widths)) if widths else None
    return ScalingResult(fits, efficiency, reference, n_boot, level, resolution)

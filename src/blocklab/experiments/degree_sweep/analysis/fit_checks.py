"""The design checks that read a run's fits and its shared scaling model (`multiplier`): whether
every arm sees its inputs (`input_rank`), whether its curve falls (`curve`), whether its fits
converged (`converged`) and its restarts searched enough (`search`) at the resolution the run
claims, and whether every multiplier is bounded (`resolution`). `design` runs them in order."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from blocklab.experiments.degree_sweep.analysis.cells import (
    EDGE,
    FAILED,
    Change,
    Check,
    all_counted,
    doubled,
    gmean,
    judged,
    log_band,
    loss,
    side,
    widened,
    wilson,
    worst,
)
from blocklab.theory import h

CONVERGED_SHARE = 0.9
MIN_FALL = 2.0  # the least fall of an arm's loss over its budgets (`curve`)
# the finest resolution in parameters the fits' checks are tied to: seed 000's predicted effect,
# h(3) / h(2) - 1 = 5.7%. A loss slack g costs about log(1 + g) / alpha in log parameters where
# L ~ P^-alpha (3% of loss is 6% of parameters at alpha = 0.5), so `converged` and `search` allow
# the loss slack that is the resolution the run claims (`claimed`) in parameters
RESOLUTION = h(3) / h(2) - 1
DECISIVE = ("d=2", "d=4")  # with m_2 / m_4: the multipliers seed 000's question rests on
REFERENCE = "d=3"  # the arm every multiplier is read against
SEARCH_SHARE = 0.03  # `search`'s loss slack where no exponent was fitted
# how each check's band is made (`cells.Check.method`): a share over trials, a ratio over units
WILSON = "95% Wilson interval over the trials"
T_UNITS = "95% t interval over the (teacher, seed) units"
T_TRIALS = "95% t interval over the trials"


@dataclass(frozen=True)
class Converged(Check):
    share: float  # of the trials, those whose last doubling gained at most `tol`
    trials: int
    # what the last doubling of a fit's iterations may have gained: the certificate's tolerance,
    # or with a fitted exponent alpha the loss slack that is the claimed resolution in parameters
    # (L ~ P^-alpha turns a share g of loss into about g / alpha of parameters)
    tol: float
    least: tuple[tuple[str, int, float], ...]  # (arm, budget, share converged), lowest first
    alpha: float = math.nan  # the shared exponent the tolerance was tied to; NaN: none fitted
    certificate_tol: float = math.nan  # the fits' own stopping tolerance
    resolution: float = math.nan  # the resolution in parameters the run claims (`claimed`)
    count: int = 0  # the trials that converged

    def remedy(self, cfg) -> tuple[Change, ...]:
        """More iterations; with every trial converged and the band still short, more trials."""
        return all_counted(self, cfg, CONVERGED_SHARE) or doubled(cfg, "train.steps")


@dataclass(frozen=True)
class InputRank(Check):
    # (arm, rank, inputs, depth, width): the rank of the arm's input Jacobian before any fit
    arms: tuple[tuple[str, int, int, int, int], ...]
    # (arm, bound, reason): the arms whose design lets fewer directions through than the task
    # has inputs (a narrow linear embedding, a readout of few outputs on a linear network):
    # stated, not failed; the check fails only an arm below its bound (a direction lost inside)
    bounds: tuple[tuple[str, int, str], ...] = ()

    def allowed(self, arm: str, inputs: int) -> int:
        """The most directions `arm`'s design lets through: its bound, else the inputs."""
        return next((b for a, b, _ in self.bounds if a == arm), inputs)

    def remedy(self, cfg) -> tuple[Change, ...]:
        """RMSNorm where LayerNorm hid a direction (it removes the mean, RMSNorm does not); no
        width: a narrow one is a bound the design chose, and passes."""
        if cfg.shape.norm == "layer":
            return (Change("shape.norm", "layer", "rms"),)
        return ()


@dataclass(frozen=True)
class Curve(Check):
    # (arm, smallest budget, its geometric-mean loss, largest budget, its loss, the fall)
    falls: tuple[tuple[str, int, float, int, float, float], ...]
    flat: tuple[str, ...]  # arms whose loss fell less than MIN_FALL x, the whole band below
    # (arm, alpha, low, high): each arm's exponent alone; NaN where it has no fit
    exponents: tuple[tuple[str, float, float, float], ...]
    unbounded: tuple[str, ...]  # arms whose exponent interval reaches a bound or is missing
    bounds: tuple[float, float]
    bands: tuple[tuple[str, float, float], ...] = ()  # (arm, low, high): each fall's 95% band
    edge_arms: tuple[str, ...] = ()  # arms whose fall's band straddles MIN_FALL

    def remedy(self, cfg) -> tuple[Change, ...]:
        """A flat curve: fits stuck, so twice the restarts (and the ladder where it was off),
        or twice the steps under Adam; an exponent at a bound: one budget more, twice the
        largest."""
        out: list[Change] = []
        if self.flat and cfg.train.second_order:
            out += doubled(cfg, "train.restarts", least=2)
            if cfg.ladder == "off" and cfg.mode == "width" and cfg.shape.residual:
                out.append(Change("ladder", "off", "on"))
        elif self.flat:
            out += doubled(cfg, "train.steps")
        if self.unbounded:
            out += widened(cfg, 0, 0.0)
        return tuple(out)


@dataclass(frozen=True)
class Search(Check):
    # (arm, gap, restarts): best-of-K/2 over best-of-K, minus 1, geometric mean over the cells
    gaps: tuple[tuple[str, float, int], ...]
    tol: float  # the largest gap allowed: the claimed resolution as loss (SEARCH_SHARE unfitted)
    alpha: float = math.nan
    resolution: float = math.nan
    bands: tuple[tuple[str, float, float], ...] = ()  # (arm, low, high): each gap's 95% band

    def remedy(self, cfg) -> tuple[Change, ...]:
        return doubled(cfg, "train.restarts", least=2)


@dataclass(frozen=True)
class Resolution(Check):
    # (name, value, low, high): every multiplier, and m_2 / m_4 where both ran
    intervals: tuple[tuple[str, float, float, float], ...]
    unbounded: tuple[str, ...]

    def remedy(self, cfg) -> tuple[Change, ...]:
        """No shared model: the reference arm where it did not run, else one budget more;
        unbounded multipliers: twice the seeds."""
        if self.unbounded == ("model",):
            if REFERENCE not in {a.label for a in cfg.arms()}:
                return (Change("degrees", tuple(cfg.degrees), (*cfg.degrees, "3")),)
            return widened(cfg, 0, 0.0)
        return doubled(cfg, "seeds")


def _alpha(multiplier) -> float:
    a = multiplier.alpha.value if multiplier is not None else math.nan
    return a if math.isfinite(a) and a > 0 else math.nan


def claimed(multiplier) -> float:
    """The resolution in parameters a run claims: the half width (a share) of its most precise
    decisive interval (m_2, m_4, m_2 / m_4; every multiplier where those did not run), and never
    finer than RESOLUTION, the effect a verdict must resolve. A fit's slack is harmless while
    it moves a point by less than that: a run that claims +-30% need not fit to 3%."""
    if multiplier is None:
        return RESOLUTION
    named = {
        a: i
        for a, i in multiplier.multipliers.items()
        if a != multiplier.reference and a not in multiplier.shape.differs
    }
    decisive = [named[a] for a in DECISIVE if a in named] or list(named.values())
    if multiplier.ratio_2_4 is not None:
        decisive.append(multiplier.ratio_2_4)
    widths = [math.expm1(i.half_width_log()) for i in decisive if i.bounded]
    return max(RESOLUTION, min(widths, default=RESOLUTION))


def _slack(multiplier, fallback: float) -> tuple[float, float, float]:
    """(loss slack, alpha, claimed resolution): the loss share that moves a point by the claimed
    resolution in parameters at the shared exponent; `fallback` without a fitted exponent."""
    alpha, res = _alpha(multiplier), claimed(multiplier)
    if not math.isfinite(alpha):
        return fallback, alpha, res
    return math.expm1(alpha * math.log1p(res)), alpha, res


def converged_check(rows, tol: float, multiplier=None) -> Converged:
    """A trial converged when the last doubling of its fit gained at most the loss slack that
    is the claimed resolution in parameters at the shared exponent (`claimed`; the certificate's
    `tol` without a fitted exponent): more iterations would not move its point by as much as
    the run claims to resolve."""
    slack, alpha, res = _slack(multiplier, tol)
    ok = [_gained_at_most(r, slack) for r in rows]
    share = sum(ok) / len(rows) if rows else 0.0
    cells: dict[tuple[str, int], list[bool]] = defaultdict(list)
    for r, good in zip(rows, ok, strict=True):
        cells[(r["arm"], int(r["budget"]))].append(good)
    least = sorted(
        ((a, b, sum(v) / len(v)) for (a, b), v in cells.items() if sum(v) < len(v)),
        key=lambda t: t[2],
    )[:3]
    low, high = wilson(sum(ok), len(rows))
    outcome = side(low, high, CONVERGED_SHARE, at_least=True) if rows else FAILED
    return Converged(
        name="converged",
        **judged(outcome, figure=share, threshold=CONVERGED_SHARE, band=(low, high),
                 method=WILSON),  # fmt: skip
        share=share,
        trials=len(rows),
        tol=slack,
        least=tuple(least),
        alpha=alpha,
        certificate_tol=tol,
        resolution=res,
        count=sum(ok),
    )


def _gained_at_most(r, slack: float) -> bool:
    """A finished fit whose certificate holds, or whose last doubling gained at most `slack`
    without stalling (a doubling that gained nothing and left a gradient is a stall: every step
    rejected, `certify.moved`; the certificate tells the two apart)."""
    if r["status"] != "done":
        return False
    gain = r.get("plateau_improvement")
    return bool(r.get("converged")) or (gain is not None and 0 < gain <= slack)


def curve_check(rows, multiplier) -> Curve:
    """Per arm, the fall of the geometric-mean test loss from the smallest budget to the largest,
    and its own exponent's interval in `multiplier` (None: no fit, every exponent missing)."""
    from blocklab.experiments.degree_sweep.analysis.shared_law import ALPHA_MAX, ALPHA_MIN

    cells: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        cells[r["arm"]][int(r["budget"])].append(((r.get("teacher") or 0, r["seed"]), loss(r)))
    falls, flat, edge, bands, outcomes = [], [], [], [], []
    for arm, by_b in cells.items():
        means = {b: gmean([v for _, v in by_b[b]]) for b in sorted(by_b)}
        means = {b: m for b, m in means.items() if math.isfinite(m)}
        if len(means) < 2:
            flat.append(arm)
            outcomes.append(FAILED)
            continue
        (b0, m0), (b1, m1) = next(iter(means.items())), list(means.items())[-1]
        falls.append((arm, b0, m0, b1, m1, m0 / m1))
        # the fall's band: per unit, its loss at the smallest budget over its loss at the
        # largest (paired: a unit's target is shared by its cells)
        first, last = dict(by_b[b0]), dict(by_b[b1])
        logs = [
            math.log(first[u] / last[u])
            for u in first
            if u in last and first[u] and last[u] and first[u] > 0 and last[u] > 0
        ]
        _, lo, hi = log_band(logs)
        lo, hi = (math.exp(lo), math.exp(hi)) if math.isfinite(lo) else (m0 / m1,) * 2
        bands.append((arm, lo, hi))
        got = side(lo, hi, MIN_FALL, at_least=True)
        outcomes.append(got)
        if got == FAILED:
            flat.append(arm)
        elif got == EDGE:
            edge.append(arm)
    exponents, unbounded = [], []
    margin = 1e-6
    for arm in cells:
        got = multiplier.arm_alpha.get(arm) if multiplier is not None else None
        a = (got.value, got.low, got.high) if got is not None else (math.nan,) * 3
        exponents.append((arm, *a))
        inside = ALPHA_MIN * (1 + margin) < a[1] and a[2] < ALPHA_MAX * (1 - margin)
        if not inside:  # NaN compares False: a missing interval is not inside
            unbounded.append(arm)
            outcomes.append(FAILED)
    least = min(bands, key=lambda b: b[1], default=None)  # the fall nearest its threshold
    return Curve(
        name="curve",
        **judged(worst(outcomes), figure=next(f[-1] for f in falls if f[0] == least[0])
                 if least else math.nan, threshold=MIN_FALL,
                 band=least[1:] if least else None, method=T_UNITS),  # fmt: skip
        falls=tuple(falls),
        bands=tuple(bands),
        edge_arms=tuple(edge),
        flat=tuple(flat),
        exponents=tuple(exponents),
        unbounded=tuple(unbounded),
        bounds=(ALPHA_MIN, ALPHA_MAX),
    )


def search_check(rows, multiplier=None) -> Search:
    """Per arm, how much the second half of the restarts (or chains) gained over the first:
    min over the first K/2 against min over all K, as a ratio minus 1, geometric mean over the
    trials; it may be at most the loss slack that is the claimed resolution in parameters at the
    shared exponent (`claimed`; SEARCH_SHARE without one). Fewer than 2 restarts measure
    nothing, and fail."""
    tol, alpha, res = _slack(multiplier, SEARCH_SHARE)
    gaps: dict[str, list[float]] = defaultdict(list)
    ks: dict[str, int] = {}
    for r in rows:
        losses = r.get("restart_train_losses") or []
        ks[r["arm"]] = len(losses)
        half = [v for v in losses[: len(losses) // 2] if v is not None]
        done = [v for v in losses if v is not None]
        if len(losses) >= 2 and half and min(done) > 0:
            gaps[r["arm"]].append(math.log(min(half) / min(done)))
    out, bands, outcomes = [], [], [] if ks else [FAILED]
    for arm in ks:
        m, lo, hi = log_band(gaps[arm])
        out.append((arm, math.expm1(m) if gaps[arm] else math.nan, ks[arm]))
        bands.append((arm, math.expm1(lo), math.expm1(hi)))
        outcomes.append(side(math.expm1(lo), math.expm1(hi), tol, at_least=False)
                        if gaps[arm] else FAILED)  # fmt: skip
    top = max(bands, key=lambda b: b[2] if math.isfinite(b[2]) else math.inf, default=None)
    return Search(
        name="search",
        **judged(worst(outcomes), figure=dict((a, g) for a, g, _ in out).get(top[0], math.nan)
                 if top else math.nan, threshold=tol, band=top[1:] if top else None,
                 method=T_TRIALS),  # fmt: skip
        gaps=tuple(out), tol=tol, alpha=alpha, resolution=res, bands=tuple(bands),
    )  # fmt: skip


def input_rank_check(input_rank) -> InputRank:
    arms = tuple(
        (a, int(r["rank"]), int(r["inputs"]), int(r["depth"]), int(r["width"]))
        for a, r in input_rank.items()
    )
    bounds = tuple(
        (a, int(r["bound"]), str(r.get("bound_reason") or ""))
        for a, r in input_rank.items()
        if r.get("bound") is not None and int(r["bound"]) < int(r["inputs"])
    )  # a run stored before bounds were measured has none: every arm against its inputs
    allowed = {a: b for a, b, _ in bounds}
    passed = all(r >= allowed.get(a, n) for a, r, n, _, _ in arms)
    return InputRank(name="input_rank", passed=passed, arms=arms, bounds=bounds)


def resolution_check(multiplier) -> Resolution:
    if multiplier is None:
        return Resolution(name="resolution", passed=False, intervals=(), unbounded=("model",))
    # an arm whose exponent differs has no multiplier; its exponent's interval is `curve`'s
    differs = multiplier.shape.differs
    named = [
        (a, i)
        for a, i in multiplier.multipliers.items()
        if a != multiplier.reference and a not in differs
    ]
    if multiplier.ratio_2_4 is not None:
        named.append(("m2/m4", multiplier.ratio_2_4))
    intervals = tuple((n, i.value, i.low, i.high) for n, i in named)
    unbounded = tuple(n for n, i in named if not i.bounded)
    return Resolution(
        name="resolution", passed=bool(named) and not unbounded, intervals=intervals,
        unbounded=unbounded,
    )  # fmt: skip

"""The design checks that read a run's fits and its shared scaling model (`multiplier`): whether
every arm sees its inputs (`input_rank`), whether its curve falls (`curve`), whether its fits
converged (`converged`) and its restarts searched enough (`search`) at the resolution the run
claims, and whether every multiplier is bounded (`resolution`). `design` runs them in order."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from blocklab.analysis.cells import Change, Check, doubled, gmean, loss, widened
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
        return doubled(cfg, "train.steps")


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
    flat: tuple[str, ...]  # arms whose loss fell less than MIN_FALL x
    # (arm, alpha, low, high): each arm's exponent alone; NaN where it has no fit
    exponents: tuple[tuple[str, float, float, float], ...]
    unbounded: tuple[str, ...]  # arms whose exponent interval reaches a bound or is missing
    bounds: tuple[float, float]

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
    return Converged(
        name="converged",
        passed=share >= CONVERGED_SHARE,
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
    from blocklab.analysis.shared_law import ALPHA_MAX, ALPHA_MIN

    cells: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        cells[r["arm"]][int(r["budget"])].append(loss(r))
    falls, flat = [], []
    for arm, by_b in cells.items():
        means = {b: gmean(v) for b, v in sorted(by_b.items())}
        means = {b: m for b, m in means.items() if math.isfinite(m)}
        if len(means) < 2:
            flat.append(arm)
            continue
        (b0, m0), (b1, m1) = next(iter(means.items())), list(means.items())[-1]
        falls.append((arm, b0, m0, b1, m1, m0 / m1))
        if m0 / m1 < MIN_FALL:
            flat.append(arm)
    exponents, unbounded = [], []
    margin = 1e-6
    for arm in cells:
        got = multiplier.arm_alpha.get(arm) if multiplier is not None else None
        a = (got.value, got.low, got.high) if got is not None else (math.nan,) * 3
        exponents.append((arm, *a))
        inside = ALPHA_MIN * (1 + margin) < a[1] and a[2] < ALPHA_MAX * (1 - margin)
        if not inside:  # NaN compares False: a missing interval is not inside
            unbounded.append(arm)
    return Curve(
        name="curve",
        passed=not flat and not unbounded,
        falls=tuple(falls),
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
    out = tuple(
        (arm, math.expm1(float(np.mean(gaps[arm]))) if gaps[arm] else math.nan, ks[arm])
        for arm in ks
    )
    ok = bool(out) and all(math.isfinite(g) and g <= tol for _, g, _ in out)
    return Search(name="search", passed=ok, gaps=out, tol=tol, alpha=alpha, resolution=res)


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

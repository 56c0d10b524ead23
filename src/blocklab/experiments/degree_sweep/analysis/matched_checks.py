"""The checks the matched answer rests on (`matched`), each able to fail in the design it runs
in, each with its own 95% band, and the answer's status.

- `input_rank` (`fit_checks`): every arm sees every input, measured before any fit.
- `robustness`: each estimand (the trimmed mean log m of every quantity) recomputed from the
  fits at half their iterations, and from the best (by validation) of the first half of the
  chains, moves by less than ROBUST_SHARE of its own half width, or of the equivalence margin
  (log(1 + MARGIN)) where the interval is narrower than that. The band is Yuen's interval of the
  teachers' shifts about the aggregate's shift: per-fit noise that is the same in every arm
  averages out over teachers, so the check tightens only against a bias that would move the
  answer. The floor keeps it from defeating itself: a half width shrinks as 1 / sqrt(teachers)
  while a fixed bias does not, so without it any bias at all fails a large enough run, though a
  bias under a quarter of the margin cannot turn one word into another by more than that
  quarter. With one chain there is no half of the chains: that part is not measured.
- `generalization`: per (arm, count) cell, the geometric mean over units of test / training
  loss (the chain the estimator reads), with a t band of the units' log ratios about it; at
  most GENERALIZATION_RATIO.
- `negative_control`: the second d=3 arm, of its own initializations, against d=3: m = 1 must
  lie in its interval (passed); both its intervals, trimmed and plain, excluding 1 fail it; one
  of them excluding 1 is its edge. A run without the control arm cannot pass it: "not run".
- `width_matched` and `replicates`: in width mode every arm is built at one width, and the plan
  fixes the units: "by design" unless a trial failed to finish.

And one for the scaling-law view beside the answer, in place of its checks whose slack is the
resolution a run claims: `converged`, the share of rungs whose certificate holds (doubling the
iterations gained less than the fits' own tolerance), at least CONVERGED_SHARE, with a Wilson
band on the effective number of rungs (`cells.cluster_wilson`: the rungs of one ladder are
clustered).

Outcomes: PASSED, EDGE, FAILED, BY_DESIGN (`cells`). A failed check: NO VERDICT; one at its
edge: INCONCLUSIVE; every check passed and m_2 / m_4 decided (beats, loses to or equivalent):
VERDICT; else INCONCLUSIVE with the teachers that would decide it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from blocklab.experiments.degree_sweep.analysis import matched as mt
from blocklab.experiments.degree_sweep.analysis.cells import (
    EDGE,
    FAILED,
    PASSED,
    Change,
    Check,
    cluster_wilson,
    judged,
    side,
    worst,
)
from blocklab.experiments.degree_sweep.analysis.design import (
    MIN_REPLICATES,
    Generalization,
    generalized,
)
from blocklab.experiments.degree_sweep.analysis.hypotheses import MARGIN

ROBUST_SHARE = 0.25  # an estimand may move by less than this share of its half width
CONVERGED_SHARE = 0.9
CLUSTERED = "95% Wilson interval on the effective rungs (clustered by ladder)"
YUEN = "95% Yuen interval over the teachers"
T_UNITS = "95% t interval over the (teacher, seed) units"


@dataclass(frozen=True)
class Robustness(Check):
    # (quantity, variant, shift in log m, band low, band high, allowed): per estimand and
    # variant ("half iterations", "half the chains")
    shifts: tuple[tuple[str, str, float, float, float, float], ...]
    unmeasured: tuple[str, ...] = ()  # variants the store cannot read, with why

    def remedy(self, cfg) -> tuple[Change, ...]:
        """A shift from half the iterations: twice the iterations; from half the chains: twice
        the chains."""
        moved = {v for _, v, lo, hi, _, a in self.shifts if not -a <= lo <= hi <= a}
        out = []
        if "half iterations" in moved:
            out.append(Change("train.steps", cfg.train.steps, 2 * cfg.train.steps))
        if "half the chains" in moved:
            out.append(Change("train.restarts", cfg.train.restarts, 2 * cfg.train.restarts))
        return tuple(out)


@dataclass(frozen=True)
class Converged(Check):
    share: float
    rungs: int
    ladders: int
    count: int
    tol: float  # the fits' certificate tolerance

    def remedy(self, cfg) -> tuple[Change, ...]:
        return (Change("train.steps", cfg.train.steps, 2 * cfg.train.steps),)


@dataclass(frozen=True)
class NegativeControl(Check):
    ran: bool
    m: float = math.nan
    low: float = math.nan
    high: float = math.nan
    plain_low: float = math.nan
    plain_high: float = math.nan
    teachers: int = 0

    def remedy(self, cfg) -> tuple[Change, ...]:
        if not self.ran:
            return (Change("control", False, True),)
        # an interval that misses 1 on replicates: the chains do not find the arm's loss; more
        return (Change("train.restarts", cfg.train.restarts, 2 * cfg.train.restarts),)


@dataclass(frozen=True)
class ByDesign(Check):
    why: str  # what in the design holds it, or what fell short

    def remedy(self, cfg) -> tuple[Change, ...]:
        if self.name == "replicates":
            return (Change("teachers", cfg.teachers, max(cfg.teachers + 1, MIN_REPLICATES)),)
        return ()


def robustness(rows, full: mt.Matched, n_boot: int, level: float = mt.LEVEL) -> Robustness:
    chains = max((len(r.get("restart_test_losses") or []) for r in rows), default=0)
    variants = {"half iterations": lambda r: mt.reading(r, half=True)}
    unmeasured = []
    if chains >= 2:
        variants["half the chains"] = lambda r: mt.reading(r, chains=chains // 2)
    else:
        unmeasured.append("half the chains: one chain a rung")
    shifts, outcomes = [], []
    for name, read in variants.items():
        if all(read(r) is None for r in rows if mt.loss(r) is not None):
            unmeasured.append(f"{name}: not stored")
            continue
        alt = mt.matched(rows, n_boot=0, read=read, level=level)
        for q, e in full.estimates.items():
            o = alt.get(q)
            if o is None or len(o.per_teacher) != len(e.per_teacher):
                shifts.append((q, name, math.inf, math.inf, math.inf, 0.0))
                outcomes.append(FAILED)
                continue
            d = np.array(o.per_teacher) - np.array(e.per_teacher)  # (T,) each teacher's shift
            tr = mt.yuen(d)
            half = mt.t_quantile(tr.df, level) * tr.se if math.isfinite(tr.se) else 0.0
            shift = o.log_m - e.log_m
            allowed = ROBUST_SHARE * max(e.half_width, math.log1p(MARGIN))
            lo, hi = shift - half, shift + half
            shifts.append((q, name, shift, lo, hi, allowed))
            outcomes.append(
                PASSED if -allowed <= lo and hi <= allowed
                else FAILED if hi < -allowed or lo > allowed else EDGE
            )  # fmt: skip
    if not outcomes:
        # a store without what it reads cannot tell: at its edge, never passed
        return Robustness("robustness", **judged(EDGE), shifts=(), unmeasured=tuple(unmeasured))
    top = max(shifts, key=lambda s: max(abs(s[3]), abs(s[4])) - s[5])
    return Robustness(
        "robustness",
        **judged(
            worst(outcomes), figure=top[2], threshold=top[5], band=(top[3], top[4]), method=YUEN
        ),  # fmt: skip
        shifts=tuple(shifts),
        unmeasured=tuple(unmeasured),
    )


def generalization(rows, level: float = mt.LEVEL) -> Generalization:
    """Per cell the geometric mean of the units' test / training loss, read from the chain the
    estimator reads, with its own t band (`design.generalized`)."""
    units: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in rows:
        got = mt.reading(r)
        if got is None or got[2] is None or not (got[0] > 0 and got[2] > 0):
            continue
        units[(r["arm"], int(r["block_params"]))].append(math.log(got[0] / got[2]))
    return generalized(units, level)


def converged(rows, tol: float, level: float = mt.LEVEL) -> Converged:
    by_ladder: dict[tuple, list[bool]] = defaultdict(list)
    for r in rows:
        by_ladder[(r["arm"], r.get("teacher"), r["seed"])].append(bool(r.get("converged")))
    counts = [sum(v) for v in by_ladder.values()]
    sizes = [len(v) for v in by_ladder.values()]
    n = sum(sizes)
    share = sum(counts) / n if n else 0.0
    low, high = cluster_wilson(counts, sizes, level)
    outcome = side(low, high, CONVERGED_SHARE, at_least=True) if n else FAILED
    return Converged(
        "converged",
        **judged(outcome, figure=share, threshold=CONVERGED_SHARE, band=(low, high),
                 method=CLUSTERED),  # fmt: skip
        share=share, rungs=n, ladders=len(sizes), count=sum(counts), tol=tol,
    )  # fmt: skip


def control_check(e: mt.Estimate | None) -> NegativeControl:
    if e is None:
        return NegativeControl("negative_control", **judged(EDGE), ran=False)
    robust = e.low <= 1 <= e.high
    plain = e.plain_low <= 1 <= e.plain_high
    outcome = PASSED if robust and plain else FAILED if not (robust or plain) else EDGE
    return NegativeControl(
        "negative_control",
        **judged(outcome, figure=e.m, threshold=1.0, band=(e.low, e.high), method=YUEN),
        ran=True, m=e.m, low=e.low, high=e.high, plain_low=e.plain_low,
        plain_high=e.plain_high, teachers=e.teachers,
    )  # fmt: skip


def by_design(rows, width: int | None, failed_trials: int) -> list[Check]:
    """width_matched and replicates, which the plan holds unless a trial failed to finish."""
    out: list[Check] = []
    if width is not None:
        moved = sorted({r["arm"] for r in rows if r.get("width") not in (None, width)})
        why = f"every arm is built at width {width} (--mode width)" if not moved else (
            f"arms built at another width than {width}: {', '.join(moved)}"
        )  # fmt: skip
        out.append(ByDesign("width_matched", passed=not moved, by_design=True, why=why))
    cells: dict[tuple[str, int], set] = defaultdict(set)
    for r in rows:
        if mt.loss(r) is not None:
            cells[(r["arm"], int(r["block_params"]))].add((r.get("teacher"), r["seed"]))
    least = min((len(v) for v in cells.values()), default=0)
    ok = least >= MIN_REPLICATES
    why = (
        f"every cell holds {least} (teacher, seed) units, as planned" if ok and not failed_trials
        else f"every cell holds at least {MIN_REPLICATES} (teacher, seed) units ({least})" if ok
        else f"fewer than {MIN_REPLICATES} (teacher, seed) units in a cell ({least}), too few "
        "for an interval: raise --teachers"
    )  # fmt: skip
    out.append(ByDesign("replicates", passed=ok, by_design=ok and not failed_trials, why=why))
    return out


def teachers_to_decide(e: mt.Estimate | None, teachers: int, cap: int = 10_000) -> int | None:
    """The teachers whose interval would decide `e` (beats or loses to, or equivalent within
    +-MARGIN) if the spread between teachers stays as measured: n (half width / goal)^2."""
    if e is None or not math.isfinite(e.half_width) or e.half_width <= 0:
        return None
    lm = abs(e.log_m)
    goal = max(lm, math.log1p(MARGIN) - lm)
    if goal <= 0:
        return None
    return min(cap, max(teachers + 1, math.ceil(teachers * (e.half_width / goal) ** 2)))

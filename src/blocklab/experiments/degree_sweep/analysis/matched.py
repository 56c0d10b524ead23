"""Seed 000's answer where the arms cost the same: the matched contrast, its estimator fixed
before any run, and the words it gives each comparison and each hypothesis.

The estimator (the degree guide states it; nothing in it is chosen after seeing a run):

- **Reading a rung.** Its test loss, with the chain chosen by validation loss (a store without
  per-chain validation losses falls back to the chain the fit kept, chosen on training loss,
  and says so).
- **Where a pair meets.** For each pair (a, b) of `PAIRS`, the counts of a's rungs that lie
  within b's: b's log loss there is its rung's where b has that count, else interpolated in
  log-log between b's two nearest rungs, never beyond them (`interpolated` says where).
- **Per unit** (a (teacher, seed) pair), the matched contrast: the mean over those counts of
  log L_a - log L_b. It needs no exponent; its sign at each count is reported.
- **The multiplier** m = exp(contrast / alpha), alpha the exponent of L ~ P^-alpha pooled within
  ladders (one slope, an intercept per (unit, arm) ladder). m < 1: the first arm needs fewer
  parameters for the same loss.
- **Over teachers**, the primary aggregate is the 20% trimmed mean of the teachers' log m (a
  teacher's seeds averaged first; with one teacher, over its seeds, an interval that covers
  that target alone) with Yuen's interval (Yuen 1974; Wilcox 2012 ch. 4), alpha's
  uncertainty added by the delta method from a bootstrap over teachers that re-estimates it.
  Beside it: the plain mean with its t interval, the median, tau (the spread between teachers,
  log scale) and the 95% prediction interval for a new teacher.

Rules applied blind to the arm: a rung testing more than 2x its validation loss is refitted
once with fresh chains by the fit itself (`fitting.ladder`); what the refit gives is kept and
counted. Nothing else is excluded.

The words it gives the hypotheses and the comparisons: `hypotheses`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as st

from blocklab.experiments.degree_sweep.analysis.cells import loss
from blocklab.theory import ANSWER_PAIRS, CONTROL_LABEL

# (first arm, second arm, quantity): m is the first arm's multiplier against the second
PAIRS = tuple(
    (a, b, q) for (a, b), q in zip(ANSWER_PAIRS, ("m2/m4", "m(d=2)", "m(d=4)"), strict=True)
)
QUANTITIES = ("m(d=2)", "m(d=4)", "m2/m4")  # the answer's order
CONTROL = CONTROL_LABEL  # the negative control: a second d=3 arm of its own initializations
REFERENCE = "d=3"
COMPARED = ("d=2", "d=3", "d=4")  # the arms the pooled exponent reads
TRIM = 0.2  # the trimmed mean's share cut from each end
LEVEL = 0.95


# ---- reading the rungs -----------------------------------------------------------------------


def _chosen(tests: list, vals: list, chains: int | None) -> tuple[float | None, int | None]:
    """(test loss, index) of the chain of least validation loss among the first `chains`."""
    k = len(tests) if chains is None else chains
    got = [
        (v, i) for i, (t, v) in enumerate(zip(tests[:k], vals[:k], strict=False))
        if t is not None and v is not None and t > 0 and math.isfinite(t)
    ]  # fmt: skip
    if not got:
        return None, None
    _, i = min(got)
    return tests[i], i


def reading(r: dict[str, Any], *, half: bool = False, chains: int | None = None):
    """A rung's losses as the estimator reads them: (test, validation, training) of the chain
    of least validation loss, of the first `chains` chains (None: all), at the end of its fit
    or at half its iterations (`half`). A store without per-chain validation losses chooses on
    training loss, as its fit did. None where the rung did not finish or the store lacks what
    is asked (half iterations, per-chain losses)."""
    if loss(r) is None:
        return None
    pre = "restart_half_" if half else "restart_"
    tests = r.get(f"{pre}test_losses") or []
    vals = r.get(f"{pre}val_losses") or []
    trains = r.get(f"{pre}train_losses") or []
    by = vals if any(v is not None for v in vals) else trains
    if not any(t is not None for t in tests) or not any(v is not None for v in by):
        if half or chains is not None:
            return None
        return loss(r), None, r.get("train_loss")  # a store older than per-chain records
    test, i = _chosen(tests, by, chains)
    if test is None:
        return None
    at = lambda xs: xs[i] if i < len(xs) else None  # noqa: E731
    return test, at(vals), at(trains)


def by_validation(rows) -> bool:
    """Whether the rows carry each chain's validation loss (the estimator's choice of chain)."""
    done = [r for r in rows if loss(r) is not None]
    return bool(done) and all(
        any(v is not None for v in r.get("restart_val_losses") or []) for r in done
    )


# ---- ladders and where they meet ---------------------------------------------------------------

Ladders = dict[tuple, dict[str, list[tuple[int, float]]]]  # unit -> arm -> [(params, log L)]


def ladders(rows, read=reading) -> Ladders:
    """unit -> arm -> its rungs as (block params, log test loss), by count; a rung `read`
    cannot read is left out."""
    out: Ladders = defaultdict(lambda: defaultdict(list))
    for r in rows:
        got = read(r)
        if got is None or got[0] is None or not got[0] > 0:
            continue
        unit = (r.get("teacher") or 0, r["seed"])
        out[unit][r["arm"]].append((int(r["block_params"]), math.log(got[0])))
    for by_arm in out.values():
        for rungs in by_arm.values():
            rungs.sort()
    return out


def at_count(rungs: list[tuple[int, float]], p: int) -> tuple[float, bool] | None:
    """(log L, interpolated) of a ladder at count `p`: its rung's, or the log-log line between
    its two nearest rungs; None outside its rungs (never extrapolated)."""
    for q, y in rungs:
        if q == p:
            return y, False
    below = [(q, y) for q, y in rungs if q < p]
    above = [(q, y) for q, y in rungs if q > p]
    if not below or not above:
        return None
    (q1, y1), (q2, y2) = below[-1], above[0]
    w = (math.log(p) - math.log(q1)) / (math.log(q2) - math.log(q1))
    return (1 - w) * y1 + w * y2, True


def meet(a: list[tuple[int, float]], b: list[tuple[int, float]]):
    """[(count, log L_a - log L_b, b interpolated)] at each of a's counts within b's rungs."""
    out = []
    for p, ya in a:
        got = at_count(b, p)
        if got is not None:
            out.append((p, ya - got[0], got[1]))
    return out


@dataclass(frozen=True)
class Contrast:  # one unit's log ratio at one count where a pair meets (the JSON's `contrasts`)
    unit: str
    pair: str
    budget: int
    log_ratio: float
    interpolated: bool

    def json(self) -> dict[str, Any]:
        keys = ("unit", "pair", "budget", "log_ratio", "interpolated")
        return {k: getattr(self, k) for k in keys}


def unit_name(unit: tuple) -> str:
    return f"teacher {unit[0]}, seed {unit[1]}"


def contrasts(lad: Ladders, a: str, b: str) -> dict[tuple, list[tuple[int, float, bool]]]:
    """unit -> where a and b meet in it (`meet`); units where they do not meet are left out."""
    out = {}
    for unit, by_arm in lad.items():
        if a in by_arm and b in by_arm and (got := meet(by_arm[a], by_arm[b])):
            out[unit] = got
    return out


def pooled_alpha(lad: Ladders, arms=COMPARED) -> float:
    """The exponent of L ~ P^-alpha pooled within ladders: one least-squares slope of log L on
    log P with an intercept per (unit, arm) ladder; NaN where no ladder has two rungs."""
    num = den = 0.0
    for by_arm in lad.values():
        for arm in arms:
            rungs = by_arm.get(arm, [])
            if len(rungs) < 2:
                continue
            x = np.log([p for p, _ in rungs])
            y = np.array([v for _, v in rungs])
            num += float(((x - x.mean()) * (y - y.mean())).sum())
            den += float(((x - x.mean()) ** 2).sum())
    return -num / den if den > 0 else math.nan


# ---- the aggregate over teachers ---------------------------------------------------------------


@dataclass(frozen=True)
class Trimmed:
    """A trimmed mean with Yuen's standard error and degrees of freedom (h - 1, h the values
    kept): with fewer than 1 / TRIM values nothing is cut and it is the plain mean's t."""

    mean: float
    se: float
    df: int


def yuen(values, trim: float = TRIM) -> Trimmed:
    v = np.sort(np.asarray(values, float))
    n = len(v)
    if n == 0:
        return Trimmed(math.nan, math.nan, 0)
    k = int(math.floor(trim * n))
    if n - 2 * k < 2:
        return Trimmed(float(np.mean(v)), math.inf, 0)
    kept = v[k : n - k]
    w = np.clip(v, kept[0], kept[-1])  # winsorized
    se = float(np.std(w, ddof=1)) / ((1 - 2 * k / n) * math.sqrt(n))
    return Trimmed(float(kept.mean()), se, n - 2 * k - 1)


def t_quantile(df: float, level: float = LEVEL) -> float:
    return float(st.t.ppf((1 + level) / 2, df)) if df > 0 else math.inf


def tau_between(per_unit: dict[tuple, float]) -> float:
    """The spread of the true log m between teachers (log scale): with several seeds per
    teacher, one-way random effects' method of moments (the teachers' means' variance less
    the seeds' share of it, at least 0); with one seed per teacher, the sd of the teachers'
    values, which holds the fits' own noise too (an upper bound)."""
    by_t: dict[Any, list[float]] = defaultdict(list)
    for (t, _), v in per_unit.items():
        by_t[t].append(v)
    means = [float(np.mean(v)) for v in by_t.values()]
    if len(means) < 2:
        return math.nan
    between = float(np.var(means, ddof=1))
    within = [float(np.var(v, ddof=1)) / len(v) for v in by_t.values() if len(v) > 1]
    if within:
        between = max(0.0, between - float(np.mean(within)))
    return math.sqrt(between)


@dataclass(frozen=True)
class Estimate:
    """One quantity (a pair's multiplier) over the run's teachers, on the nominal count."""

    quantity: str
    arm: str
    against: str
    log_m: float  # the primary estimate: the trimmed mean of the teachers' log m
    low: float  # its interval on m
    high: float
    plain: float  # the plain mean's m, with its t interval
    plain_low: float
    plain_high: float
    median: float
    tau: float  # the spread between teachers, log scale (`tau_between`)
    pi_low: float  # the 95% prediction interval for a new teacher, on m
    pi_high: float
    units: int  # (teacher, seed) units that met
    teachers: int
    df: int
    contrast: float  # the trimmed mean contrast, log L_a - log L_b (no exponent)
    per_teacher: tuple[float, ...]  # each teacher's log m, by teacher
    budgets: tuple[int, ...]  # where the pair met, in some unit
    interpolated: tuple[int, ...]  # of those, the counts where the second arm was interpolated
    # per count: (units where the first arm's loss is the lower, units met there)
    signs: tuple[tuple[int, int, int], ...] = ()

    @property
    def m(self) -> float:
        return math.exp(self.log_m)

    @property
    def half_width(self) -> float:
        """Half the interval's width in log units; inf where unbounded."""
        if not (self.low > 0 and math.isfinite(self.high)):
            return math.inf
        return (math.log(self.high) - math.log(self.low)) / 2


def _exp(x: float) -> float:
    return math.exp(x) if math.isfinite(x) else (math.inf if x > 0 else 0.0)


def estimate(
    quantity: str,
    a: str,
    b: str,
    met: dict[tuple, list[tuple[int, float, bool]]],
    alpha: float,
    alpha_se: float,
    level: float = LEVEL,
) -> Estimate | None:
    """The aggregate of one pair (see the module's docstring); None where no unit met."""
    if not met or not (alpha > 0):
        return None
    per_unit = {u: float(np.mean([c for _, c, _ in v])) for u, v in met.items()}
    by_t: dict[Any, list[float]] = defaultdict(list)
    for (t, _), c in per_unit.items():
        by_t[t].append(c)
    if len(by_t) < 2:  # one target: its seeds are the replicates (the interval covers it alone)
        by_t = {u: [c] for u, c in per_unit.items()}
    teachers = sorted(by_t)
    c_t = np.array([float(np.mean(by_t[t])) for t in teachers])  # (T,) contrast per teacher
    n = len(c_t)
    tr = yuen(c_t)
    # log m = c / alpha; the delta method adds alpha's bootstrap variance to the contrast's
    log_m = tr.mean / alpha
    se = math.sqrt((tr.se / alpha) ** 2 + (tr.mean * alpha_se / alpha**2) ** 2)
    q = t_quantile(tr.df, level)
    lo, hi = log_m - q * se, log_m + q * se
    plain = float(c_t.mean()) / alpha
    sd = float(np.std(c_t, ddof=1)) / alpha if n > 1 else math.nan
    qp = t_quantile(n - 1, level)
    half = qp * sd / math.sqrt(n) if n > 1 else math.inf
    # a new teacher: the centre's uncertainty plus one teacher's spread (a normal-theory
    # prediction interval, t with n - 1 df)
    pi = qp * sd * math.sqrt(1 + 1 / n) if n > 1 else math.inf
    counts = sorted({p for v in met.values() for p, _, _ in v})
    interp = sorted({p for v in met.values() for p, _, i in v if i})
    signs = tuple(
        (p, sum(1 for v in met.values() for q_, c, _ in v if q_ == p and c < 0),
         sum(1 for v in met.values() for q_, _, _ in v if q_ == p))
        for p in counts
    )  # fmt: skip
    return Estimate(
        quantity=quantity, arm=a, against=b, log_m=log_m, low=_exp(lo), high=_exp(hi),
        plain=math.exp(plain), plain_low=_exp(plain - half), plain_high=_exp(plain + half),
        median=math.exp(float(np.median(c_t)) / alpha),
        tau=tau_between({u: c / alpha for u, c in per_unit.items()}),
        pi_low=_exp(log_m - pi), pi_high=_exp(log_m + pi), units=len(per_unit), teachers=n,
        df=tr.df, contrast=tr.mean, per_teacher=tuple(float(c) / alpha for c in c_t),
        budgets=tuple(counts), interpolated=tuple(interp), signs=signs,
    )  # fmt: skip


def alpha_bootstrap(lad: Ladders, n_boot: int, seed: int = 0) -> float:
    """The standard error of the pooled exponent over teachers resampled with replacement (a
    teacher's units travel together); NaN with fewer than 2 teachers or no draws."""
    teachers = sorted({u[0] for u in lad})
    if len(teachers) < 2 or n_boot <= 0:
        return math.nan
    rng = np.random.default_rng(seed)
    by_t = {t: [u for u in lad if u[0] == t] for t in teachers}
    draws = []
    for _ in range(n_boot):
        picked = rng.choice(len(teachers), len(teachers))
        sample = {(k, u): lad[u] for k, i in enumerate(picked) for u in by_t[teachers[i]]}
        a = pooled_alpha(sample)
        if math.isfinite(a):
            draws.append(a)
    return float(np.std(draws, ddof=1)) if len(draws) > 1 else math.nan


@dataclass(frozen=True)
class Matched:
    """The matched design's estimates, from one reading of the rungs."""

    alpha: float
    alpha_se: float
    estimates: dict[str, Estimate]  # quantity -> estimate, where the pair met
    contrasts: tuple[Contrast, ...]
    control: Estimate | None  # the negative control against d=3, where it ran
    by_validation: bool  # the chains were chosen by validation loss

    def get(self, quantity: str) -> Estimate | None:
        return self.estimates.get(quantity)


def matched(rows, n_boot: int = 1000, read=reading, level: float = LEVEL) -> Matched:
    """Every pair's estimate from `rows` (rung rows of the degree sweep) read by `read`."""
    lad = ladders(rows, read)
    alpha = pooled_alpha(lad)
    alpha_se = alpha_bootstrap(lad, n_boot)
    se = alpha_se if math.isfinite(alpha_se) else 0.0
    estimates, out = {}, []
    for a, b, quantity in PAIRS:
        met = contrasts(lad, a, b)
        got = estimate(quantity, a, b, met, alpha, se, level)
        if got is not None:
            estimates[quantity] = got
        out += [
            Contrast(unit_name(u), f"{a}/{b}", p, c, i)
            for u, v in sorted(met.items()) for p, c, i in v
        ]  # fmt: skip
    control = estimate("control", CONTROL, REFERENCE, contrasts(lad, CONTROL, REFERENCE),
                       alpha, se, level)  # fmt: skip
    return Matched(alpha, alpha_se, estimates, tuple(out), control, by_validation(rows))


def applies(rows) -> bool:
    """Whether some pair of `PAIRS` meets in the rows: the matched design's answer exists."""
    lad = ladders(rows, reading)
    return any(contrasts(lad, a, b) for a, b, _ in PAIRS)

"""Coverage of the shared model's intervals (`multiplier`), by simulation from a known model.

A design is a degree sweep's size: (teacher, seed) units, teachers, and the noise of one unit's
log loss in one cell. Each replication draws every unit's losses from

    L_a(P) = L_inf + A_t (P / m_{a,t})^(-alpha),   log m_{a,t} = log m_a + N(0, tau^2),

with A_t = A exp(N(0, tau_A^2)) per teacher (m = 1 for the reference, every teacher) and log-loss
noise N(0, sigma^2) per (unit, arm, budget); fits the shared model as `multiplier.fit` does, reads
each method's 95% interval, and counts how often it holds the truth (Morris, White & Crowther
2019, "Using simulation studies to evaluate statistical methods", Stat. Med. 38: 2074; the Monte
Carlo error of a coverage p over R replications is sqrt(p (1 - p) / R)).

Two truths: "population", the multipliers m_a themselves, which an interval must hold to speak
of the block rather than of the teachers drawn; "teachers", the mean over the drawn teachers of
their own log m_{a,t}, the most an interval can hold with one teacher (it cannot see tau).

The arms and ladder are the degree sweep's width-3 demo: parameters per layer d=2 18, d=3 27,
d=4 36, mlp 12, at depths 1, 2, 4, 8 (8x in parameters). alpha is drawn per replication from
[1.5, 2.5] and L_inf from [0, 0.3] times the reference's loss at its largest budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blocklab.experiments.degree_sweep.analysis import multiplier
from blocklab.experiments.degree_sweep.analysis.scaling import Observation
from blocklab.sample_size import units_for
from blocklab.theory import CONTROL_LABEL

PER_LAYER = {"d=2": 18, "d=3": 27, "d=4": 36, "mlp": 12}
DEPTHS = (1, 2, 4, 8)
TRUTH = {"d=2": 0.9, "d=3": 1.0, "d=4": 1.1, "mlp": 2.0}
REFERENCE = "d=3"
QUANTITIES = ("m(d=2)", "m(d=4)", "m(mlp)", "m2/m4", "alpha")
# the intervals measured: multiplier.fit's methods, and "units-naive", read from the same unit
# fits as "units" but a t over every unit with the teachers ignored (it differs from "units"
# only with >= 2 teachers)
METHODS = ("units", "units-naive", "bootstrap")


@dataclass(frozen=True)
class Design:
    units: int
    teachers: int  # units are split among teachers as evenly as they go
    sigma: float  # SD of one unit's log loss in one cell
    tau: float = 0.1  # SD between teachers of each arm's log multiplier
    tau_a: float = 0.3  # SD between teachers of log A


@dataclass(frozen=True)
class Row:
    units: int
    teachers: int
    sigma: float
    method: str
    quantity: str
    target: str  # "population" or "teachers" (see the module docstring)
    coverage: float
    se: float  # Monte Carlo standard error of the coverage
    replications: int
    unbounded: float  # share of the replications whose interval was unbounded or missing
    half_width: float  # median half width of the bounded intervals (log units; alpha: absolute)


def draw(design: Design, rng: np.random.Generator):
    """(observations, truths): one replication's data and {target: {quantity: value}}, each
    value on the scale its interval is read (log m, log m2/m4, alpha)."""
    alpha = rng.uniform(1.5, 2.5)
    a = 0.1 * PER_LAYER[REFERENCE] ** alpha  # the reference's loss at depth 1 is 0.1
    floor = rng.uniform(0, 0.3) * a * (PER_LAYER[REFERENCE] * DEPTHS[-1]) ** -alpha
    seeds = [design.units // design.teachers + (t < design.units % design.teachers)
             for t in range(design.teachers)]  # fmt: skip
    shifts = {arm: rng.normal(0, design.tau, design.teachers) for arm in TRUTH}
    shifts[REFERENCE] = np.zeros(design.teachers)
    log_a = math.log(a) + rng.normal(0, design.tau_a, design.teachers)
    out = []
    for t, n in enumerate(seeds):
        for arm, m in TRUTH.items():
            log_m = math.log(m) + shifts[arm][t]
            for depth in DEPTHS:
                p = PER_LAYER[arm] * depth
                clean = math.log(floor + math.exp(log_a[t] - alpha * (math.log(p) - log_m)))
                for s, e in enumerate(rng.normal(0, design.sigma, n)):
                    out.append(Observation(arm, depth, p, (t, s), math.exp(clean + e)))
    population = {f"m({a})": math.log(TRUTH[a]) for a in ("d=2", "d=4", "mlp")}
    drawn = {k: v + float(np.mean(shifts[k[2:-1]])) for k, v in population.items()}
    truths = {}
    for name, logs in (("population", population), ("teachers", drawn)):
        truths[name] = logs | {"m2/m4": logs["m(d=2)"] - logs["m(d=4)"], "alpha": alpha}
    return out, truths


def intervals(observations, methods=METHODS, n_boot: int = 200, level: float = 0.95, seed=0):
    """{method: {quantity: (low, high)}} on the truths' scales, read as `multiplier.fit` reads
    them from one fit of the shared model (no shape test: the simulated arms share their
    exponent); None where the shared model did not fit."""
    got = multiplier.shared_point(observations, REFERENCE)
    if got is None:
        return None
    (_, table, units, _, _), model, (theta, _) = got
    out, fits, per_unit = {}, [(model, theta)], None
    for method in methods:
        kind, _, variant = method.partition("-")
        if kind == "bootstrap":
            counts = multiplier._within_teacher_counts(units, n_boot, np.random.default_rng(seed))
            reps = multiplier.replicates(table, fits, counts, min_cells=2)[0]
        else:  # "units-naive" reads the same fits as "units"
            if per_unit is None:
                per_unit = multiplier.replicates(table, fits, np.eye(len(units)))[0]
            reps = per_unit
        held = ~np.isnan(reps[:, 0])
        g = np.arange(len(units)) if variant == "naive" else multiplier.groups(units)
        read = multiplier.Reader(kind, level, g, int((~held).sum()), n_boot)
        out[method] = _read(read, reps[held] if kind == "bootstrap" else reps, model, theta)
    return out


def _read(read: multiplier.Reader, reps, model, theta) -> dict[str, tuple[float, float]]:
    """The quantities' (low, high) as `multiplier.fit` reads them, on the truths' scales."""
    col, logs = {a: 3 + i for i, a in enumerate(model.others)}, multiplier.log_m(reps)
    out = {}
    for arm, j in col.items():
        i = read(float(multiplier.log_m(theta[j])), logs[:, j])
        out[f"m({arm})"] = (_log(i.low), _log(i.high))
    j = [col["d=2"], col["d=4"]]
    ratio = multiplier.log_ratio(multiplier.log_m(theta[j]))
    i = read(float(ratio), multiplier.log_ratio(logs[:, j]), ratio=True)
    out["m2/m4"] = (_log(i.low), _log(i.high))
    i = read(math.log(theta[2]), np.log(reps[:, 2]))
    out["alpha"] = (i.low, i.high)
    return out


def _log(x: float) -> float:
    if x == 0:
        return -math.inf
    return math.log(x) if x > 0 else x  # NaN stays NaN


def simulate(
    design: Design, replications: int, methods=METHODS, n_boot: int = 200, seed: int = 0,
    boot_replications: int | None = None,
) -> list[Row]:  # fmt: skip
    """Coverage of every method's interval for every quantity and target, over `replications`
    draws of `design` (one numpy stream from `seed`); the bootstrap, which refits up to `n_boot`
    draws per replication, on the first `boot_replications` of them (None: all)."""
    rng = np.random.default_rng(seed)
    hits: dict[tuple[str, str, str], list[float]] = {}
    widths: dict[tuple[str, str], list[float]] = {}
    boot = replications if boot_replications is None else boot_replications
    for r in range(replications):
        obs, truths = draw(design, rng)
        now = [m for m in methods if m != "bootstrap" or r < boot]
        got = intervals(obs, now, n_boot, seed=r)
        for method in now:
            for q in QUANTITIES:
                lo, hi = got[method][q] if got is not None else (math.nan, math.nan)
                bounded = math.isfinite(lo) and math.isfinite(hi)
                widths.setdefault((method, q), []).append((hi - lo) / 2 if bounded else math.nan)
                for target, truth in truths.items():
                    # a missing interval (NaN) holds nothing; an unbounded one holds everything
                    hit = float(lo <= truth[q] <= hi) if lo == lo and hi == hi else 0.0
                    hits.setdefault((method, q, target), []).append(hit)
    rows = []
    for (method, q, target), h in hits.items():
        p = float(np.mean(h))
        w = np.array(widths[(method, q)])
        rows.append(Row(
            design.units, design.teachers, design.sigma, method, q, target, p,
            math.sqrt(p * (1 - p) / len(h)), len(h), float(np.mean(np.isnan(w))),
            float(np.nanmedian(w)) if np.isfinite(w).any() else math.nan,
        ))  # fmt: skip
    return rows


SIZED = ("m(d=2)", "m(d=4)", "m2/m4")  # the decisive quantities a sized run reads


@dataclass(frozen=True)
class SizedRow:
    rule: str  # "fixed" (the size given) or "pilot" (sized by the first units' intervals)
    first: int  # units the size is read from ("pilot"), or the fixed size
    target: float  # the resolution R sized to
    sigma: float
    tau: float
    quantity: str
    coverage: float  # of the population's multiplier, at the size the rule reached
    se: float
    replications: int
    units_median: float  # units the rule ran, median over the replications
    units_max: int
    reached: float  # share of replications whose widest interval reached +-R


def _subset(observations, teachers: int):
    return [o for o in observations if o.unit[0] < teachers]


def _widest(got) -> float:
    """The widest decisive half width (log) of one replication's "units" intervals."""
    widths = [(hi - lo) / 2 for lo, hi in (got["units"][q] for q in SIZED)]
    return max((w if math.isfinite(w) else math.inf for w in widths), default=math.inf)


def simulate_sized(
    rule: str, first: int, target: float, cap: int, sigma: float, tau: float = 0.1,
    replications: int = 200, seed: int = 0,
) -> list[SizedRow]:  # fmt: skip
    """Coverage of the "units" intervals (a t over teachers of one seed each) at the size a
    sizing rule reaches: "fixed", `first` teachers; "pilot", the first `first` teachers'
    intervals sized by `sample_size.units_for` to +-`target` (at most `cap`, at least `first`),
    then the interval read over all of them, the first ones included (an internal pilot:
    the size depends on the data the interval then reads)."""
    rng = np.random.default_rng(seed)
    hits: dict[str, list[float]] = {q: [] for q in SIZED}
    sizes, reached = [], []
    for _ in range(replications):
        obs, truths = draw(Design(cap, cap, sigma, tau), rng)
        n = first
        if rule == "pilot":
            got = intervals(_subset(obs, first), ("units",))
            hw = _widest(got) if got is not None else math.inf
            need = units_for(hw, first, target, df=first - 1)
            n = cap if need is None else min(cap, max(first, need))
        got = intervals(_subset(obs, n), ("units",))
        sizes.append(n)
        reached.append(got is not None and _widest(got) <= math.log1p(target))
        for q in SIZED:
            lo, hi = got["units"][q] if got is not None else (math.nan, math.nan)
            truth = truths["population"][q]
            hits[q].append(float(lo <= truth <= hi) if lo == lo and hi == hi else 0.0)
    return [
        SizedRow(
            rule,
            first,
            target,
            sigma,
            tau,
            q,
            float(np.mean(h)),
            math.sqrt(np.mean(h) * (1 - np.mean(h)) / len(h)),
            len(h),
            float(np.median(sizes)),
            max(sizes),
            float(np.mean(reached)),
        )  # fmt: skip
        for q, h in hits.items()
    ]


# ---- the matched answer's intervals (`matched`) ------------------------------------------------

# the matched demo's ladders (`DegreeSweepConfig.demo`'s --arm-depths), its control a second d=3
MATCHED_DEPTHS = {"d=2": (2, 4, 6), "d=3": (1, 2, 4), "d=4": (1, 2, 3), CONTROL_LABEL: (1, 2, 4)}
MATCHED_TRUTH = {"d=2": 0.9, "d=3": 1.0, "d=4": 1.05, CONTROL_LABEL: 1.0}
SPIKE_EVERY, SPIKE = 20, 30.0  # one unit in 20 has one rung this far off (the stored run's)


@dataclass(frozen=True)
class MatchedDesign:
    teachers: int  # one seed a teacher, as the demo runs
    sigma: float  # SD of one rung's log test loss
    tau: float = 0.1  # SD between teachers of each arm's log multiplier
    heavy: bool = True  # one unit in SPIKE_EVERY with one rung SPIKE x off
    floor: bool = False  # L_inf > 0: the law bends, as real curves do


def matched_rows(design: MatchedDesign, rng: np.random.Generator) -> list[dict]:
    """One replication's rung rows (the fields `matched.reading` reads), drawn from L = L_inf +
    A_t (P / m_{a,t})^-alpha with log m_{a,t} = log m_a + N(0, tau^2), alpha in [1.5, 2.5]."""
    alpha = rng.uniform(1.5, 2.5)
    ref = PER_LAYER["d=3"] * max(MATCHED_DEPTHS["d=3"])
    l_inf = rng.uniform(0, 0.3) * ref**-alpha if design.floor else 0.0
    rows = []
    spiked = {t for t in range(design.teachers) if rng.random() < 1 / SPIKE_EVERY}
    for t in range(design.teachers):
        a_t = math.exp(rng.normal(0, 0.3))
        rungs = [(arm, d) for arm, ds in MATCHED_DEPTHS.items() for d in ds]
        spike = rungs[rng.integers(len(rungs))] if t in spiked else None
        for arm, depth in rungs:
            p = PER_LAYER[arm.split(" ")[0]] * depth
            m = MATCHED_TRUTH[arm] * math.exp(rng.normal(0, design.tau)) if arm != "d=3" else 1.0
            test = (l_inf + a_t * (p / m) ** -alpha) * math.exp(rng.normal(0, design.sigma))
            if (arm, depth) == spike:
                test *= SPIKE ** rng.choice((-1, 1))
            rows.append({"arm": arm, "teacher": t, "seed": 0, "block_params": p, "budget": p,
                         "status": "done", "test_loss": test, "train_loss": test,
                         "restart_test_losses": [test], "restart_val_losses": [test],
                         "restart_train_losses": [test]})  # fmt: skip
    return rows


MATCHED_QUANTITIES = ("m(d=2)", "m(d=4)", "m2/m4", "control")


def simulate_matched(design: MatchedDesign, replications: int, n_boot: int = 100, seed: int = 0):
    """Coverage of the matched answer's 95% intervals (trimmed: Yuen's with alpha's bootstrap;
    plain: the mean's t) of the population's multipliers, and the median half width of m_2 /
    m_4's: {(quantity, "trimmed" | "plain"): (coverage, Monte Carlo se)}, "width": ..."""
    from blocklab.experiments.degree_sweep.analysis import matched as mt

    rng = np.random.default_rng(seed)
    truth = {"m(d=2)": MATCHED_TRUTH["d=2"], "m(d=4)": MATCHED_TRUTH["d=4"],
             "m2/m4": MATCHED_TRUTH["d=2"] / MATCHED_TRUTH["d=4"], "control": 1.0}  # fmt: skip
    hits: dict[tuple[str, str], list[bool]] = {}
    widths = []
    for _ in range(replications):
        got = mt.matched(matched_rows(design, rng), n_boot=n_boot)
        for q in MATCHED_QUANTITIES:
            e = got.control if q == "control" else got.get(q)
            if e is None:
                continue
            hits.setdefault((q, "trimmed"), []).append(e.low <= truth[q] <= e.high)
            hits.setdefault((q, "plain"), []).append(e.plain_low <= truth[q] <= e.plain_high)
        if (e := got.get("m2/m4")) is not None:
            widths.append(e.half_width)
    out: dict = {}
    for key, v in hits.items():
        p = float(np.mean(v))
        out[key] = (p, math.sqrt(p * (1 - p) / len(v)))
    out["width"] = float(np.expm1(np.median(widths))) if widths else math.nan
    return out

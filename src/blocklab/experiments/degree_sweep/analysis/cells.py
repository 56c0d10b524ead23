"""What the degree sweep's design checks read: each (arm, budget) cell's statistics over its
(teacher, seed) units; `Check`, what every check returns (`design`, `fit_checks`), with the
`Change`s to the run's config its remedy picks; and those changes as the command to run next."""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as st

from blocklab import config
from blocklab.analysis.plateau import plateaued
from blocklab.analysis.stats import interval
from blocklab.specs import SECOND_ORDER


@dataclass(frozen=True)
class Change:
    """A setting the run's next command changes: the config's key (a nested config's dotted:
    "train.steps"), its value in the run and the value to run next."""

    key: str
    old: Any
    new: Any


# a check's outcome: its figure's own 95% band clears the threshold (passed), misses it whole
# (failed) or straddles it (edge: the run cannot tell, and another machine's rounding could
# land on either side); a check whose figure is exact is passed or failed; one that the run's
# design cannot fail (a width every arm is built at, a count of units the plan fixes) is shown
# "by design", never "passed": it cannot tell the reader anything the config did not
PASSED, FAILED, EDGE, BY_DESIGN = "passed", "failed", "edge", "by design"


@dataclass(frozen=True)
class Check:  # a subclass holds what the check measured; the degree report's `capacity` words it
    name: str
    passed: bool  # the outcome is PASSED
    # the figure the outcome was decided on, the threshold it is held to and its 95% band
    # (None: an exact figure), by `method`; set for the checks whose figure has a band
    edge: bool = field(default=False, kw_only=True)
    figure: float = field(default=math.nan, kw_only=True)
    threshold: float = field(default=math.nan, kw_only=True)
    band: tuple[float, float] | None = field(default=None, kw_only=True)
    method: str = field(default="exact", kw_only=True)
    # the run's design holds it whatever the fits do (`BY_DESIGN`); `passed` is then True
    by_design: bool = field(default=False, kw_only=True)

    @property
    def outcome(self) -> str:
        if self.by_design and self.passed:
            return BY_DESIGN
        return PASSED if self.passed else EDGE if self.edge else FAILED

    def remedy(self, cfg) -> tuple[Change, ...]:
        """What a failed check changes in the run's config `cfg` for the next run, each value
        past the run's own (never advice the run already followed); () where no setting of the
        config fixes it."""
        return ()


def side(low: float, high: float, threshold: float, at_least: bool) -> str:
    """A band's outcome against `threshold` (a figure passes at >= it where `at_least`, else at
    <= it): PASSED where the whole band clears it, FAILED where the whole band misses it, EDGE
    where it straddles it."""
    if not at_least:
        low, high, threshold = -high, -low, -threshold
    return PASSED if low >= threshold else FAILED if high < threshold else EDGE


def worst(outcomes) -> str:
    """The outcome of a check over several figures: FAILED where one failed, else EDGE where
    one is at its edge, else PASSED."""
    got = set(outcomes)
    return FAILED if FAILED in got else EDGE if EDGE in got else PASSED


def judged(outcome: str, **fields) -> dict[str, Any]:
    """A check's `passed` and `edge` from its outcome, with its other fields."""
    return {"passed": outcome == PASSED, "edge": outcome == EDGE, **fields}


def wilson(count: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a share `count` / `n` (SciPy's); (0, 1) with no trials."""
    if n <= 0:
        return 0.0, 1.0
    ci = st.binomtest(count, n).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def cluster_wilson(
    counts: list[int], sizes: list[int], level: float = 0.95
) -> tuple[float, float]:
    """The Wilson interval of a share counted over clusters (a ladder's rungs: `counts[i]` of
    `sizes[i]` in cluster i), on the effective number of trials: the total over the design
    effect, the ratio of the clusters' variance of the share (the ratio estimator's, Cochran
    1977 ch. 6) to the binomial one (Kish 1965). Rungs of one ladder share its fits and its
    target, so they are not independent trials; a design effect below 1 is taken as 1."""
    y, m = np.asarray(counts, float), np.asarray(sizes, float)
    n, k = float(m.sum()), len(m)
    if n <= 0:
        return 0.0, 1.0
    p = float(y.sum() / n)
    deff = 1.0
    if k > 1 and 0 < p < 1:
        between = k / (k - 1) * float(((y - p * m) ** 2).sum()) / n**2
        deff = max(1.0, between / (p * (1 - p) / n))
    n_eff = n / deff
    z = float(st.norm.ppf((1 + level) / 2))
    centre = (p + z * z / (2 * n_eff)) / (1 + z * z / n_eff)
    half = z / (1 + z * z / n_eff) * math.sqrt(p * (1 - p) / n_eff + z * z / (4 * n_eff**2))
    return max(0.0, centre - half), min(1.0, centre + half)


def trials_to_clear(share: float, level: float = 0.95) -> int:
    """The fewest trials whose Wilson band clears `share` when every one of them counts: below
    that, even all of them leave the check at its edge (35 for 90%)."""
    n = 1
    while wilson(n, n, level)[0] < share:
        n += 1
    return n


def all_counted(check, cfg, share: float) -> tuple[Change, ...] | None:
    """A share check at its edge with every trial counted: the seeds whose trials clear
    `share` (`trials_to_clear`); None where some trial did not count (the check's own remedy
    applies)."""
    if check.trials == 0 or check.count < check.trials:
        return None
    seeds = math.ceil(cfg.seeds * trials_to_clear(share) / check.trials)
    return (Change("seeds", cfg.seeds, max(seeds, cfg.seeds + 1)),)


def log_band(logs, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of per-unit log figures: the mean +- t_{n-1} se, a band in log units
    (low = high = mean with fewer than 2 finite values: no spread to read)."""
    v = np.asarray([x for x in logs if x is not None and math.isfinite(x)], dtype=float)
    if not len(v):
        return math.nan, math.nan, math.nan
    m = float(v.mean())
    if len(v) < 2:
        return m, m, m
    half = float(st.t.ppf((1 + level) / 2, len(v) - 1)) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return m, m - half, m + half


def loss(r: dict[str, Any]) -> float | None:
    """A finished trial's test loss; None for a diverged one."""
    return r.get("test_loss") if r["status"] == "done" else None


def second_order(rows) -> bool:
    """The rows are second-order fits (`fitting.converge`), which carry convergence certificates
    and search no learning rate."""
    return bool(rows) and all(r.get("optimizer") in SECOND_ORDER for r in rows)


def mean_of(values) -> float:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else math.nan


def _fit_stats(trials) -> dict[str, float]:
    """A cell's second-order fields (NaN where its trials have none, as Adam trials do)."""
    certified = [r["converged"] for r in trials if r.get("converged") is not None]
    medians = [
        float(np.median(done))
        for r in trials
        if (done := [v for v in r.get("restart_train_losses") or [] if v is not None])
    ]
    return {
        "converged_fraction": sum(certified) / len(trials) if certified else math.nan,
        "train_mean": mean_of(r.get("train_loss") for r in trials),
        "restart_median_mean": mean_of(medians),
        "restart_spread": mean_of(r.get("restart_spread") for r in trials),
    }


def budget_stats(rows, tol: float, level: float = 0.95) -> dict[str, dict[int, dict[str, Any]]]:
    """arm -> budget -> test-loss statistics over (teacher, seed): mean, std, interval, the share
    plateaued, and with several teachers the spread within a teacher (the mean over teachers of
    the seeds' std) and between teachers (the std of the teachers' means). Second-order fits add
    the share converged, the mean training loss of the best restarts, the mean of each trial's
    median restart and the mean restart spread."""
    groups: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        groups[r["arm"]][int(r["budget"])].append(r)
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for arm, by_budget in groups.items():
        out[arm] = {}
        for b, trials in sorted(by_budget.items()):
            per_teacher = defaultdict(list)
            for r in trials:
                if loss(r) is not None:
                    per_teacher[r.get("teacher", 0)].append(loss(r))
            losses = [v for values in per_teacher.values() for v in values]
            mean, std, lo, hi, n = interval(losses, level)
            # the geometric mean and the t interval of log loss, mapped back: never below zero,
            # and the cell value the scaling model fits
            logs = [math.log(v) for v in losses if v > 0]
            g, _, g_lo, g_hi, _ = interval(logs, level) if logs else (math.nan,) * 5
            within = [np.std(v, ddof=1) for v in per_teacher.values() if len(v) > 1]
            means = [np.mean(v) for v in per_teacher.values()]
            out[arm][b] = {
                "mean": mean,
                "std": std,
                "ci_low": lo,
                "ci_high": hi,
                "n": n,
                "gmean": math.exp(g) if math.isfinite(g) else math.nan,
                "g_low": math.exp(g_lo) if math.isfinite(g_lo) else math.nan,
                "g_high": math.exp(g_hi) if math.isfinite(g_hi) else math.nan,
                "plateaued_fraction": sum(plateaued(r, tol) for r in trials) / len(trials),
                "within_teacher_std": float(np.mean(within)) if within else math.nan,
                "between_teacher_std": float(np.std(means, ddof=1)) if len(means) > 1 else math.nan,
                "teachers": len(per_teacher),
                "block_params": int(trials[0]["block_params"]),
                # the cell's functional count (`measures.functional`); None: not recorded
                "functional_params": trials[0].get("functional_params"),
                **_fit_stats(trials),
            }
    return out


def gmean(values) -> float:
    kept = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return float(np.exp(np.mean(np.log(kept)))) if kept else math.nan


@dataclass(frozen=True)
class Invocation:
    """How a run was started, which its next command repeats with changes: its config, the
    command `run.json` recorded (None: not known), the experiment's command words and the
    config fields its command has no flag for."""

    cfg: Any
    recorded: str | None = None
    words: str = ""
    skip: tuple[str, ...] = ()
    # command words -> the config that command starts from (`Experiment.defaults`); None: the
    # config's class called bare
    defaults: Any = None
    # the next command's changes -> its plan (`engine.pricing.Plan`: what it fits and costs, from
    # the run's store); None: not priced (no store, as in a simulation)
    price: Any = None


def setting(cfg, key: str) -> Any:
    """The value of a dotted config key ("train.steps")."""
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def doubled(cfg, key: str, least: int = 1) -> tuple[Change, ...]:
    """`key` at twice the run's value, and at least `least`."""
    old = setting(cfg, key)
    return (Change(key, old, max(least, 2 * old)),)


def widened(cfg, floor: int, span: float) -> tuple[Change, ...]:
    """The run's budgets (its depths where it gave none) with the largest doubled until they
    number at least `floor` and span at least `span` times, one more at least: a scaling
    curve's points, further out."""
    key = "budgets" if cfg.budgets else "depths"
    values = sorted(setting(cfg, key))
    if not values:
        return ()
    grown = [*values, 2 * values[-1]]
    while len(grown) < floor or grown[-1] / grown[0] < span:
        grown.append(2 * grown[-1])
    return (Change(key, setting(cfg, key), tuple(grown)),)


def replaced(cfg, changes) -> Any:
    """`cfg` with `changes` made; the config's own checks run on the result."""
    for c in changes:
        head, *rest = c.key.split(".")
        value = c.new
        if rest:  # a nested config's field
            value = dataclasses.replace(getattr(cfg, head), **{rest[0]: c.new})
        cfg = dataclasses.replace(cfg, **{head: value})
    return cfg


# how `blocklab.run` records its command (`api.run`): the experiment's words, no flags
API_CALL = re.compile(r"^blocklab\.api\.run\((['\"])(?P<words>[^'\"]+)\1")


def next_command(run: Invocation, changes) -> tuple[Any, str]:
    """The config after `changes` and the command that runs it: the run's own command (as
    `run.json` recorded it) with the changed flags replaced, and the flags of keys the new
    config no longer reads, and --fresh, dropped; where the run was not started from the
    command line, `blocklab WORDS` (its own words where `blocklab.run` recorded them) with
    every flag whose value differs from the defaults. Raises the config's error where the
    changes make a config it refuses."""
    cfg, recorded, words = run.cfg, run.recorded or "", run.words
    new = replaced(cfg, changes)
    by_key = {key: (flag, tp) for flag, (key, tp) in config.flags(type(cfg), run.skip).items()}
    idle = set(config.unused(new))
    if recorded.split(" ", 1)[0] == "blocklab":
        drop = [by_key[k] for k in idle | {c.key for c in changes} if k in by_key]
        # --fresh would refit what this run stored, which the next one reuses where it can
        said = config.without(shlex.split(recorded)[1:], {**dict(drop), "--fresh": bool})
        keys = [c.key for c in changes]
    else:
        called = API_CALL.match(recorded)
        said = (called["words"] if called else words).split()
        default = run.defaults(" ".join(said)) if run.defaults else type(cfg)()
        for k, v in sorted(getattr(new, "task_options", {}).items()):
            said += ["--task-option", f"{k}={v}"]
        keys = [k for k in by_key if setting(new, k) != setting(default, k)]
    for key in keys:
        if key in by_key and key not in idle:
            flag, tp = by_key[key]
            said += config.flag_words(flag, setting(new, key), tp)
    return new, shlex.join(["blocklab", *said])

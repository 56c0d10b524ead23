"""The degree sweep's arms across seeds: per-arm summaries, paired verdicts, ranking beside h(d).

Every function takes flat rows, one per finished trial (status "done" or "diverged"), with the keys
task, budget, arm, degree, seed, status, metric, higher_is_better, test_metric, steps_to_threshold,
threshold, max_steps, block_params, other_params, depth, width, lr (curves are read by the plots).
"""

import math
import warnings
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum

import numpy as np
from scipy import stats

from blocklab.analysis.stats import NAN, holm, interval, paired_p
from blocklab.theory import h, layer_degrees

TEST = (
    "paired two-sided t-test across (teacher, seed) pairs (scipy.stats.ttest_rel), "
    "Holm-Bonferroni corrected"
)


def _arm_order(arm, degree):
    return (degree is None, degree if degree is not None else 0.0, arm)


def unit(r):
    """What pairs trials across arms: the same target (teacher) and the same seed."""
    return (r.get("teacher", 0), r["seed"])


def _validate(rows):
    seen, metric_of = set(), {}
    for r in rows:
        key = (r["task"], int(r["budget"]), r["arm"], unit(r))
        if key in seen:
            raise ValueError(f"two trials for task/budget/arm/unit {key}: pairing needs one")
        seen.add(key)
        if r["status"] not in ("done", "diverged"):
            raise ValueError(f"status must be 'done' or 'diverged', got {r['status']!r} for {key}")
        if r["status"] == "done" and not _finite(r["test_metric"]):
            raise ValueError(f"trial {key} is done but its test metric is {r['test_metric']!r}")
        metric = (r["metric"], bool(r["higher_is_better"]))
        if metric_of.setdefault(key[:2], metric) != metric:
            raise ValueError(f"{key[:2]} mixes metrics {metric_of[key[:2]]} and {metric}")


def _finite(x):
    return x is not None and math.isfinite(float(x))


def _group(rows, *fields):
    groups = defaultdict(list)
    for r in rows:
        groups[tuple(int(r[f]) if f == "budget" else r[f] for f in fields)].append(r)
    return {k: sorted(v, key=unit) for k, v in groups.items()}


@dataclass(frozen=True)
class Summary:
    task: str
    budget: int
    arm: str
    degree: float | None
    metric: str
    higher_is_better: bool
    n_seeds: int  # trials finished: done + diverged
    n: int  # done seeds: the test metric statistics below are over these
    mean: float
    std: float
    lo: float
    hi: float
    n_diverged: int
    n_reached: int  # done seeds whose validation loss reached the threshold
    steps_mean: float  # steps-to-threshold statistics over the n_reached seeds
    steps_std: float
    steps_lo: float
    steps_hi: float
    threshold: float
    max_steps: int
    block_params: int  # from the first seed (the budget solver gives every seed the same shape)
    other_params: int  # embedding and readout: outside the budget, reported beside it
    depth: int
    width: int
    lr: float  # the chosen learning rate of the first seed
    values: tuple[float, ...] = ()  # the test metric of each done seed, in seed order


def summarize_arms(rows, level=0.95):
    """One Summary per (task, budget, arm), sorted by task, budget, degree (None last), arm."""
    _validate(rows)
    out = []
    for (task, budget, arm), trials in _group(rows, "task", "budget", "arm").items():
        first = trials[0]
        done = [r for r in trials if r["status"] == "done"]
        mean, std, lo, hi, n = interval([r["test_metric"] for r in done], level)
        steps = [r["steps_to_threshold"] for r in done if r["steps_to_threshold"] is not None]
        s_mean, s_std, s_lo, s_hi, n_reached = interval(steps, level)
        out.append(
            Summary(
                task=task,
                budget=budget,
                arm=arm,
                degree=None if first["degree"] is None else float(first["degree"]),
                metric=first["metric"],
                higher_is_better=bool(first["higher_is_better"]),
                n_seeds=len(trials),
                n=n,
                mean=mean,
                std=std,
                lo=lo,
                hi=hi,
                n_diverged=len(trials) - n,
                n_reached=n_reached,
                steps_mean=s_mean,
                steps_std=s_std,
                steps_lo=s_lo,
                steps_hi=s_hi,
                threshold=float(first["threshold"]),
                max_steps=int(first["max_steps"]),
                block_params=int(first["block_params"]),
                other_params=int(first["other_params"]),
                depth=int(first["depth"]),
                width=int(first["width"]),
                lr=float(first["lr"]),
                values=tuple(float(r["test_metric"]) for r in done),
            )
        )
    return sorted(out, key=lambda s: (s.task, s.budget, *_arm_order(s.arm, s.degree)))


@dataclass(frozen=True)
class Comparison:
    arm: str
    mean_diff: float  # mean over paired seeds of (best - arm), in metric units; nan without pairs
    p_raw: float  # nan when untestable (fewer than 2 paired seeds)
    p_holm: float
    significant: bool  # Holm-adjusted p <= alpha (two-sided: either direction)
    n_pairs: int


class Outcome(Enum):
    """What the paired tests of a task and budget let its verdict say (`report/verdicts.py`
    words it)."""

    REFUSED = "refused"  # no arm finished 2 seeds: no best arm, nothing compared
    ALONE = "alone"  # one arm finished: nothing to compare it with
    UNTESTED = "untested"  # no other arm shares 2 finished seeds with the best
    BEATS = "beats"  # the best arm is significantly better than at least one other
    BEATS_NONE = "beats_none"  # the only significant differences favour another arm
    NO_DIFFERENCE = "no_difference"


@dataclass(frozen=True)
class Verdict:
    task: str
    budget: int
    metric: str
    higher_is_better: bool
    outcome: Outcome
    best: str | None  # None when no arm has 2 done seeds
    best_mean: float
    comparisons: tuple[Comparison, ...]  # best vs every other arm that finished at least once
    beats: tuple[str, ...]  # significantly worse than best
    unresolved: tuple[str, ...]  # tested, not significantly different from best
    # significantly better than best on the seeds both finished: with unequal seed sets the
    # best mean can lose there
    beaten_by: tuple[str, ...]
    diverged_all: tuple[str, ...]
    untestable: tuple[str, ...]  # fewer than 2 seeds where both arms are done
    n_candidates: int  # arms with 2+ done seeds, among which best is chosen
    n_finished: int  # arms done in at least one seed
    n_seeds: int
    n_teachers: int
    alpha: float
    test: str


def _against_best(
    done: dict[str, dict], best: str, others: list[str], alpha: float
) -> tuple[Comparison, ...]:
    """`best` against each of `others` on the units both finished (a paired t-test where there
    are 2 pairs or more), Holm-corrected over the arms tested."""
    pairs = {}
    for a in others:
        seeds = sorted(set(done[best]) & set(done[a]))
        pairs[a] = (np.array([done[best][s] for s in seeds]), np.array([done[a][s] for s in seeds]))
    tested = [a for a in others if len(pairs[a][0]) >= 2]
    p_raw = {a: paired_p(*pairs[a]) for a in tested}
    p_holm = dict(zip(tested, holm([p_raw[a] for a in tested]), strict=True))
    comparisons = []
    for a in others:
        x, y = pairs[a]
        q = float(p_holm.get(a, NAN))
        comparisons.append(
            Comparison(
                arm=a,
                mean_diff=float(np.mean(x - y)) if len(x) else NAN,
                p_raw=p_raw.get(a, NAN),
                p_holm=q,
                significant=bool(q <= alpha),
                n_pairs=len(x),
            )
        )
    return tuple(comparisons)


def _verdict(task, budget, trials, alpha):
    first = trials[0]
    degree = {r["arm"]: r["degree"] for r in trials}
    arms = sorted(degree, key=lambda a: _arm_order(a, degree[a]))
    done = {
        a: {
            unit(r): float(r["test_metric"])
            for r in trials
            if r["arm"] == a and r["status"] == "done"
        }
        for a in arms
    }
    diverged_all = tuple(a for a in arms if not done[a])
    candidates = [a for a in arms if len(done[a]) >= 2]
    common = dict(
        task=task,
        budget=budget,
        metric=first["metric"],
        higher_is_better=bool(first["higher_is_better"]),
        diverged_all=diverged_all,
        n_candidates=len(candidates),
        n_finished=len(arms) - len(diverged_all),
        n_seeds=len({unit(r) for r in trials}),
        n_teachers=len({r.get("teacher", 0) for r in trials}),
        alpha=alpha,
        test=TEST,
    )
    if not candidates:
        return Verdict(
            outcome=Outcome.REFUSED,
            best=None,
            best_mean=NAN,
            comparisons=(),
            beats=(),
            unresolved=(),
            beaten_by=(),
            untestable=tuple(a for a in arms if a not in diverged_all),
            **common,
        )

    sign = 1.0 if common["higher_is_better"] else -1.0
    means = {a: float(np.mean(list(done[a].values()))) for a in candidates}
    best = max(candidates, key=lambda a: sign * means[a])  # ties: the first in degree order
    others = [a for a in arms if a != best and a not in diverged_all]
    comparisons = _against_best(done, best, others, alpha)
    beats = tuple(c.arm for c in comparisons if c.significant and sign * c.mean_diff > 0)
    beaten_by = tuple(c.arm for c in comparisons if c.significant and sign * c.mean_diff <= 0)
    if not others:
        outcome = Outcome.ALONE
    elif all(c.n_pairs < 2 for c in comparisons):
        outcome = Outcome.UNTESTED
    elif beats:
        outcome = Outcome.BEATS
    else:
        outcome = Outcome.BEATS_NONE if beaten_by else Outcome.NO_DIFFERENCE
    return Verdict(
        outcome=outcome,
        best=best,
        best_mean=means[best],
        comparisons=comparisons,
        beats=beats,
        unresolved=tuple(c.arm for c in comparisons if c.n_pairs >= 2 and not c.significant),
        beaten_by=beaten_by,
        untestable=tuple(c.arm for c in comparisons if c.n_pairs < 2),
        **common,
    )


def compare(rows, alpha=0.05):
    """One Verdict per (task, budget): the best arm against every other, paired by seed."""
    _validate(rows)
    groups = _group(rows, "task", "budget")
    return [_verdict(*key, groups[key], alpha) for key in sorted(groups)]


@dataclass(frozen=True)
class Ranking:
    task: str
    budget: int
    metric: str
    higher_is_better: bool
    arms: tuple[str, ...]  # arms with a numeric degree and a mean, in degree order
    degrees: tuple[float, ...]  # average degree per arm
    h: tuple[float, ...]  # predicted score per arm: h of its per-layer degrees
    predicted: tuple[str, ...]  # best first by h; equal h keeps degree order
    measured: tuple[str, ...]  # best first by mean test metric
    rho: float  # Spearman between h and the measured score (> 0: theory agrees); nan below 3 arms
    p: float


def ranking_vs_theory(summaries):
    """Per (task, budget): the measured order of the numeric-degree arms beside the order of h."""
    groups = defaultdict(list)
    for s in summaries:
        if s.degree is not None and math.isfinite(s.mean):
            groups[(s.task, s.budget)].append(s)
    out = []
    for (task, budget), group in sorted(groups.items()):
        group = sorted(group, key=lambda s: _arm_order(s.arm, s.degree))
        sign = 1.0 if group[0].higher_is_better else -1.0
        score = [sign * s.mean for s in group]
        hs = [h(layer_degrees(s.arm, s.degree)) for s in group]
        rho, p, order = NAN, NAN, range(len(group))
        if len(group) >= 3:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # constant input: spearmanr warns and returns nan
                rho, p = (float(v) for v in stats.spearmanr(hs, score))
        out.append(
            Ranking(
                task=task,
                budget=budget,
                metric=group[0].metric,
                higher_is_better=group[0].higher_is_better,
                arms=tuple(s.arm for s in group),
                degrees=tuple(s.degree for s in group),
                h=tuple(hs),
                predicted=tuple(group[i].arm for i in sorted(order, key=lambda i: -hs[i])),
                measured=tuple(group[i].arm for i in sorted(order, key=lambda i: -score[i])),
                rho=rho,
                p=p,
            )
        )
    return out

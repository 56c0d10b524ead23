"""Statistics of a suite of tasks at difficulty levels (`blocklab mad`): accuracy per (block,
task, level) over seeds, a per-block aggregate with a stratified bootstrap interval, paired tests
between blocks over the (task, level) cells, and the rank correlation of a block's degree with its
aggregate.

Rows are `experiments._trials.row` dicts with the keys block, task, level, seed, status and
test_metric (test accuracy).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import defaultdict
from typing import Any

import numpy as np
from scipy import stats

from blocklab.analysis.stats import holm, interval
from blocklab.theory import h

BOOTSTRAP = 10000
CORRELATION = "Spearman rank correlation across blocks (scipy.stats.spearmanr)"
PAIRED = (
    "Wilcoxon signed-rank test over the (task, level) cells' mean accuracies "
    "(scipy.stats.wilcoxon, two-sided), Holm-corrected over the pairs of blocks"
)


def cells(rows: list[dict[str, Any]]) -> dict[tuple[str, str, int], list[float]]:
    """(block, task, level) -> the test accuracies of its finished seeds (diverged ones left
    out: they have none)."""
    out: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for r in rows:
        key = (r["block"], r["task"], r["level"])
        out.setdefault(key, [])
        if r["status"] == "done" and r["test_metric"] is not None:
            out[key].append(float(r["test_metric"]))
    return dict(out)


def results(rows: list[dict[str, Any]], level: float = 0.95) -> list[dict[str, Any]]:
    """Per (block, task, level): mean test accuracy over seeds with its Student-t interval,
    clipped to [0, 1] where the interval passes a bound accuracy cannot."""
    out = []
    for (block, task, lvl), values in sorted(cells(rows).items(), key=lambda kv: kv[0]):
        mean, std, lo, hi, n = interval(values, level)
        out.append(
            {
                "block": block,
                "task": task,
                "level": lvl,
                "mean": mean,
                "std": std,
                "ci_low": max(0.0, lo) if math.isfinite(lo) else lo,
                "ci_high": min(1.0, hi) if math.isfinite(hi) else hi,
                "n": n,
                "diverged": sum(
                    r["status"] == "diverged"
                    for r in rows
                    if (r["block"], r["task"], r["level"]) == (block, task, lvl)
                ),
            }
        )
    return out


def scores(
    rows: list[dict[str, Any]], degrees: dict[str, float | None], seed: int = 0
) -> dict[str, dict[str, Any]]:
    """Per block: the mean over its (task, level) cells of the cell's mean accuracy (MAD's
    aggregate), with a 95% percentile bootstrap interval that resamples seeds within each cell
    (stratified: every cell keeps its weight), and the block's degree."""
    rng = np.random.default_rng(seed)
    by_block: dict[str, list[np.ndarray]] = defaultdict(list)
    for (block, _, _), values in cells(rows).items():
        by_block[block].append(np.asarray(values, dtype=float))
    out = {}
    for block, groups in sorted(by_block.items()):
        filled = [g for g in groups if len(g)]
        if len(filled) < len(groups) or not filled:
            # a cell without a finished seed has no accuracy: no aggregate over all cells
            out[block] = {"score": None, "ci_low": None, "ci_high": None}
        else:
            score = float(np.mean([g.mean() for g in filled]))
            draws = np.mean(
                [g[rng.integers(0, len(g), (BOOTSTRAP, len(g)))].mean(1) for g in filled], 0
            )  # (BOOTSTRAP,)
            lo, hi = np.percentile(draws, [2.5, 97.5])
            out[block] = {"score": score, "ci_low": float(lo), "ci_high": float(hi)}
        out[block]["degree"] = degrees.get(block)
        out[block]["cells"] = len(groups)
    return out


def correlation(block_scores: dict[str, dict[str, Any]], against: str = "degree") -> dict:
    """Spearman's rho between each block's degree (or h(degree) = ln d / d, seed 000's
    expressiveness per parameter) and its aggregate score, over the blocks that have both; rho
    and p are None below three such blocks or when either side is constant."""
    pairs = [
        (s["degree"], s["score"])
        for s in block_scores.values()
        if s["degree"] is not None and s["score"] is not None
    ]
    xs = [h(d) if against == "h(degree)" else d for d, _ in pairs]
    rho = p = None
    if len(pairs) >= 3 and len(set(xs)) > 1 and len({y for _, y in pairs}) > 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = stats.spearmanr(xs, [y for _, y in pairs])
        rho, p = float(res.statistic), float(res.pvalue)
    return {"rho": rho, "p": p, "against": against, "n": len(pairs), "test": CORRELATION}


def paired(rows: list[dict[str, Any]], alpha: float) -> list[dict[str, Any]]:
    """Every pair of blocks over the (task, level) cells both ran: the mean difference of cell
    means (a - b), the Wilcoxon p-value and its Holm correction, and which is better where the
    corrected p is below alpha."""
    means: dict[str, dict[tuple[str, int], float]] = defaultdict(dict)
    for (block, task, lvl), values in cells(rows).items():
        if values:
            means[block][(task, lvl)] = float(np.mean(values))
    out = []
    for a, b in itertools.combinations(sorted(means), 2):
        common = sorted(set(means[a]) & set(means[b]))
        diff = np.array([means[a][c] - means[b][c] for c in common])
        p = 1.0
        if len(common) and np.any(diff != 0):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p = float(stats.wilcoxon(diff, zero_method="zsplit").pvalue)
        out.append({"a": a, "b": b, "cells": len(common), "difference": _mean(diff), "p": p})
    for pair, adjusted in zip(out, holm([c["p"] for c in out]), strict=True):
        pair["p_holm"] = float(adjusted)
        d = pair["difference"]
        pair["better"] = (pair["a"] if d > 0 else pair["b"]) if adjusted < alpha else None
    return out


def _mean(x: np.ndarray) -> float | None:
    return float(x.mean()) if len(x) else None


def one_sided_lower(a: list[float], b: list[float]) -> float | None:
    """p of "mean(a) < mean(b)" by Welch's t-test (scipy.stats.ttest_ind, one-sided); None
    without two values on each side. Both sides constant (no spread, where the test is
    undefined): its limit, 0 when a's value is below b's, else 1."""
    if len(a) < 2 or len(b) < 2:
        return None
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 1.0 if a[0] >= b[0] else 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(stats.ttest_ind(a, b, equal_var=False, alternative="less").pvalue)


def trial_time(
    rows: list[dict[str, Any]], lr_choice: dict[str, dict[str, Any]], by: str = "task"
) -> dict:
    """Where a run's training time went: the seconds of its trials (the rows) and of the rate
    search's other rates (the chosen rate's search trial is a row), in all, per block and per
    `by`, the row field that names a rate choice after its block ("block/<by>"). Returns
    {"total", "search", "trainings", "by_block", "by_<by>"}, the shares largest first."""
    by_block: dict[str, float] = defaultdict(float)
    by_other: dict[str, float] = defaultdict(float)
    trainings, search = 0, 0.0
    for r in rows:
        by_block[r["block"]] += r["seconds"] or 0.0
        by_other[str(r[by])] += r["seconds"] or 0.0
        trainings += 1
    for key, c in lr_choice.items():
        block, other = key.rsplit("/", 1)
        for rate, sec in (c.get("seconds") or {}).items():
            if rate != f"{c['lr']:g}" and sec is not None:
                by_block[block] += sec
                by_other[other] += sec
                search += sec
                trainings += 1

    def ranked(d):
        return dict(sorted(d.items(), key=lambda kv: -kv[1]))

    total = sum(by_block.values())
    return {"total": total, "search": search, "trainings": trainings,
            "by_block": ranked(by_block), f"by_{by}": ranked(by_other)}  # fmt: skip

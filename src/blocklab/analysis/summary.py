"""Summaries over seeds of an experiment's flat rows, the intervals of its counts, and an interval
of a positive mean that stays positive.

An experiment stores its trials and returns one flat row per finished trial (status "done" or
"diverged"); the report of that experiment groups the rows by the keys it compared and summarizes
a value over the seeds of each group here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blocklab.analysis.stats import NAN, interval


def summarize(
    rows: list[dict[str, Any]], keys: tuple[str, ...], value: str = "test_metric"
) -> list[dict[str, Any]]:
    """Per group of `keys`, in the order the rows first give each group: mean, std and 95%
    t-interval of `value` (the test metric, or e.g. the test loss) over seeds; diverged trials
    are counted, not averaged."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, group in groups.items():
        values = [r[value] for r in group if r["status"] == "done"]
        mean, std, lo, hi, n = interval(values)
        out.append(
            {
                **dict(zip(keys, key, strict=True)),
                "mean": mean,
                "std": std,
                "lo": lo,
                "hi": hi,
                "n": n,
                "diverged": sum(r["status"] == "diverged" for r in group),
                "total_params": group[0]["total_params"],
                # the same count under the key the commands' JSON contract pins
                "params": group[0]["total_params"],
                "seeds": sorted(r["seed"] for r in group),
                "values": {r["seed"]: r[value] for r in group if r["status"] == "done"},
            }
        )
    return out


def spread(values: list[float | None]) -> dict[str, Any]:
    """Mean, min and max of the values that exist (None: not measured), beside all of them."""
    xs = [v for v in values if v is not None]
    if not xs:
        return {"mean": None, "min": None, "max": None, "values": values}
    return {"mean": sum(xs) / len(xs), "min": min(xs), "max": max(xs), "values": values}


def binomial_interval(k: int, n: int, level: float = 0.95) -> dict[str, float]:
    """The fraction k / n of successes with its exact (Clopper-Pearson) interval."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(level, method="exact")
    return {"fraction": k / n, "lo": float(ci.low), "hi": float(ci.high)}


def drawn_interval(s) -> tuple[float, float]:
    """The interval a figure draws for a summary over seeds (the degree sweep's
    `analysis.arms.Summary`): its Student-t interval, or for a metric that cannot fall below zero
    (MSE, every value positive) the bootstrap interval of `positive_interval`, which cannot
    either."""
    if s.metric == "mse" and all(v > 0 for v in s.values):
        return positive_interval(s.values)
    return s.lo, s.hi


def positive_interval(values, level=0.95, draws=4000):
    """(lo, hi): a percentile bootstrap interval of the mean of positive values (an MSE over
    seeds). Resampled means stay within the values' range, so the interval stays positive where
    the Student-t interval of two seeds (t = 12.7) reaches far below zero. nan below 2 values."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return NAN, NAN
    rng = np.random.default_rng(0)
    means = x[rng.integers(0, len(x), (draws, len(x)))].mean(1)
    lo, hi = np.percentile(means, [50 - 50 * level, 50 + 50 * level])
    return float(lo), float(hi)

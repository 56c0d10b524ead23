"""The statistics of the rank-collapse experiment (`experiment`, seed 003): per-trial
log ratio curves, their summaries over seeds, the check against seed 003 Theorem 2.2's bound,
and the findings with their tests.

Ratios span decades and pure attention in float32 reaches exactly identical tokens (ratio 0), so
every statistic is taken on log10 of the ratio clipped at float32 machine epsilon (`FLOOR`): the
networks compute in float32, so a smaller relative residual is rounding, not signal. Clipping
only shrinks the measured slopes and differences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import numpy as np

from blocklab.analysis.stats import holm, interval, paired_p

STAGES = ("init", "trained")
NORMS = ("composite", "frobenius")
FLOOR = float(np.finfo(np.float32).eps)  # 2^-23: the smallest ratio float32 states resolve
LOG_FLOOR = math.log10(FLOOR)


# --- per-trial curves ------------------------------------------------------------------------


def log_ratio(median: list[float]) -> np.ndarray:
    """log10 of the per-layer median ratios, clipped at FLOOR; (L + 1,)."""
    return np.log10(np.maximum(np.asarray(median, dtype=float), FLOOR))


def _stages(row: dict[str, Any]) -> tuple[str, ...]:
    # a diverged network's weights are not a trained network: only its init counts
    return STAGES if row["status"] == "done" else ("init",)


def curves(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[int, np.ndarray]]:
    """{(variant, stage, norm): {seed: log10 ratio per layer (L + 1,)}}."""
    out: dict[tuple[str, str, str], dict[int, np.ndarray]] = {}
    for r in rows:
        for stage in _stages(r):
            summary = r["measures"]["collapse"][stage]
            for norm in NORMS:
                key = (r["variant"], stage, norm)
                out.setdefault(key, {})[r["seed"]] = log_ratio(summary[norm]["median"])
    return out


def slope(logs: np.ndarray) -> float:
    """Least-squares slope of log10 ratio against the layer, decades per layer."""
    return float(np.polyfit(np.arange(len(logs)), logs, 1)[0])


def depth_mean(logs: np.ndarray) -> float:
    """Mean log10 ratio over layers 1..L: higher means the collapse is slower."""
    return float(np.mean(logs[1:]))


def _stats(values) -> dict[str, Any]:
    mean, std, lo, hi, n = interval(values)
    return {"mean": mean, "std": std, "lo": lo, "hi": hi, "n": n}


def summarize_curves(logs) -> list[dict[str, Any]]:
    """Mean, std and 95% t-interval over seeds of log10 ratio per (variant, stage, norm, layer),
    with the number of seeds at the floor."""
    out = []
    for (variant, stage, norm), by_seed in logs.items():
        stacked = np.stack([by_seed[s] for s in sorted(by_seed)])  # (seeds, L + 1)
        for layer in range(stacked.shape[1]):
            col = stacked[:, layer]
            out.append(
                {
                    "variant": variant,
                    "stage": stage,
                    "norm": norm,
                    "layer": layer,
                    **_stats(col),
                    "at_floor": int((col <= LOG_FLOOR).sum()),
                    "seeds": sorted(by_seed),
                }
            )
    return out


# --- theory beside the measurement ---------------------------------------------------------


def bound_check(rows: list[dict[str, Any]], depth: int) -> dict[str, Any]:
    """Per stage: seed 003 Theorem 2.2's bound (log10, median over sequences, mean over seeds) and
    whether the measured median ratio stays below it in every seed and layer. If the bound holds
    for every sequence it holds for the medians (order statistics keep the order)."""
    out: dict[str, Any] = {}
    for stage in STAGES:
        bounds, violations = [], []
        for r in rows:
            summary = r["measures"]["collapse"].get(stage) if stage in _stages(r) else None
            c = summary["composite"] if summary else {}
            if "bound_log10_median" not in c:
                continue
            b = np.asarray(c["bound_log10_median"], dtype=float)  # (L,) layers 1..L
            with np.errstate(divide="ignore"):
                measured = np.log10(np.asarray(c["median"][1:], dtype=float))  # 0 -> -inf
            bad = np.nonzero(measured > b + 1e-9)[0]
            violations += [{"seed": r["seed"], "layer": int(i) + 1} for i in bad]
            bounds.append(b)
        if not bounds:
            continue
        mean = np.mean(bounds, axis=0)
        out[stage] = {
            "log10_bound": mean.tolist(),
            "seeds": len(bounds),
            "violations": violations,
            "vacuous_layers": [i + 1 for i in range(depth) if mean[i] >= 0],
        }
    return out


# --- findings --------------------------------------------------------------------------------


def cause(variant: str) -> str:
    """What the prediction for a variant rests on (after Dong et al. and seed 003): "skip" (short
    paths keep it up), else "mlp" (slows the collapse), else "pure" or "norm" (nothing stops it)."""
    parts = set(variant.split("+"))
    for part in ("skip", "mlp"):
        if part in parts:
            return part
    return "pure" if variant == "pure" else "norm"


class Agreement(Enum):  # a test's outcome against the prediction
    YES = "yes"
    NO = "no"
    NOT_SHOWN = "not_shown"  # a predicted difference the test does not show
    CONSISTENT = "consistent"  # no difference, where none above pure was predicted
    UNTESTED = "untested"  # fewer than 2 seeds


@dataclass(frozen=True)
class SeedMean:
    mean: float
    std: float  # nan for one seed
    n: int


@dataclass(frozen=True)
class Finding:
    """A variant's trend with depth ("slope") or its mean log10 ratio over layers against pure's
    ("paired"), with its test; the home's `report` words it."""

    stage: str
    variant: str
    test: str  # "slope" or "paired"
    cause: str  # what the prediction rests on (`cause`)
    expect: str  # "falls", or "above" or "not above" pure
    measured: SeedMean  # slope: decades per layer; paired: the variant's mean log10 ratio
    beside: SeedMean  # slope: log10 ratio at the last layer (`depth`); paired: pure's
    depth: int
    statistic: float  # the mean slope, or the mean difference from pure
    n: int
    p: float  # nan below 2 seeds
    # set by Holm over every finding (`_holm`)
    p_holm: float = float("nan")
    direction: int = 0  # the sign of a significant statistic; 0 where not significant or untested
    agrees: Agreement = Agreement.UNTESTED


def _values(logs, key, stat) -> dict[int, float]:
    return {s: stat(v) for s, v in logs.get(key, {}).items()}


def _seed_mean(values: dict[int, float]) -> SeedMean:
    mean, std, _, _, n = interval(list(values.values()))
    return SeedMean(mean=mean, std=std, n=n)


def findings(cfg, logs) -> list[Finding]:
    """(a) every variant without skips falls with depth: two-sided one-sample t-test across
    seeds of the slope of log10 ratio against the layer; (b, c) every variant against pure:
    paired two-sided t-test across seeds of the mean log10 ratio over layers 1..L; both at init
    and (d) after training; Holm over all of them. (e), the bound of seed 003 Thm 2.2, is a check
    (`bound_check`)."""
    out = []
    for stage in STAGES:
        for v in cfg.variants:
            if "skip" in v.split("+"):
                continue
            slopes = _values(logs, (v, stage, "composite"), slope)
            last = _values(logs, (v, stage, "composite"), lambda x: float(x[-1]))
            if not slopes:
                continue
            seeds = sorted(slopes)
            out.append(
                Finding(
                    stage=stage,
                    variant=v,
                    test="slope",
                    cause=cause(v),
                    expect="falls",
                    measured=_seed_mean(slopes),
                    beside=_seed_mean(last),
                    depth=cfg.depth,
                    statistic=float(np.mean(list(slopes.values()))),
                    n=len(seeds),
                    p=_p([slopes[s] for s in seeds], [0.0] * len(seeds)),
                )
            )
        if "pure" not in cfg.variants:
            continue
        pure = _values(logs, ("pure", stage, "composite"), depth_mean)
        for v in cfg.variants:
            other = _values(logs, (v, stage, "composite"), depth_mean)
            seeds = sorted(set(pure) & set(other))
            if v == "pure" or not seeds:
                continue
            why = cause(v)
            out.append(
                Finding(
                    stage=stage,
                    variant=v,
                    test="paired",
                    cause=why,
                    expect="above" if why in ("skip", "mlp") else "not above",
                    measured=_seed_mean({s: other[s] for s in seeds}),
                    beside=_seed_mean({s: pure[s] for s in seeds}),
                    depth=cfg.depth,
                    statistic=float(np.mean([other[s] - pure[s] for s in seeds])),
                    n=len(seeds),
                    p=_p([other[s] for s in seeds], [pure[s] for s in seeds]),
                )
            )
    return _holm(out, cfg.alpha)


def _p(a: list[float], b: list[float]) -> float:
    """Two-sided paired t-test (one-sample when b is zeros); nan below 2 seeds."""
    return paired_p(np.asarray(a), np.asarray(b)) if len(a) >= 2 else float("nan")


def _holm(found: list[Finding], alpha: float) -> list[Finding]:
    finite = [i for i, f in enumerate(found) if not math.isnan(f.p)]
    adjusted = dict(zip(finite, holm([found[i].p for i in finite]), strict=True)) if finite else {}
    out = []
    for i, f in enumerate(found):
        q = float(adjusted.get(i, float("nan")))
        direction, agrees = _outcome(f.expect, f.statistic, q, alpha)
        out.append(replace(f, p_holm=q, direction=direction, agrees=agrees))
    return out


def _outcome(expect: str, statistic: float, p_holm: float, alpha: float):
    if math.isnan(p_holm):
        return 0, Agreement.UNTESTED
    sign = int(np.sign(statistic)) if p_holm < alpha else 0
    if sign == 0:
        return 0, Agreement.CONSISTENT if expect == "not above" else Agreement.NOT_SHOWN
    # "falls" and "not above" both predict a ratio no higher: a significant rise disagrees
    return sign, Agreement.YES if sign == (1 if expect == "above" else -1) else Agreement.NO

"""What the degree sweep's design checks read: each (arm, budget) cell's statistics over its
(teacher, seed) units, and `Check`, what every check returns (`design`, `fit_checks`)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from blocklab.analysis.stats import interval
from blocklab.specs import SECOND_ORDER


@dataclass(frozen=True)
class Check:  # a subclass holds what the check measured; `reports/capacity.py` words it
    name: str
    passed: bool


def loss(r: dict[str, Any]) -> float | None:
    """A finished trial's test loss; None for a diverged one."""
    return r.get("test_loss") if r["status"] == "done" else None


def plateau_rule(rows) -> str:
    """The plateau criterion the rows were read by (`monitor.TrialMonitor.plateau`): "wsd", the
    run of half the steps against the full run, or "cosine", the fall over the last quarter."""
    return "wsd" if rows and all(r.get("schedule") == "wsd" for r in rows) else "cosine"


def plateaued(r: dict[str, Any], tol: float) -> bool:
    value = r.get("plateau_improvement")
    return r["status"] == "done" and value is not None and value < tol


def second_order(rows) -> bool:
    """The rows are second-order fits (`engine.converge`), which carry convergence certificates
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
                **_fit_stats(trials),
            }
    return out


def gmean(values) -> float:
    kept = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return float(np.exp(np.mean(np.log(kept)))) if kept else math.nan

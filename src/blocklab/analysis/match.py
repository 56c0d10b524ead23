"""Seed 002's Match experiment as statistics: per task, N and width, the paired test of tensor
against standard attention with Holm's correction within the task, and the power the design had
for it. The report (`blocklab.reports.sanford_match`) words them."""

import math
from typing import Any

from blocklab.analysis.power import design_power
from blocklab.analysis.stats import holm, interval, paired_p

# the keys the trials differ by besides the seed: accuracy is summarized over the seeds of each
KEYS = ("task", "seq_len", "width", "model")


def tests(cfg, summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`--json`'s `tests`: per task, N and width, the paired t-test of tensor against standard
    attention over the seeds both finished (two-sided), Holm-corrected within the task: Match2
    and Match3 are separate claims, so neither's comparisons dilute the other's."""
    by = {tuple(s[k] for k in KEYS): s for s in summaries}
    out = []
    for task in cfg.tasks:
        family = []
        for n in cfg.seq_len:
            for width in cfg.widths:
                std, ten = by.get((task, n, width, "standard")), by.get((task, n, width, "tensor"))
                if not std or not ten:
                    continue
                seeds = sorted(set(std["values"]) & set(ten["values"]))
                a, b = ([s["values"][k] for k in seeds] for s in (ten, std))
                gaps = [x - y for x, y in zip(a, b, strict=True)]
                family.append(
                    {
                        "task": task,
                        "seq_len": n,
                        "width": width,
                        "p": paired_p(a, b) if len(seeds) >= 2 else math.nan,
                        "mean_standard": std["mean"],
                        "mean_tensor": ten["mean"],
                        "gap_sd": interval(gaps)[1],
                        "n": len(seeds),
                    }
                )
        finite = [t for t in family if not math.isnan(t["p"])]
        for t, p in zip(finite, holm([t["p"] for t in finite]), strict=True):
            t["p_holm"] = float(p)
        out += [t | {"p_holm": t.get("p_holm", math.nan)} for t in family]
    return out


def power_json(cfg, tested: list[dict[str, Any]]) -> dict[str, Any]:
    """`--json`'s `power`: the chance that Match3's paired test at one width finds the planned
    gap at Holm's first step (level alpha / k, two-sided, k the comparisons of the task), with
    the config's seeds; and the same at the gap std this run measured (pooled over widths)."""
    k = max(1, len(cfg.widths) * len(cfg.seq_len))
    level = cfg.alpha / k / 2  # the two-sided test's one tail at Holm's strictest level
    sds = [t["gap_sd"] for t in tested if t["task"] == "match3"]
    power = design_power(
        cfg.planned_effect, cfg.planned_sd, cfg.seeds, level, paired=True, measured_sds=sds
    )
    return power | {"comparisons": k, "task": "match3"}

"""Seed 002's Match experiment as statistics: per task, N and width, the paired test of tensor
against standard attention with Holm's correction within the task, and the power the design had
for it; the summaries, what each block was predicted, constructed and trained to, and the
smallest solving widths. The home's report words them."""

import math
from typing import Any

from blocklab.analysis.plateau import plateaued
from blocklab.analysis.power import design_power
from blocklab.analysis.stats import holm, interval, paired_p
from blocklab.analysis.summary import summarize

# the keys the trials differ by besides the seed: accuracy is summarized over the seeds of each
KEYS = ("task", "seq_len", "width", "model")

BLOCK = {"standard": "softmax_attention", "tensor": "tensor_attention"}

# whether the seed says a block solves a task (at small width for standard attention on Match3)
PREDICTIONS = {
    ("match2", "standard"): True,
    ("match2", "tensor"): True,
    ("match3", "standard"): False,  # at small width: m H = Omega(N / log N) is needed
    ("match3", "tensor"): True,
}


def summaries(cfg, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accuracy over the seeds of each (task, N, width, block), with the share of its trials
    that plateaued (`plateaued`)."""
    out = summarize(rows, KEYS)
    for s in out:
        group = [r for r in rows if all(r[k] == s[k] for k in KEYS)]
        s["plateaued"] = sum(plateaued(r, cfg.plateau_tol) for r in group) / len(group)
    return out


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


def _construction(trials, task: str, seq_len: int, model: str) -> dict[str, Any] | None:
    return next(
        (
            c
            for c in trials.constructions
            if (c["task"], c["seq_len"], c["block"]) == (task, seq_len, BLOCK[model])
        ),
        None,
    )


def findings(cfg, trials, summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task, N, width and block: whether the seed predicts it solves (`predicted`), its
    construction, whether training solved it (mean accuracy >= `solved`) and agrees, and the
    paired test of tensor against standard (Holm-corrected within the task, see `tests`)."""
    by = {tuple(s[k] for k in KEYS): s for s in summaries}
    adjusted = {(t["task"], t["seq_len"], t["width"]): t for t in tests(cfg, summaries)}
    out = []
    for task in cfg.tasks:
        for n in cfg.seq_len:
            for width in cfg.widths:
                std, ten = by.get((task, n, width, "standard")), by.get((task, n, width, "tensor"))
                if not std or not ten:
                    continue
                test = adjusted[(task, n, width)]
                for model, s in (("standard", std), ("tensor", ten)):
                    solved = bool(s["n"]) and s["mean"] >= cfg.solved
                    predicted = PREDICTIONS[(task, model)]
                    built = _construction(trials, task, n, model)
                    choice = trials.lr_choice.get(f"{task}/{n}/{width}/{model}", {})
                    out.append(
                        {
                            "task": task,
                            "seq_len": n,
                            "width": width,
                            "model": model,
                            "predicted": predicted,
                            "constructed": None if built is None else built["accuracy"],
                            "constructed_width": None if built is None else built["width"],
                            "mean": s["mean"],
                            "solved": solved,
                            "agrees": solved == predicted,
                            "lr": choice.get("lr"),
                            "lr_at_edge": choice.get("at_edge"),
                            "plateaued": s["plateaued"],
                            "p_tensor_vs_standard": test["p"],
                            "p_holm": test["p_holm"],
                        }
                    )
    return out


def solving_widths(cfg, findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task, N and block: the smallest trained width whose mean accuracy reaches `solved`
    (None when no width tried does), beside N / log N, the scale of the seed's bound for
    standard attention on Match3."""
    out = []
    for task in cfg.tasks:
        for n in cfg.seq_len:
            for model in ("standard", "tensor"):
                widths = sorted(
                    f["width"]
                    for f in findings
                    if (f["task"], f["seq_len"], f["model"]) == (task, n, model) and f["solved"]
                )
                out.append(
                    {
                        "task": task,
                        "seq_len": n,
                        "model": model,
                        "width": widths[0] if widths else None,
                        "n_over_log_n": n / math.log(n),
                    }
                )
    return out

"""Seed 004's needle experiment as statistics: the share of separating random draws with its
interval, the trained accuracy over seeds, and softmax tested against each other kernel (Fisher's
exact test on the random-weight counts, a paired t-test across seeds on trained accuracy, Holm
over all of them). The home's report words them."""

from __future__ import annotations

import math
from typing import Any

from blocklab.analysis.stats import holm, paired_p
from blocklab.analysis.summary import binomial_interval, summarize

OTHERS = ("linearized", "linear")  # the kernels softmax is tested against, in this order


def random_shares(random_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each random-weight setting with the 95% Clopper-Pearson interval of its share."""
    return [r | binomial_interval(r["successes"], r["draws"]) for r in random_rows]


# the keys the trained trials differ by besides the seed
KEYS = ("seq_len", "tau1", "model")


def summaries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trained test accuracy over seeds per (seq_len, tau1, model)."""
    return summarize(rows, KEYS)


def tests(cfg, random_rows, summaries) -> list[dict[str, Any]]:
    """Softmax against each other kernel: per setting its part ("random weights" or "trained"),
    T, tau1, the kernel, softmax's and its figures (separating draws, or mean accuracy), their
    `difference`, `p` and Holm's `p_holm` over all tests, and `better`: "softmax", the other
    kernel's name, or None where the difference is not significant at `alpha`."""
    by = {(r["model"], r["seq_len"], r["tau1"]): r for r in random_rows}
    trained = {(s["seq_len"], s["model"]): s for s in summaries}
    out = []
    for other in OTHERS:
        out += _random_tests(cfg, by, other) + _trained_tests(cfg, trained, other)
    pvals = [t["p"] for t in out]
    finite = [i for i, p in enumerate(pvals) if not math.isnan(p)]
    adjusted = dict(zip(finite, holm([pvals[i] for i in finite]), strict=True)) if finite else {}
    for i, t in enumerate(out):
        t["p_holm"] = float(adjusted.get(i, float("nan")))
        significant = t["p_holm"] < cfg.alpha
        t["better"] = None if not significant else "softmax" if t["difference"] > 0 else t["model"]
    return out


def _random_tests(cfg, by, other: str) -> list[dict[str, Any]]:
    """Per T and tau1, softmax's separating draws against `other`'s, with Fisher's exact p."""
    from scipy.stats import fisher_exact

    out = []
    for seq_len in cfg.seq_lens:
        for tau1 in cfg.tau1s:
            sm, ot = by[("softmax", seq_len, tau1)], by[(other, seq_len, tau1)]
            table = [
                [sm["successes"], cfg.draws - sm["successes"]],
                [ot["successes"], cfg.draws - ot["successes"]],
            ]
            out.append(
                {
                    "part": "random weights",
                    "seq_len": seq_len,
                    "tau1": tau1,
                    "model": other,
                    "softmax": sm["successes"],
                    "other": ot["successes"],
                    "difference": sm["fraction"] - ot["fraction"],
                    "p": float(fisher_exact(table).pvalue),
                }
            )
    return out


def _trained_tests(cfg, trained, other: str) -> list[dict[str, Any]]:
    """Per trained T, softmax's test accuracy against `other`'s, with the paired p over seeds."""
    out = []
    for seq_len in cfg.trained_seq_lens:
        sm, ot = trained.get((seq_len, "softmax")), trained.get((seq_len, other))
        if not sm or not ot:
            continue
        seeds = sorted(set(sm["values"]) & set(ot["values"]))
        a, b = [sm["values"][k] for k in seeds], [ot["values"][k] for k in seeds]
        out.append(
            {
                "part": "trained",
                "seq_len": seq_len,
                "tau1": sm["tau1"],
                "model": other,
                "softmax": sm["mean"],
                "other": ot["mean"],
                "difference": sm["mean"] - ot["mean"],
                "p": paired_p(a, b) if len(seeds) >= 2 else float("nan"),
            }
        )
    return out

"""What the token suite's two reports share (`suite`, `width_sweep`): the published findings the run
can test, each marked from the measured numbers by its stated test, and the note on where the
training time went."""

from __future__ import annotations

from typing import Any

import numpy as np

from blocklab.experiments.mad.analysis import suite
from blocklab.formatting import number

MAD = "Poli et al. 2024 (mad-lab)"
ZOOLOGY = "Arora et al. 2023 (zoology)"
ATTENTION, LINEAR = "softmax_attention", "linear_attention"
GATED_CLAIM = (
    "gated convolutions (H3, Hyena) need a width growing with the key-value pairs to solve MQAR, "
    "attention does not"
)


def _block(trials, name: str) -> str | None:
    """The first block of the run that is the registered block `name` (any options)."""
    return next((b for b in trials.degrees if b.split("(")[0] == name), None)


def _accuracies(trials, block: str, task: str, level: int) -> list[float]:
    return suite.cells(trials.rows).get((block, task, level), [])


def _levels(trials, task: str) -> list[int]:
    return sorted({r["level"] for r in trials.rows if r["task"] == task})


def published(cfg, trials) -> list[dict[str, Any]]:
    """The papers' qualitative findings, each marked from the measured numbers: "agrees",
    "disagrees" or "not tested here" (a block, task or ladder the run did not include)."""
    out = []
    att, lin = _block(trials, ATTENTION), _block(trials, LINEAR)

    claim = "attention solves in-context recall at every difficulty level"
    levels = _levels(trials, "icr")
    if att is None or not levels:
        out.append(_untested(claim, MAD, "softmax attention or icr not run"))
    else:
        means = [float(np.mean(_accuracies(trials, att, "icr", lv) or [np.nan])) for lv in levels]
        ok = all(m >= cfg.solved for m in means)
        evidence = ", ".join(f"level {lv}: {m:.3f}" for lv, m in zip(levels, means, strict=True))
        out.append(_claim(claim, MAD, ok, f"{att} icr accuracy {evidence} (solved: >= "
                                          f"{cfg.solved:g})"))  # fmt: skip

    levels = _levels(trials, "mqar")
    claim = "linear attention degrades on MQAR as key-value pairs grow at fixed width"
    if lin is None or len(levels) < 2:
        out.append(_untested(claim, ZOOLOGY, "linear attention or two MQAR levels not run"))
    else:
        easy, hard = (_accuracies(trials, lin, "mqar", lv) for lv in (levels[0], levels[-1]))
        p = suite.one_sided_lower(hard, easy)
        evidence = (
            f"{lin} MQAR accuracy {_mean(easy)} at level {levels[0]} vs {_mean(hard)} at level "
            f"{levels[-1]}, one-sided Welch p = {number(p, 3)}"
        )
        out.append(_tested(claim, ZOOLOGY, p, cfg.alpha, evidence))

    claim = "attention beats linear attention on MQAR at equal size"
    if att is None or lin is None or not levels:
        out.append(_untested(claim, ZOOLOGY, "softmax or linear attention, or MQAR, not run"))
    else:
        hard = levels[-1]
        a, b = _accuracies(trials, att, "mqar", hard), _accuracies(trials, lin, "mqar", hard)
        p = suite.one_sided_lower(b, a)
        evidence = (
            f"hardest level {hard}: {att} {_mean(a)} vs {lin} {_mean(b)}, one-sided Welch "
            f"p = {number(p, 3)}"
        )
        out.append(_tested(claim, ZOOLOGY, p, cfg.alpha, evidence))

    out.append(_untested(GATED_CLAIM, ZOOLOGY, "the width sweep did not run (--sweep-width)"))
    out.append(
        _untested(
            "the MAD score predicts which architectures reach lower compute-optimal perplexity",
            MAD,
            "the suite trains no language models at scale",
        )
    )
    return out


def _mean(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}"


def _claim(claim: str, source: str, agrees: bool, evidence: str) -> dict[str, Any]:
    status = "agrees" if agrees else "disagrees"
    return {"claim": claim, "source": source, "status": status, "evidence": evidence}


def _tested(claim: str, source: str, p: float | None, alpha: float, evidence: str):
    """A claim read from a one-sided test: "agrees" at p < alpha, else "disagrees"; a test that
    could not run (p None: fewer than 2 seeds on a side) tests nothing, and says so."""
    if p is None:
        return _untested(claim, source, f"the test needs 2 seeds or more on each side: {evidence}")
    return _claim(claim, source, p < alpha, evidence)


def _untested(claim: str, source: str, why: str) -> dict[str, Any]:
    return {"claim": claim, "source": source, "status": "not tested here", "evidence": why}


def time_note(t: dict[str, Any], by: str = "task") -> str:
    """Where the training time went, largest shares first (`suite.trial_time`)."""

    def shares(d: dict[str, float]) -> str:
        return ", ".join(f"{k} {v:.0f} s ({v / t['total']:.0%})" for k, v in d.items())

    if not t["total"]:
        return "Trial time: not recorded."
    return (
        f"Trial time (the trainings' own seconds, summed over processes): {t['total']:.0f} s in "
        f"{t['trainings']} trainings, {t['search']:.0f} s of it the rate search's other rates. "
        f"By block: {shares(t['by_block'])}. By {by}: {shares(t[f'by_{by}'])}."
    )

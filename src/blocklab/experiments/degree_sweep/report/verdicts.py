"""The words of the paired tests' verdicts (`analysis.arms.Verdict`): the claim per task and
budget, the same with its test in brackets, and a verdict as `--json` gives it."""

from __future__ import annotations

import dataclasses
from typing import Any

from blocklab.experiments.degree_sweep.analysis.arms import Outcome, Verdict


def _p(p: float) -> str:
    return f"p={p:.2g}"


def _listed(v: Verdict, arms: tuple[str, ...], sep: str = ", ") -> str:
    """'A (p=0.01), B (p=0.2)': the named arms in comparison order with their Holm p."""
    return sep.join(f"{c.arm} ({_p(c.p_holm)})" for c in v.comparisons if c.arm in arms)


def _claim(v: Verdict, head: str) -> str:
    best_at = f"{v.metric} {v.best_mean:.4g}"
    # an arm with a single finished seed cannot be best; say so rather than hide it
    of = " of the arms with 2+ finished seeds" if v.n_candidates < v.n_finished else ""
    if v.outcome is Outcome.ALONE:
        return f"{head}: only one arm ({v.best}, {best_at}); nothing to compare"
    if v.outcome is Outcome.UNTESTED:
        return f"{head}: {v.best} has the best mean{of} ({best_at}); no arm can be tested"
    if v.outcome is Outcome.BEATS:
        text = f"{head}: {v.best} is best{of} ({best_at}); it beats {_listed(v, v.beats)}"
        if v.unresolved:
            text += f"; not significantly better than {_listed(v, v.unresolved)}"
        return text
    if v.outcome is Outcome.BEATS_NONE:
        return f"{head}: {v.best} has the best mean{of} ({best_at}) and beats no arm"
    vs = "".join(f"; {c.arm} {_p(c.p_holm)}" for c in v.comparisons if c.arm in v.unresolved)
    return f"{head}: no significant difference between arms (best mean: {v.best}, {best_at}{vs})"


def claim(v: Verdict) -> str:
    """The verdict sentence: which arm is best and what it beats, or why nothing is claimed."""
    head = f"{v.task}, budget {v.budget}"
    notes = f"; {', '.join(v.diverged_all)} diverged in all seeds" if v.diverged_all else ""
    if v.outcome is Outcome.REFUSED:
        return f"{head}: no arm finished 2 seeds, nothing to compare{notes}"
    text = _claim(v, head)
    for c in v.comparisons:
        if c.arm in v.beaten_by:
            text += f"; but {c.arm} is better on the {c.n_pairs} seeds both finished"
            text += f" ({_p(c.p_holm)})"
    if v.untestable:
        text += f"; {', '.join(v.untestable)} untestable (fewer than 2 seeds paired with {v.best})"
    return text + notes


def text(v: Verdict) -> str:
    """The claim with its test and level in brackets."""
    pairs_of = "seeds" if v.n_teachers == 1 else "(teacher, seed)s"
    bracket = f"[paired t-test across {v.n_seeds} {pairs_of}, Holm-corrected, alpha={v.alpha:g}]"
    return f"{claim(v)}  {bracket}"


def verdict_json(v: Verdict) -> dict[str, Any]:
    """A verdict under the keys `--json` gives it, the sentences included."""
    return {
        "task": v.task,
        "budget": v.budget,
        "metric": v.metric,
        "higher_is_better": v.higher_is_better,
        "best": v.best,
        "best_mean": v.best_mean,
        "comparisons": [dataclasses.asdict(c) for c in v.comparisons],
        "beats": v.beats,
        "diverged_all": v.diverged_all,
        "untestable": v.untestable,
        "n_seeds": v.n_seeds,
        "alpha": v.alpha,
        "claim": claim(v),
        "text": text(v),
        "test": v.test,
    }

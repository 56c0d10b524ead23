"""The paired tests' verdict as data (`degree_sweep.analysis.arms.Verdict`) and in words
(`degree_sweep/report/verdicts.py`): a clear win, no significant difference, and a refused
verdict."""

import json
import math
from pathlib import Path

import pytest

from blocklab.experiments.degree_sweep.analysis.arms import Outcome, compare
from blocklab.experiments.degree_sweep.report.verdicts import claim, text, verdict_json

DEGREE = {"A": 2.0, "B": 3.0}
BRACKET = "  [paired t-test across {} seeds, Holm-corrected, alpha=0.05]"


def rows(values, diverged=()):
    """One row per (arm, seed) from {arm: [test metric per seed]}; `diverged` arms' seeds 0, 1
    diverge."""
    out = [
        {"task": "teacher", "budget": 1000, "arm": arm, "degree": DEGREE[arm], "seed": seed}
        | {"status": "done", "metric": "mse", "higher_is_better": False, "test_metric": v}
        for arm, vs in values.items()
        for seed, v in enumerate(vs)
    ]
    out += [
        {"task": "teacher", "budget": 1000, "arm": arm, "degree": DEGREE[arm], "seed": seed}
        | {"status": "diverged", "metric": "mse", "higher_is_better": False, "test_metric": None}
        for arm in diverged
        for seed in (0, 1)
    ]
    return out


def test_a_clear_win_names_the_winner_the_loser_and_the_test():
    [v] = compare(rows({"A": [1.0, 1.2, 0.9, 1.1], "B": [1.5, 1.62, 1.41, 1.55]}))
    assert v.outcome is Outcome.BEATS
    assert (v.best, v.beats, v.unresolved, v.beaten_by) == ("A", ("B",), (), ())
    assert (v.untestable, v.diverged_all) == ((), ())
    assert v.best_mean == pytest.approx(1.05) and (v.metric, v.higher_is_better) == ("mse", False)
    assert (v.n_seeds, v.n_teachers, v.n_candidates, v.n_finished, v.alpha) == (4, 1, 2, 2, 0.05)
    assert "ttest_rel" in v.test
    [b] = v.comparisons
    assert (b.arm, b.n_pairs, b.significant) == ("B", 4, True)
    assert b.p_holm == b.p_raw < 0.05 and b.mean_diff == pytest.approx(-0.47)

    said = f"teacher, budget 1000: A is best (mse 1.05); it beats B (p={b.p_holm:.2g})"
    assert claim(v) == said
    assert text(v) == said + BRACKET.format(4)


def test_no_significant_difference_names_the_best_mean_and_the_p_values():
    [v] = compare(rows({"A": [1.0, 1.2, 0.8], "B": [1.15, 0.95, 1.05]}))
    assert v.outcome is Outcome.NO_DIFFERENCE
    assert (v.best, v.beats, v.unresolved, v.beaten_by) == ("A", (), ("B",), ())
    [b] = v.comparisons
    assert not b.significant and b.p_holm > 0.05

    assert claim(v) == (
        "teacher, budget 1000: no significant difference between arms "
        f"(best mean: A, mse 1; B p={b.p_holm:.2g})"
    )
    assert text(v).endswith(BRACKET.format(3))


def test_a_refused_verdict_says_why_and_names_what_diverged():
    [v] = compare(rows({"A": [1.0]}, diverged=("B",)))
    assert v.outcome is Outcome.REFUSED
    assert v.best is None and math.isnan(v.best_mean) and v.comparisons == ()
    assert (v.untestable, v.diverged_all, v.n_candidates, v.n_finished) == (("A",), ("B",), 0, 1)

    said = (
        "teacher, budget 1000: no arm finished 2 seeds, nothing to compare; B diverged in all seeds"
    )
    assert claim(v) == said
    assert text(v) == said + BRACKET.format(2)


def test_the_json_keeps_the_contract_keys_and_carries_the_words():
    contract = json.loads((Path(__file__).resolve().parents[2] / "cli_contract.json").read_text())
    keys = contract["json"]["degree-sweep"]["verdicts"]
    for values in ({"A": [1.0, 1.1, 0.9], "B": [2.0, 2.1, 1.9]}, {"A": [1.0]}):
        [v] = compare(rows(values))
        payload = verdict_json(v)
        assert sorted(payload) == keys
        assert (payload["claim"], payload["text"]) == (claim(v), text(v))

"""Seed 000's predictions worded by their intervals (`degree_sweep.analysis.claims`), on planted
decisions whose word is known: each word, each reason a run cannot speak, and the roundings'
rule."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from blocklab.experiments.degree_sweep.analysis import capacity
from blocklab.experiments.degree_sweep.analysis.capacity import Counted, Decision, Outcome
from blocklab.experiments.degree_sweep.analysis.cells import Check
from blocklab.experiments.degree_sweep.analysis.claims import claims
from blocklab.experiments.degree_sweep.analysis.multiplier import Interval

P2 = 1.057  # the nominal count's predictions, rounded: h(3) / h(2) = h(3) / h(4)
DEGREES = {"d=2": 2.0, "d=3": 3.0, "d=4": 4.0}


def _result(m2, m4=(1.0, 0.9, 1.1), ratio=None, differs=(), stable=True, outcome=None, **kw):
    """A capacity result on the nominal count whose d=2 and d=4 multipliers (value, low, high)
    and m2/m4 are the planted ones; `kw` (failed, edges, no_model) silences the run."""
    predicted = {"d=2": P2, "d=3": 1.0, "d=4": P2}
    findings = []
    for arm, m in (("d=2", m2), ("d=4", m4)):
        if arm not in differs:
            findings.append(capacity._finding(arm, Interval(*m), predicted[arm]))
    if ratio is not None:
        findings.append(capacity._finding("m2/m4", Interval(*ratio), 1.0))
    d = Decision(
        outcome or Outcome.VERDICT, "d=3", findings=tuple(findings), differs=tuple(differs), **kw
    )
    model = SimpleNamespace(shape=SimpleNamespace(stable=stable))
    counted = Counted("nominal", None if kw.get("no_model") else model, d, predicted)
    return SimpleNamespace(counts={"nominal": counted}, degrees=DEGREES)


def _words(result, r=0.1, others=()):
    return {c.quantity: c.word for c in claims(result, r, others)}


def test_each_word_from_its_interval():
    got = _words(_result(m2=(0.85, 0.79, 0.92), m4=(1.05, 0.99, 1.12), ratio=(1.0, 0.97, 1.03)))
    # d=2's interval excludes 1.057; d=4's holds it within +-10%; m2/m4 holds 1 within +-10%
    assert got == {"m(d=2)": "refuted", "m(d=4)": "supported", "m2/m4": "supported"}
    # holding the prediction but wider than +-R decides nothing
    wide = _words(_result(m2=(1.0, 0.8, 1.3)))
    assert wide["m(d=2)"] == "undecided"
    # the same interval is supported at a coarser R
    assert _words(_result(m2=(1.0, 0.8, 1.3)), r=0.35)["m(d=2)"] == "supported"


def test_figures_are_kept_whatever_the_word():
    (c, *_) = claims(_result(m2=(0.85, 0.79, 0.92)), 0.1)
    assert (c.m, c.ci_low, c.ci_high, c.predicted) == (0.85, 0.79, 0.92, P2)
    assert c.json()["word"] == "refuted" and set(c.json()) >= {"quantity", "count", "word"}


@pytest.mark.parametrize(
    "silence, why",
    [
        ({"failed": (Check("converged", False),)}, "design check failed: converged"),
        ({"edges": (Check("generalization", False, edge=True),)}, "at its edge: generalization"),
        ({"no_model": True}, "not fitted"),
    ],
)
def test_a_run_that_cannot_speak_words_nothing(silence, why):
    # the planted interval would refute: a failed or edge check or no model leaves it undecided
    got = claims(_result(m2=(0.85, 0.79, 0.92), **silence), 0.1)
    assert {c.word for c in got} == {"undecided"}
    assert all(why in c.why for c in got)
    assert got[0].m == 0.85  # the figure stays, for the reader


def test_an_arm_with_an_exponent_of_its_own_has_no_constant_multiplier():
    got = _words(_result(m2=(0.85, 0.79, 0.92), differs=("d=4",)))
    assert got == {"m(d=2)": "refuted", "m(d=4)": "no constant multiplier",
                   "m2/m4": "no constant multiplier"}  # fmt: skip
    # named, but not with every unit left out: nothing is claimed of it
    unstable = _words(_result(m2=(0.85, 0.79, 0.92), differs=("d=4",), stable=False))
    assert unstable["m(d=4)"] == "undecided" and unstable["m2/m4"] == "undecided"


def test_a_word_another_rounding_gives_otherwise_is_undecided():
    run = _result(m2=(0.85, 0.79, 0.92))
    same = _result(m2=(0.86, 0.80, 0.93))
    other = _result(m2=(0.95, 0.85, 1.07))  # holds the prediction: not refuted there
    assert _words(run, others=(same,))["m(d=2)"] == "refuted"
    got = claims(run, 0.1, (same, other))[0]
    assert got.word == "undecided" and "roundings differ" in got.why


def test_an_arm_that_did_not_run_is_not_worded():
    result = _result(m2=(0.85, 0.79, 0.92))
    result.degrees = {"d=2": 2.0, "d=3": 3.0}
    assert [c.quantity for c in claims(result, 0.1)] == ["m(d=2)"]

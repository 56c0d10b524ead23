"""The matched answer's status (`matched`, `matched_checks`): its findings in the shape the
scaling model's take (`MatchedFinding`), its decision (`decide_matched`), the run's answer with
the checks it rests on (`answer_run`), and the counts the claims are worded on, computed from
the answer alone (`answer_counts`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from blocklab.experiments.degree_sweep.analysis import (
    hypotheses,
    matched,
    matched_checks,
    multiplier,
)
from blocklab.experiments.degree_sweep.analysis.cells import EDGE, FAILED, Check
from blocklab.experiments.degree_sweep.analysis.decision import (
    Counted,
    Decision,
    Finding,
    Outcome,
    _finding,
)
from blocklab.theory import predicted_multiplier


@dataclass(frozen=True)
class MatchedFinding(Finding):
    """A finding of the matched answer (`matched`): decided where its comparison's word is
    (beats, loses to, equivalent), whatever the resolution a scaling fit would ask."""

    word: str = "undecided"

    @property
    def decided(self) -> bool:
        return self.word != "undecided"


# the matched answer's findings by the names the scaling model's carry
FINDING_OF = {"m(d=2)": "d=2", "m(d=4)": "d=4", "m2/m4": "m2/m4"}
# what a run is sized by (`Decision.widest`, the power calculation's half width): the widest of
# m_2 / m_4, which the status decides on, and m(d=2), the multiplier the note's h(d) and H_fd
# part on most (1.057 against 0.933), so a run sized to +-R reads both to +-R
SIZED_BY = ("m2/m4", "d=2")


def matched_findings(
    est: matched.Matched, predicted: dict[str, float | None], scale: dict[str, float] | None = None
) -> tuple[MatchedFinding, ...]:
    """The answer's estimates as findings against the theory's `predicted` multipliers (arm ->
    m; "m2/m4" from d=2's and d=4's); `scale`: quantity -> the factor that moves them to another
    count (the functional count: m s_a / s_3)."""
    out = []
    for q in matched.QUANTITIES:
        e = est.get(q)
        if e is None:
            continue
        k = (scale or {}).get(q, 1.0)
        interval = multiplier.Interval(e.m * k, e.low * k, e.high * k)
        name = FINDING_OF[q]
        p2, p4 = predicted.get("d=2"), predicted.get("d=4")
        p = (p2 / p4 if p2 and p4 else 1.0) if name == "m2/m4" else predicted.get(name)
        f = _finding(name, interval, p)
        word = hypotheses.interval_word(interval.low, interval.high)
        out.append(MatchedFinding(**f.__dict__, word=word))
    return tuple(out)


def decide_matched(
    checks: list[Check],
    est: matched.Matched,
    predicted: dict[str, float | None],
    scale: dict[str, float] | None = None,
) -> Decision:
    """The matched answer's status (`matched_checks`): NO VERDICT where a check failed,
    INCONCLUSIVE where one is at its edge or m_2 / m_4 is undecided, else VERDICT."""
    failed = tuple(c for c in checks if c.outcome == FAILED)
    edges = tuple(c for c in checks if c.outcome == EDGE)
    findings = matched_findings(est, predicted, scale)
    names = [f.name for f in findings]
    decisive = tuple(n for n in ("m2/m4",) if n in names) or tuple(names)
    units = max((e.units for e in est.estimates.values()), default=0)
    sized = tuple(n for n in SIZED_BY if n in names) or decisive
    widest = max((f.interval.half_width_log() for f in findings if f.name in sized),
                 default=math.nan)  # fmt: skip
    common = dict(
        reference=matched.REFERENCE, findings=findings, decisive=decisive, units=units,
        level=matched.LEVEL, widest=widest,
        df=min((e.df for e in est.estimates.values()), default=math.inf),
    )  # fmt: skip
    if not findings:
        return Decision(Outcome.NO_VERDICT, failed=failed, edges=edges, no_model=True, **common)
    if failed:
        return Decision(Outcome.NO_VERDICT, failed=failed, edges=edges, **common)
    if edges:
        return Decision(Outcome.INCONCLUSIVE, edges=edges, **common)
    decided = all(f.decided for f in findings if f.name in decisive)
    return Decision(Outcome.VERDICT if decided else Outcome.INCONCLUSIVE, **common)


@dataclass(frozen=True)
class MatchedResult:
    """The matched answer (`matched`), the checks it rests on (`matched_checks`) and its
    status; the scaling model stays beside it as a secondary view."""

    estimates: matched.Matched
    answer: matched.Answer
    checks: tuple[Check, ...]
    decision: Decision
    shares: dict[str, float]  # arm -> s_a, the share of its count the function sees
    teachers_needed: int | None = None  # the teachers that would decide m_2 / m_4


def answer_run(rows, n_boot, level, width, checks, failed_trials=0):
    """The matched answer of `rows` with the checks it rests on: the input rank measured before
    the fits (from the scaling view's `checks`), robustness, generalization, the negative
    control, and the checks the design holds (`matched_checks`)."""
    est = matched.matched(rows, n_boot, level=level)
    rank = [c for c in checks if c.name == "input_rank"]
    rests = [
        *rank,
        matched_checks.robustness(rows, est, n_boot, level),
        matched_checks.generalization(rows, level),
        matched_checks.control_check(est.control),
        *matched_checks.by_design(rows, width, failed_trials),
    ]
    shares = hypotheses.shares(rows, width)
    predicted = hypotheses.predictions(shares)
    degrees = {a: float(a[2:]) for a in matched.COMPARED}
    d = decide_matched(rests, est, {a: predicted_multiplier(a, v) for a, v in degrees.items()})
    silenced = d.outcome is not Outcome.VERDICT and bool(d.failed or d.edges)
    worded = hypotheses.answer(est, predicted, silenced)
    need = matched_checks.teachers_to_decide(est.get("m2/m4"), max(
        (e.teachers for e in est.estimates.values()), default=0))  # fmt: skip
    return MatchedResult(est, worded, tuple(rests), d, shares, need)


def answer_counts(answered: MatchedResult, counts: dict[str, Counted], degrees) -> dict:
    """The counts the claims are worded on, computed from the answer alone: the nominal one,
    and the functional one, where every multiplier moves by s_a / s_3 (P_f = s_a P in every
    cell of an arm), each against h(d)'s prediction. The scaling model of each count stays."""
    s = answered.shares
    out = {}
    for c in ("nominal", "functional"):
        scale = None
        if c == "functional":
            if not all(a in s for a in matched.COMPARED):
                continue
            scale = {"m(d=2)": s["d=2"] / s["d=3"], "m(d=4)": s["d=4"] / s["d=3"],
                     "m2/m4": s["d=2"] / s["d=4"]}  # fmt: skip
        predicted = counts[c].predicted if c in counts else {
            a: predicted_multiplier(a, v) for a, v in degrees.items()}  # fmt: skip
        got = decide_matched(list(answered.checks), answered.estimates, predicted, scale)
        model = counts[c].model if c in counts else None
        out[c] = Counted(c, model, got, predicted)
    return out

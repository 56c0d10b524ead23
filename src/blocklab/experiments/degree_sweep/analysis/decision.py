"""A degree sweep's status and what it rests on: the outcome word (`Outcome`), each multiplier
beside its prediction (`Finding`), the status with its findings and checks (`Decision`), and the
status on one parameter count (`Counted`). `capacity` decides it for the scaling model,
`answered` for the matched answer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from blocklab.experiments.degree_sweep.analysis import design, fit_checks, multiplier
from blocklab.experiments.degree_sweep.analysis.cells import Check

REFERENCE = fit_checks.REFERENCE
# what the theory says separates d = 3 from d = 2 and 4: the resolution a verdict must reach
PREDICTED_EFFECT = fit_checks.RESOLUTION


class Outcome(Enum):  # what the status line says
    VERDICT = "VERDICT"  # every check passed and the intervals decide the question
    # no check failed; a check or the shape test is at its edge, or an interval is too wide
    INCONCLUSIVE = "INCONCLUSIVE"
    NO_VERDICT = "NO VERDICT"  # a design check failed, or the shared model could not be fitted


@dataclass(frozen=True)
class Finding:  # one multiplier (or m_2 / m_4) beside its prediction
    name: str  # an arm, or "m2/m4"
    interval: multiplier.Interval
    predicted: float | None  # h(3)/h(d); 1 for m_2 / m_4; None for a non-polynomial arm
    excludes_one: bool
    excludes_prediction: bool | None
    # the half width reached, as a share (exp(half width in log) - 1); inf when unbounded
    resolution: float

    @property
    def decided(self) -> bool:
        """The interval tells the prediction from no effect: it excludes 1 or the prediction,
        or, where the prediction is 1 itself, it is narrower than the predicted effect."""
        if self.excludes_one or self.excludes_prediction:
            return True
        if self.predicted is not None and math.isclose(self.predicted, 1.0):
            return self.resolution <= PREDICTED_EFFECT
        return False


@dataclass(frozen=True)
class Decision:  # the status of a run: what its checks and intervals support
    outcome: Outcome
    reference: str
    failed: tuple[Check, ...] = ()  # NO_VERDICT: the failed checks
    # INCONCLUSIVE: the checks whose figure's band straddles its threshold (`cells.EDGE`), and
    # whether the shape test names other arms with some unit left out (`ShapeTest.stable`)
    edges: tuple[Check, ...] = ()
    shape_edge: bool = False
    no_model: bool = False  # NO_VERDICT: the shared model could not be fitted
    shape_rejected: bool = False  # d=2's or d=4's exponent differs: no constant multiplier
    differs: tuple[str, ...] = ()  # every arm whose exponent differs (`ShapeTest.differs`)
    findings: tuple[Finding, ...] = ()  # every multiplier but the reference's, then m_2 / m_4
    decisive: tuple[str, ...] = ()  # the findings the status rests on
    units: int = 0  # (teacher, seed) units of the run
    units_for_3pct: int | None = None  # what +-3% on the widest decisive interval needs
    level: float = math.nan
    # the widest decisive interval's half width in log units (inf: unbounded; NaN: none), and
    # the degrees of freedom of the t the intervals read (`MultiplierFit.df`): what a run of
    # another resolution is sized by (`sample_size.units_for`)
    widest: float = math.nan
    df: float = math.inf
    # NO_VERDICT, INCONCLUSIVE: the command to run next (`design.next_run`); None: the run's
    # config is not known, or no setting of it is left to change
    next: design.NextRun | None = None

    def finding(self, name: str) -> Finding | None:
        return next((f for f in self.findings if f.name == name), None)

    @property
    def undecided(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.name in self.decisive and not f.decided)


def _finding(name: str, interval: multiplier.Interval, predicted: float | None) -> Finding:
    lo, hi = interval.low, interval.high
    bounded = interval.bounded
    excludes_pred = None
    if predicted is not None and bounded:
        excludes_pred = not lo <= predicted <= hi
    hw = interval.half_width_log()
    return Finding(
        name=name,
        interval=interval,
        predicted=predicted,
        excludes_one=bounded and not lo <= 1.0 <= hi,
        excludes_prediction=excludes_pred,
        resolution=math.expm1(hw) if math.isfinite(hw) else math.inf,
    )


# seed 000's question among integers: d = 3 against 2 and 4, and m_2 / m_4
@dataclass(frozen=True)
class Counted:  # the shared model fitted on one parameter count (COUNTS), and its status
    count: str
    model: multiplier.MultiplierFit | None
    decision: Decision
    predicted: dict[str, float | None]  # arm -> the theory's multiplier on this count

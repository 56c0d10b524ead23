"""A fit's convergence certificate (`converged`): run a fit, continue it as far again, and say
whether that still lowered the loss by more than a tolerance; given a limit, keep doubling a fit
that has not converged, so an easy fit stops early and a hard one gets the limit. A fit at
float64's floor (`fit.FLOOR`) ends there certified. `fit_batched.converged_batched` certifies
the members of a batched fit by the same rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from blocklab.engine.fit import LBFGS, LevenbergMarquardt, OnStep

STATIONARY = 1e-6  # a fit's relative gradient (`stationarity`) below which it sits at a minimum


def moved(first: float, second: float) -> bool:
    """Whether a stretch of iterations lowered the loss at all. One that did not and whose
    gradient is not ~0 (`stationarity`) is a stall (every step rejected, or a line search that
    found nothing), not convergence: measured, LM from a network's initialization can reject its
    first few steps while its damping grows. Levenberg-Marquardt ends a stall of its own: its
    damping grows until the step's predicted decrease is below `FLOOR`, which a smooth loss
    with an exact gradient would have accepted long before (its gain ratio tends to 1 as the
    step shrinks), so what remains is a minimum float64 resolves, or a kink of a relu network."""
    return second < first


@dataclass(frozen=True)
class Certificate:
    passed: bool  # the last doubling lowered the loss by less than the tolerance
    gain: float  # (first - second) / second: what the last doubling gained, a share
    first: float  # the loss before the last doubling
    second: float  # the loss after it, where the fit ended
    iterations: int  # the iterations run in all


def first_check(steps: int, least: int = 64) -> int:
    """Where a fit of at most `steps` iterations reads its first certificate: `steps` halved
    while the half stays a whole number of at least `least` iterations, so every later check
    is an exact doubling that ends, at the latest, at `steps` (1,024 gives 64, 128, ..., 512;
    1,000 gives 125, 250, 500; 64 gives 32)."""
    first = max(1, steps // 2)
    while first % 2 == 0 and first // 2 >= least:
        first //= 2
    return first


def converged(
    fitter: LevenbergMarquardt | LBFGS,
    iterations: int,
    more: int | None = None,
    tol: float = 0.03,
    on_step: OnStep = lambda i, loss: True,
    until: int | None = None,
) -> Certificate:
    """Run `fitter` for `iterations`, then continue the same fit for `more` (as many again by
    default): converged when that lowered the loss by less than `tol` of the final loss. With
    `until`, a fit that has not converged doubles its iterations again, and is certified again,
    for as long as the doubled count stays within `until`: a fit stops at the first doubling
    that gains less than `tol`. A fit stopped by `on_step` (its iterations numbered across every
    stretch) or gone non-finite is not converged; the model ends where the fit ended."""
    more = iterations if more is None else more
    stopped, done = False, 0

    def numbered(i: int, loss: float) -> bool:
        nonlocal stopped
        stopped = stopped or not on_step(done + i, loss)
        return not stopped

    first = fitter.run(iterations, numbered)
    done = iterations
    while True:
        ended = stopped or fitter.floored
        second = first if ended else fitter.run(more, numbered)
        done += 0 if ended else more
        gain = (first - second) / second if second > 0 else 0.0
        # a fit at float64's floor (`FLOOR`) has nothing left to gain, whatever it gained last
        still = moved(first, second) or fitter.stationarity() <= STATIONARY
        ok = not stopped and math.isfinite(second) and (fitter.floored or still and gain < tol)
        last = fitter.floored or until is None or 2 * done > until
        if ok or stopped or not math.isfinite(second) or last:
            return Certificate(bool(ok), gain, first, second, fitter.iterations)
        first, more = second, done

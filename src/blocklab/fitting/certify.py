"""A fit's convergence certificate (`converged`): run a fit, continue it as far again, and say
whether that still lowered the loss by more than a tolerance; given a limit, keep doubling a fit
that has not converged, so an easy fit stops early and a hard one gets the limit. A fit at
float64's floor (`floored`: Levenberg-Marquardt's step below `fit.FLOOR`, L-BFGS's loss unchanged
at its rounding for `fit.STALLED_ITERATIONS`) ends there certified.
`batched.converged_batched` certifies the members of a batched fit by the same rules. An optional
`on_check` reads a fit at each of its checks (`converge` records the one at half the iterations).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from blocklab.fitting.fit import LBFGS, LevenbergMarquardt, OnStep

STATIONARY = 1e-6  # a fit's relative gradient (`stationarity`) below which it sits at a minimum
# called at each check with the iterations scheduled so far and the fit's training MSE there; it
# may read the model (after syncing it) but must leave the fit as it found it
OnCheck = Callable[[int, float], None]


def moved(first: float, second: float) -> bool:
    """Whether a stretch of iterations lowered the loss at all. One that did not and whose
    gradient is not ~0 (`stationarity`) is a stall (every step rejected, or a line search that
    found nothing), not convergence: measured, LM from a network's initialization can reject its
    first few steps while its damping grows. Levenberg-Marquardt ends a stall of its own: its
    damping grows until the step's predicted decrease is below `FLOOR`, which a smooth loss
    with an exact gradient would have accepted long before (its gain ratio tends to 1 as the
    step shrinks), so what remains is a minimum float64 resolves, or a kink of a relu network.
    L-BFGS ends one too: a line search that finds no lower point leaves the fit where it was, the
    loss repeats, and `fit.STALLED_ITERATIONS` such iterations floor it."""
    return second < first


@dataclass(frozen=True)
class Certificate:
    passed: bool  # the last doubling lowered the loss by less than the tolerance
    gain: float  # (first - second) / second: what the last doubling gained, a share
    first: float  # the loss before the last doubling
    second: float  # the loss after it, where the fit ended
    iterations: int  # the iterations run in all
    # where the schedule stood when it was decided, so a larger budget can continue it
    # (`fitting.continuation`): the iterations scheduled so far (`iterations` counts those run,
    # fewer where the fit floored), whether the fit was at its floor, stopped by `on_step`, and
    # whether its last stretch moved it or sat at a stationary point
    done: int = 0
    floored: bool = False
    stopped: bool = False
    still: bool = False


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
    resume: Certificate | None = None,
    on_check: OnCheck | None = None,
) -> Certificate:
    """Run `fitter` for `iterations`, then continue the same fit for `more` (as many again by
    default): converged when that lowered the loss by less than `tol` of the final loss. With
    `until`, a fit that has not converged doubles its iterations again, and is certified again,
    for as long as the doubled count stays within `until`: a fit stops at the first doubling
    that gains less than `tol`. A fit stopped by `on_step` (its iterations numbered across every
    stretch) or gone non-finite is not converged; one at float64's floor is, whatever it gained
    last; the model ends where the fit ended. `certify` does this for every member of a batch.
    `resume`, the certificate a smaller `until` ended this fit with (its fitter restored to where
    it stood), continues the doubling from there as a fit of this `until` would have.
    `on_check(done, loss)` is called after each stretch (`certify`)."""
    checks = None if on_check is None else [on_check]
    [cert] = certify(_One(fitter), iterations, more, tol, [on_step], until, resume, checks)
    return cert


class _One:
    """A lone fitter as a batch of one, for `certify`."""

    def __init__(self, fitter: LevenbergMarquardt | LBFGS):
        self.fitter = fitter

    def run(self, iterations: int, on_step) -> list[float]:
        return [self.fitter.run(iterations, lambda i, loss: on_step(i, [loss])[0])]

    def live(self) -> list[bool]:
        return [not self.fitter.floored]  # a lone fit stops calling on_step at its floor

    def state(self) -> tuple[list[bool], list[float], list[int]]:
        f = self.fitter
        return [f.floored], [f.stationarity()], [f.iterations]


def certify(
    fitter,
    iterations: int,
    more: int | None,
    tol: float,
    on_steps: Sequence[OnStep],
    until: int | None = None,
    resume: Certificate | None = None,
    on_checks: Sequence[OnCheck] | None = None,
) -> list[Certificate]:
    """`converged` for each of a batch's members: `fitter.run(k, on_step)` runs k iterations of
    every member still going, `on_step(i, losses)` answering per member whether it goes on (one
    that answers False is frozen for good), and returns the members' losses; `fitter.live()`
    says which members are still stepping (not frozen), `fitter.state()` each member's floor
    flag, stationarity and iterations run. `on_steps[k]` is member
    k's own `on_step`. A member is decided at its first doubling that gains less than `tol`,
    at the floor, when stopped, or at `until`; decided members are frozen while the others go
    on, so one computation serves a fit alone and a batch of them alike. `resume` (a lone fit)
    starts after the check it records, with its loss as the next check's first.
    `on_checks[k](done, loss)`, where given, is called after each stretch member k ran in
    (undecided when it began), with the iterations scheduled so far and the member's loss: the
    checks fall at `iterations`, twice that, ..., the last at its certificate's `done`."""
    members = len(on_steps)
    more = iterations if more is None else more
    stopped, decided = [False] * members, [None] * members
    done = 0 if resume is None else resume.done

    def checked(losses: list[float], ran: Sequence[int]) -> None:
        for k in ran if on_checks is not None else ():
            on_checks[k](done, losses[k])

    def numbered(i: int, losses: list[float]) -> list[bool]:
        go, live = [], fitter.live()
        for k in range(members):
            if decided[k] is None and not stopped[k] and live[k]:
                stopped[k] = not on_steps[k](done + i, losses[k])
            go.append(decided[k] is None and not stopped[k])
        return go

    if resume is None:
        first = [float(v) for v in fitter.run(iterations, numbered)]
        done = iterations
        checked(first, range(members))
    else:  # the fit continues after the check that ended it: each stretch doubles what ran
        first, more = [resume.second], resume.done
    while True:
        floored, _, _ = fitter.state()
        going = any(
            d is None and not s and not f for d, s, f in zip(decided, stopped, floored, strict=True)
        )
        undecided = [k for k in range(members) if decided[k] is None]
        second = [float(v) for v in fitter.run(more, numbered)] if going else first
        done += more if going else 0
        if going:
            checked(second, undecided)
        floored, stationarity, ran = fitter.state()
        last = until is None or 2 * done > until
        for k in range(members):
            if decided[k] is not None:
                continue
            a, b = first[k], second[k]
            gain = (a - b) / b if b > 0 else 0.0
            still = moved(a, b) or stationarity[k] <= STATIONARY
            ok = not stopped[k] and math.isfinite(b) and (floored[k] or still and gain < tol)
            if ok or stopped[k] or not math.isfinite(b) or floored[k] or last:
                decided[k] = Certificate(
                    bool(ok), gain, a, b, int(ran[k]), done, bool(floored[k]), stopped[k], still
                )
        if all(d is not None for d in decided):
            return decided
        first, more = second, done

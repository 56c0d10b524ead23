"""Closed-form predictions of the seeds; every function cites the equation it implements.

Seed 000's argument: a degree-d layer costs d * N_dx parameters (eq. 4), so at a budget B a stack
has p = B / (d N_dx) layers and its polynomial has degree d^p = (d^(1/d))^(B / N_dx) (eq. 16-17).
Maximising over d means maximising h(d) = ln d / d (eq. 5), whose only maximum is d = e.
"""

import math
import numbers
from collections.abc import Sequence

from blocklab.errors import UserError

Degree = float | Sequence[float]  # one degree for every layer, or the per-layer degrees of a stack


def h(d: Degree) -> float:
    """h(d) = ln d / d (seed 000 eq. 5): log-degree per unit of parameter cost; maximal at d = e.

    `d` may also be the per-layer degrees of a mixed stack, e.g. [3, 2, 3]: then
    h = sum ln d_i / sum d_i (eq. 16 with the cost of eq. 4), which is not h(mean degree).
    """
    # A stack has degree prod d_i (eq. 16) and costs sum d_i * N_dx (eq. 4): the log-degree bought
    # per N_dx of parameters is sum ln d_i / sum d_i, which is ln d / d for a uniform stack.
    degrees = [float(d)] if isinstance(d, numbers.Real) else [float(x) for x in d]
    if not degrees or any(not x > 0 for x in degrees):
        raise UserError(f"degrees must be positive numbers, got {d!r}")
    return sum(math.log(x) for x in degrees) / sum(degrees)


def optimal_degree() -> float:
    """The maximiser of h over d > 0: h'(d) = (1 - ln d) / d^2 = 0 iff d = e (seed 000 eq. 5)."""
    return math.e


def layers_at_budget(d: float, budget: float, n_dx: float) -> float:
    """Layers p = B / (d N_dx) that a budget B buys at degree d (seed 000 eq. 4)."""
    if not d > 0 or not n_dx > 0:
        raise UserError(f"degree and N_dx must be positive, got d={d!r}, n_dx={n_dx!r}")
    return budget / (d * n_dx)


def degree_proxy_log10(d: Degree, budget: float, n_dx: float) -> float:
    """log10 of the network's polynomial degree (d^(1/d))^(B / N_dx) at budget B (seed 000 eq. 17).

    Returned as a log because the degree itself overflows a float at realistic budgets. `d` may be
    the per-layer degrees of a mixed stack (see `h`).
    """
    if not n_dx > 0:
        raise UserError(f"N_dx must be positive, got {n_dx!r}")
    return budget / n_dx * h(d) / math.log(10)

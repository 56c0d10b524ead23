"""Closed-form predictions of the seeds; every function cites the equation it implements.

Seed 000's argument: a degree-d layer costs d * N_dx parameters (eq. 4), so at a budget B a stack
has p = B / (d N_dx) layers and its polynomial has degree d^p = (d^(1/d))^(B / N_dx) (eq. 16-17).
Maximising over d means maximising h(d) = ln d / d (eq. 5), whose only maximum is d = e.

Seed 001 (Levine et al.) bounds the separation rank of a depth-L linearized self-attention network
of width dx (eq. 3): it grows double-exponentially in L while L < log3 dx (Theorem 1, eq. 7) and
only exponentially in dx L beyond (Theorem 2, eq. 8). `conjectured_bounds` replaces every 3 (the
degree of one attention layer) by a degree d: a conjecture to test (seed 000 Task 1), not a theorem.

Seed 003 (rank collapse): a depth-L network with skips is a sum of (H+1)^L paths (Theorem 2.1), and
the residual of a pure single-head self-attention network is bounded by Theorem 2.2.
"""

import math
import numbers
import re
from collections.abc import Sequence
from fractions import Fraction

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


# ---- seed 001: separation rank of deep linearized self-attention (section 4)


def _integer(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise UserError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _regime(L: int, dx: int, d: float) -> str:
    """Which side of the threshold L = log_d dx a network is on; exact for integer d and dx."""
    t = math.log(dx) / math.log(d)
    if abs(L - t) > 1e-6 * max(1.0, abs(t)):
        return "theorem 1" if t > L else "theorem 2"
    if float(d).is_integer():  # near the threshold: d^L is an integer close to dx, compare exactly
        power = int(d) ** L
        return "threshold" if power == dx else ("theorem 1" if power < dx else "theorem 2")
    if math.isclose(L, t, rel_tol=1e-12, abs_tol=1e-12):
        return "threshold"
    return "theorem 1" if t > L else "theorem 2"


def depth_threshold(dx: float) -> float:
    """log3 dx: the depth at which seed 001's regimes switch (section 4, Theorems 1-2).

    Below it (L < log3 dx, i.e. dx > 3^L) depth is efficient (Theorem 1, eq. 7); above it depth
    and width play similar roles (Theorem 2, eq. 8).
    """
    if isinstance(dx, bool) or not isinstance(dx, numbers.Real) or not 0 < dx < math.inf:
        raise UserError(f"width dx must be a positive number, got {dx!r}")
    return math.log(dx) / math.log(3)


def sep_rank_regime(L: int, dx: int) -> str:
    """Which of seed 001's bounds applies at depth L and width dx (section 4, Theorems 1-2).

    "theorem 1" if L < log3 dx (eq. 7), "theorem 2" if L > log3 dx (eq. 8), "threshold" if
    dx == 3^L exactly (neither theorem covers it). Integers are compared exactly, not via logs.
    """
    L = _integer("depth L", L, 1)
    dx = _integer("width dx", dx, 1)
    return _regime(L, dx, 3)


def _bounds(L: int, dx: int, H: int, d: float) -> tuple[float, float]:
    """eq. 7 / eq. 8 of seed 001 with the degree 3 of one layer replaced by d (log base d)."""
    L = _integer("depth L", L, 1)
    H = _integer("heads H", H, 1)
    dx = _integer("width dx", dx, 1)
    if dx <= H:
        raise UserError(
            f"width dx must exceed heads H (the bounds take log(dx - H)), got {dx} <= {H}"
        )
    ln_d = math.log(d)

    def log(x: float) -> float:
        return math.log(x) / ln_d

    try:
        # Theorem 1 (eq. 7): d^(L-2) (log(dx - H) + a) <= log sep <= C log(dx + H),
        # a = -L + 2 - log 2, C = (d^L - 1)/(d - 1) inputs integrated ((3^L - 1)/2 in eq. 4).
        a = -L + 2 - log(2)
        lower1 = d ** (L - 2) * (log(dx - H) + a)
        upper1 = (d**L - 1) / (d - 1) * log(dx + H)
    except OverflowError:
        # d^L beyond a float: Theorem 1 then needs dx > d^L > 1e308, so only Theorem 2 is used
        lower1, upper1 = -math.inf, math.inf
    # Theorem 2 (eq. 8): dx L / 2 + b1 + b2 <= log sep <= 2 dx L + c1 + c2.
    b1 = -L * (H / 2 + 1)
    b2 = -dx * (1 + log((dx - H) / 2) / 2)
    c1 = L
    c2 = -2 * dx * log(dx / (2 * math.sqrt(2 * math.e))) + log(dx)
    lower2 = dx * L / 2 + b1 + b2
    upper2 = 2 * dx * L + c1 + c2
    regime = _regime(L, dx, d)
    if regime == "theorem 1":
        return lower1, upper1
    if regime == "theorem 2":
        return lower2, upper2
    return min(lower1, lower2), max(upper1, upper2)


def sep_rank_bounds(L: int, dx: int, H: int) -> tuple[float, float]:
    """(log3 lower, log3 upper) bounds on the separation rank of one output entry of a depth-L
    linearized self-attention network (seed 001 eq. 3) of width dx with H heads per layer.

    L < log3 dx, Theorem 1 (eq. 7): 3^(L-2) (log3(dx - H) + a) <= log3 sep <= ((3^L - 1)/2)
    log3(dx + H), a = -L + 2 - log3 2. L > log3 dx, Theorem 2 (eq. 8): dx L/2 + b1 + b2 <= log3 sep
    <= 2 dx L + c1 + c2, b1 = -L (H/2 + 1), c1 = L, b2 = -dx (1 + log3((dx - H)/2)/2),
    c2 = -2 dx log3(dx / (2 sqrt(2e))) + log3 dx. Both hold almost everywhere in weight space.
    At the threshold dx = 3^L neither theorem applies: the envelope (the smaller lower, the larger
    upper expression) is returned as a reference, not a proven bound.

    The raw expressions are returned, not clipped: a negative lower value is a trivial bound
    (sep >= 1 anyway). Needs L >= 1, H >= 1 and dx > H (both theorems take log3(dx - H)).
    """
    return _bounds(L, dx, H, 3)


def conjectured_bounds(L: int, dx: int, H: int, d: float) -> tuple[float, float]:
    """(log_d lower, log_d upper): seed 001 eq. 7-8 with every 3 replaced by a layer degree d.

    A CONJECTURE to test (seed 000 Task 1: extend the proof of seed 001 to degree-d blocks), not a
    theorem. Below the threshold L < log_d dx: d^(L-2) (log_d(dx - H) + a) <= log_d sep <=
    ((d^L - 1)/(d - 1)) log_d(dx + H), a = -L + 2 - log_d 2; above it Theorem 2's expressions with
    log_d (b1, c1 and the dx L/2, 2 dx L terms unchanged); the envelope at L = log_d dx, as in
    `sep_rank_bounds`, which this equals exactly for d = 3. Needs d > 1 and what that needs.
    """
    if isinstance(d, bool) or not isinstance(d, numbers.Real) or not 1 < d < math.inf:
        raise UserError(f"degree d must be a number > 1, got {d!r}")
    return _bounds(L, dx, H, d)


# ---- seed 003: path decomposition and the rank-collapse bound


def path_counts(L: int, H: int) -> list[int]:
    """C(L, k) H^k for k = 0..L: paths through k attention layers and L - k skips (seed 003 Theorem
    2.1 with the skip as a dummy head: (H+1)^L paths in all). Exact integers; L = 0 gives [1].
    """
    L = _integer("depth L", L, 0)
    H = _integer("heads H", H, 1)
    return [math.comb(L, k) * H**k for k in range(L + 1)]


def path_shares(L: int, H: int) -> list[float]:
    """C(L, k) H^k / (H+1)^L for k = 0..L: the share of paths of length k (seed 003 Theorem 2.1).

    Computed as exact fractions, then rounded to float, so no overflow at large L.
    """
    counts = path_counts(L, H)  # validates L and H
    total = (H + 1) ** L
    return [float(Fraction(c, total)) for c in counts]


def _collapse_parts(L: int, beta: float, d_qk: int, res0: float) -> tuple[float, float]:
    """(C, ln(k res0^2)) with C = (3^L - 1)/2, k = 4 beta / sqrt(d_qk); res0 > 0 here."""
    g = math.log(4 * beta / math.sqrt(d_qk)) + 2 * math.log(res0)
    c = (3**L - 1) / 2 if L <= 600 else math.inf  # 3^L overflows a float past L ~ 646
    return c, g


def _check_collapse(L: int, beta: float, d_qk: int, res0: float) -> None:
    _integer("depth L", L, 0)
    _integer("d_qk", d_qk, 1)
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not 0 < beta < math.inf:
        raise UserError(f"beta must be a positive number, got {beta!r}")
    if isinstance(res0, bool) or not isinstance(res0, numbers.Real) or not 0 <= res0 < math.inf:
        raise UserError(f"input residual res0 must be a number >= 0, got {res0!r}")


def collapse_bound_log(L: int, beta: float, d_qk: int, res0: float) -> float:
    """ln of seed 003 Theorem 2.2's bound on ||res SAN(X)||_{1,inf} after L layers:
    ((3^L - 1)/2) ln(4 beta / sqrt(d_qk)) + 3^L ln res0, when ||W_QK||_1 ||W_V||_{1,inf} <= beta
    in every layer and res0 = ||res X||_{1,inf} is the input's residual.

    For a single head, pure self-attention: no skip, MLP or normalization. The bound equals
    (4 beta / sqrt(d_qk) * res0^2)^((3^L - 1)/2) * res0, so it only shrinks with L when
    4 beta / sqrt(d_qk) * res0^2 < 1; otherwise it is vacuous (it stays or grows), and seed 003
    section 2.4 itself asks why the input residual would be below 1. Returned as a log because it
    leaves the float range within a few layers; res0 = 0 gives -inf. Needs beta > 0, d_qk >= 1.
    """
    _check_collapse(L, beta, d_qk, res0)
    if res0 == 0:
        return -math.inf
    c, g = _collapse_parts(L, beta, d_qk, res0)
    return (c * g if g != 0 else 0.0) + math.log(res0)


def collapse_bound_ratio_log(L: int, beta: float, d_qk: int, res0: float) -> float:
    """ln(bound / res0): seed 003 Theorem 2.2 as a bound on ||res X_L|| / ||res X_0||, the per-layer
    ratio that rank_collapse measures: ((3^L - 1)/2) ln(4 beta / sqrt(d_qk) * res0^2).

    Same assumptions and caveats as `collapse_bound_log`; res0 = 0 gives -inf (the limit).
    """
    _check_collapse(L, beta, d_qk, res0)
    if res0 == 0:
        return -math.inf
    c, g = _collapse_parts(L, beta, d_qk, res0)
    return c * g if g != 0 else 0.0


_MIX = re.compile(r"^mix\[([^\]]+)\]$")  # a mixed stack's label: mix[3,2,3]


def layer_degrees(arm, degree):
    """Per-layer degrees of an arm: read from a mixed label "mix[3,2,3]", else (degree,).

    A mixed stack's theory is not h(mean degree) (see `h`), so the label matters; a
    label that does not parse, or disagrees with the row's average degree, falls back to (degree,).
    """
    match = _MIX.match(arm)
    if match:
        try:
            parsed = tuple(
                math.e if x.strip() == "e" else float(x) for x in match.group(1).split(",")
            )
        except ValueError:
            parsed = ()
        if (
            parsed
            and degree is not None
            and math.isclose(sum(parsed) / len(parsed), degree, rel_tol=1e-6)
        ):
            return parsed
    return (float(degree),)


# the degree sweep's negative control (a second d=3 arm of its own initializations), and the
# pairs of arms its answer compares, the first read at its own counts: named with seed 000's
# predictions, below both the experiment that plans them and the analysis that reads them
CONTROL_LABEL = "d=3 (control)"
ANSWER_PAIRS = (("d=2", "d=4"), ("d=2", "d=3"), ("d=4", "d=3"))


def predicted_multiplier(arm: str, degree: float | None) -> float | None:
    """Seed 000's prediction of an arm's parameter multiplier against d = 3: equal degree proxy
    (eq. 17) means B_X h(X) = B_3 h(3), so B_X / B_3 = h(3) / h(X). None for non-polynomial arms,
    and where h(X) <= 0 (degree 1, a linear stack: its proxy never grows, so no budget matches)."""
    if degree is None:
        return None
    own = h(layer_degrees(arm, degree))
    return h(3) / own if own > 0 else None

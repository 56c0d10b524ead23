"""`blocklab advise`: depth and width for a budget from a transition fit (seed 001's eq. 10-11,
or a depth-width run's own fit)."""

from __future__ import annotations

import argparse
import json
import math
import warnings
from pathlib import Path
from typing import Any

from blocklab.config import number
from blocklab.errors import UserError
from blocklab.experiments.depth_width import FIT_FILE


def add_parser(sub) -> None:
    p = sub.add_parser("advise", help="optimal depth and width for a budget (seed 001's fit)")
    p.add_argument("--params", help="non-embedding budget N = 12 L dx^2 (1.3e9, 175B, 1T)")
    p.add_argument("--depth", type=number(int, ge=1), help="print N_transition(L) with its error")
    p.add_argument("--fit", help="a depth-width run directory (its fit.json) or a fit file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Depth and width for a budget from a transition fit (the paper's eq. 11 by default)."""
    from blocklab.analysis import depth_width as dw

    if args.params is None and args.depth is None:
        raise UserError("give --params N (a budget) or --depth L (a transition size), or both")
    fit = _load_fit(args.fit) if args.fit else dw.PAPER_FIT
    payload: dict[str, Any] = {"fit": fit.to_dict()}
    lines = [
        f"fit: {fit.source}: a = {fit.a:.4g} +- {fit.sigma_a:.2g}, b = {fit.b:.4g} +- "
        f"{fit.sigma_b:.2g} (depths {min(fit.depths):g}-{max(fit.depths):g})"
    ]
    if args.params is not None:
        advice = dw.advise(_count(args.params), fit)
        measured = _measured(fit)
        _check_reach(args.params, advice, fit, measured)
        payload["advice"] = advice.to_dict()
        lo, hi = advice.depth_range
        near = f"depths {lo}-{hi} are" if lo < hi else "no other depth is"
        lines += [
            f"budget N = {advice.n_params:.4g} non-embedding parameters (N = 12 L dx^2)",
            f"depth L = {advice.depth} (L* = {_pm(advice.depth_exact, advice.depth_sigma, 2)}; "
            f"{near} within the fit's 1-sigma)",
            f"width dx = {_pm(advice.width, advice.width_sigma, 0)} (sqrt(N / (12 L)))",
            f"buildable: dx = {advice.buildable_width} (the nearest multiple of {advice.multiple}"
            + (
                f": {advice.buildable_width // 64} heads of 64 dimensions"
                if advice.multiple == 64
                else ""
            )
            + f"), N = "
            f"{advice.buildable_params:.4g} ({advice.buildable_params / advice.n_params - 1:+.1%} "
            "of the budget)",
        ]
        if advice.extrapolated:
            lines.append(
                f"extrapolated: L* lies outside the {measured}: its +- assumes the fit's line "
                "holds out here"
            )
    if args.depth is not None:
        with warnings.catch_warnings():  # an overflow is reported below, in one line
            warnings.simplefilter("ignore", RuntimeWarning)
            n, dn = dw.n_transition(args.depth, fit)
        if not (math.isfinite(n) and math.isfinite(dn)):
            raise UserError(
                f"--depth {args.depth}: N_transition overflows a float there (it grows like "
                f"e^(2 b L), b = {fit.b:.3g}); give a smaller depth"
            )
        payload["transition"] = {"depth": args.depth, "n_params": n, "error": dn}
        lines.append(
            f"N_transition({args.depth}) = {n:.4g} +- {dn:.2g} ({100 * dn / n:.1f}%, eq. 10): "
            f"the size at which depth {args.depth} is optimal"
        )
    print(json.dumps(payload, indent=2) if args.json else "\n".join(lines))
    return 0


def _measured(fit) -> str:
    """The depths the fit was measured at, and the budgets whose optimum they are."""
    from blocklab.analysis import depth_width as dw

    low, high = min(fit.depths), max(fit.depths)
    n_low, n_high = dw.n_transition(low, fit)[0], dw.n_transition(high, fit)[0]
    return f"depths {low:g}-{high:g} the fit was measured at (N = {n_low:.2g} to {n_high:.2g})"


def _check_reach(given: str, advice, fit, measured: str) -> None:
    """Refuse a budget the fit cannot speak for: one whose optimum is under half a layer (no
    depth rounds to it), or one so far out that the fit's error on N there passes 100%, where
    a linear error model (the +- it prints) states nothing."""
    from blocklab.analysis import depth_width as dw

    exact = advice.depth_exact
    if exact < 0.5:
        least = dw.n_transition(0.5, fit)[0]
        raise UserError(
            f"--params {given}: the fit puts the optimal depth under half a layer "
            f"(L* = {exact:.2g}), below the {measured}; it advises budgets from N = {least:.2g}"
        )
    error = dw.n_transition(exact, fit)[1] / advice.n_params
    if error >= 1:
        raise UserError(
            f"--params {given}: L* = {exact:.4g} lies so far beyond the {measured} that the "
            f"fit's error on N there is {error:.0%}, past what its +- can state; give a smaller "
            "budget"
        )


def _pm(value: float, sigma: float, places: int) -> str:
    """value +- sigma at `places` decimals, or to sigma's second significant digit where those
    would print it as zero: an uncertainty is not shown as none."""
    if sigma > 0 and round(sigma, places) == 0:
        places = 1 - math.floor(math.log10(sigma))
    return f"{value:.{places}f} +- {sigma:.{places}f}"


def _load_fit(where: str):
    from blocklab.analysis import depth_width as dw

    path = Path(where)
    if path.is_dir():
        path = path / FIT_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"no fit at {path}: `blocklab depth-width --out DIR` writes DIR/{FIT_FILE} "
            "when its runs give two or more transitions"
        ) from None
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the fit {path}: {exc}") from None
    return dw.Fit.from_dict(data)


SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def _count(text: str) -> float:
    """'1.3e9', '1_300_000_000', '1.3B', '175b', '1T', '760M', '30k' -> a number."""
    s = text.strip().replace("_", "").replace(",", "")
    scale = SUFFIXES.get(s[-1:].lower(), 1.0) if s else 1.0
    try:
        value = float(s[:-1] if scale != 1.0 else s) * scale
    except ValueError:
        raise UserError(
            f"--params: {text!r} is not a number (e.g. 1.3e9, 1.3B, 175B, 1T)"
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"--params must be a positive number, got {text!r}")
    return value

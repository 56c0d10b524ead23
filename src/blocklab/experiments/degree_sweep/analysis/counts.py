"""The parameter counts a degree sweep's fits read, and the theory's prediction on each.

A row carries what its budget pays (`block_params`, the nominal count seed 000's theory speaks
of: d N_dx per layer) and, from the sweep, its cell's functional count (`functional_params`: the
rank of the network's parameter Jacobian at initialization, `measures.functional`). A degree-d
product layer of width w spends (d-1) w parameters on rescalings that leave its function
unchanged, so the two counts differ by arm; the shared scaling model is fitted on either.
"""

from __future__ import annotations

import math

import numpy as np

from blocklab.experiments.degree_sweep.analysis import fit_checks, multiplier, scaling
from blocklab.experiments.degree_sweep.analysis.cells import loss
from blocklab.theory import predicted_multiplier

REFERENCE = fit_checks.REFERENCE
COUNTS = {"nominal": "block_params", "functional": "functional_params"}


def counted(rows, count: str) -> bool:
    """Whether every row carries `count` (COUNTS): rows made before functional counts have none."""
    return bool(rows) and all(r.get(COUNTS[count]) for r in rows)


def observations(rows, count: str = "nominal") -> list[scaling.Observation]:
    """The rows as the scaling fits' observations, each at its cell's `count`."""
    return [
        scaling.Observation(
            r["arm"],
            int(r["budget"]),
            int(r[COUNTS[count]]),
            (int(r.get("teacher") or 0), int(r["seed"])),
            loss(r) if loss(r) is not None else math.nan,
        )
        for r in rows
    ]


def scaling_fits(
    rows, n_boot: int, level: float = 0.95, on_draw=None, count: str = "nominal"
) -> scaling.ScalingResult:
    """Each arm's own curve L = L_inf + a P^-alpha and its multiplier read off it
    (`scaling`): the figure's curves, beside the shared model that decides."""
    return scaling.analyze(
        observations(rows, count), reference=REFERENCE, n_boot=n_boot, level=level,
        on_draw=on_draw,
    )  # fmt: skip


def multiplier_fit(
    rows, n_boot: int, level: float = 0.95, on_draw=None, count: str = "nominal"
) -> multiplier.MultiplierFit | None:
    """The shared scaling model over every arm (`multiplier`), on the test losses against the
    cells' `count` (COUNTS)."""
    return multiplier.fit(
        observations(rows, count), reference=REFERENCE, n_boot=n_boot, level=level,
        on_draw=on_draw,
    )  # fmt: skip


def shares(rows) -> dict[str, float]:
    """Per arm, its functional parameters per nominal one, the mean over its cells (the closed
    form 1 - (d-1) / (d w) for a poly arm at width w, with as many inputs as the width)."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if r.get("functional_params"):
            out.setdefault(r["arm"], []).append(r["functional_params"] / r["block_params"])
    return {arm: float(np.mean(v)) for arm, v in out.items()}


def predictions(rows, degrees: dict, count: str) -> dict[str, float | None]:
    """Per arm, seed 000's multiplier on `count`: h(3) / h(d) on the nominal count (eq. 17, equal
    degree proxy per nominal parameter); on the functional count the same proxy per functional
    parameter, h(3) / h(d) times the arm's functional share over d = 3's (`shares`)."""
    nominal = {arm: predicted_multiplier(arm, d) for arm, d in degrees.items()}
    if count == "nominal":
        return nominal
    share = shares(rows)
    ref = share.get(REFERENCE)
    return {
        arm: (m * share[arm] / ref if m is not None and ref and arm in share else None)
        for arm, m in nominal.items()
    }

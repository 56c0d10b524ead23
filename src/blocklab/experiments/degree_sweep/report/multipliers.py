"""The shared scaling model's part of the degree sweep's report
(`degree_sweep.analysis.multiplier`): the multipliers' table, their section of report.md and their
JSON keys."""

import math
from typing import Any

from blocklab.experiments.degree_sweep.report.edges import names, shape_edge_words
from blocklab.experiments.degree_sweep.report.intervals import after, cell, interval_words, p_value
from blocklab.experiments.degree_sweep.report.intervals import level as _level
from blocklab.formatting import markdown_table
from blocklab.formatting import short as fmt
from blocklab.theory import predicted_multiplier


def inf_or(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.3g}"


def pct(share: float) -> str:
    return "inf" if math.isinf(share) else f"{share:.1%}"


def scaling_view(capacity):
    """The capacity result as the scaling law's view sees it: where a matched answer leads,
    its `decision` and `counts` are the answer's, and the law's own stand in `scaling_counts`."""
    import dataclasses

    if getattr(capacity, "matched", None) is None or not capacity.scaling_counts:
        return capacity
    own = capacity.scaling_counts
    got = own.get(capacity.count) or next(iter(own.values()))
    return dataclasses.replace(capacity, decision=got.decision, counts=own, matched=None)


def multiplier_rows(capacity) -> list[tuple[str, ...]]:
    """The multipliers as a short table's rows: arm, m, interval, predicted, what it says."""
    capacity = scaling_view(capacity)
    d = capacity.decision
    rows = [(d.reference, "1", "-", "1", "reference")]
    for arm in d.differs:
        a = capacity.model.arm_alpha.get(arm)
        own = f"own exponent {a.value:.3g}{after(a.low, a.high)}" if a else "own exponent"
        pred = predicted_multiplier(arm, capacity.degrees.get(arm))
        rows.append((arm, "-", "-", "-" if pred is None else f"{pred:.3f}", own))
    for f in d.findings:
        if f.name == "m2/m4":
            name, pred = "m_2 / m_4", "-" if f.predicted is None else f"{f.predicted:.3g}"
        else:
            name, pred = f.name, "-" if f.predicted is None else f"{f.predicted:.3f}"
        i = f.interval
        said = "no interval" if cell(i.low, i.high) == "-" else "unbounded" if not i.bounded else (
            "decided" if f.decided else f"+-{pct(f.resolution)}"
        )  # fmt: skip
        rows.append((name, inf_or(i.value), cell(i.low, i.high), pred, said))
    return rows


MULTIPLIER_HEAD = ("arm", "m", "95% interval", "predicted", "")


def multiplier_lines(capacity) -> list[str]:
    """The terminal's multiplier table and the shared model's exponent and shape test."""
    capacity = scaling_view(capacity)
    model = capacity.model
    if model is None:
        return []
    table = markdown_table(MULTIPLIER_HEAD, multiplier_rows(capacity))
    a = model.alpha
    shape = model.shape
    test = "every arm's own exponent against one shared: " + (
        f"F test p = {p_value(shape.p)}" if math.isfinite(shape.p)
        else "no F test (no degrees of freedom left)"
    )  # fmt: skip
    if shape.differs:
        test += (
            f"; an exponent of its own fits {', '.join(shape.differs)} significantly better "
            f"(Holm-adjusted p {', '.join(p_value(shape.arm_p[a]) for a in shape.differs)}): no "
            "constant multiplier there"
        )
        if not shape.stable:
            test += f"; but {shape_edge_words(shape).split(' but ', 1)[1]}: at its edge"
    return [
        f"shared scaling model on the {capacity.count} count, L_a(P) = L_inf + A (P / m_a)^-alpha, "
        f"m_{capacity.decision.reference} = 1: alpha = {a.value:.3g}{after(a.low, a.high)}, "
        f"L_inf = {model.L_inf:.3g}; "
        f"{test}; {_level(model)}{interval_words(model)}",
        *table,
    ]


def on_count(capacity, count: str):
    """The capacity result with `model` and `decision` those of `count` (`Counted`), which the
    tables of this module then word; None where that count was not fitted."""
    import dataclasses

    got = capacity.counts.get(count)
    if got is None or got.model is None:
        return None
    return dataclasses.replace(capacity, model=got.model, decision=got.decision, count=count)


COUNT_WORDS = {
    "nominal": "the nominal count (what a budget pays; seed 000's d N_dx per layer)",
    "functional": "the functional count (the rank of the parameter Jacobian)",
}


def other_count_lines(capacity) -> list[str]:
    """The shared model on each count the status is not fitted on: its outcome, exponent and
    multipliers beside the theory's prediction on that count."""
    capacity = scaling_view(capacity)
    out = []
    for count in capacity.counts:
        if count == capacity.count or (other := on_count(capacity, count)) is None:
            continue
        word = other.decision.outcome.value
        out += ["", f"on {COUNT_WORDS[count]}: {word} on the same design checks", *(
            multiplier_lines(other))]  # fmt: skip
    return out


def multiplier_section(capacity) -> list[str]:
    model = capacity.model
    return [
        "## Multipliers against d = 3",
        "",
        "One scaling law for every arm, L_a(P) = L_inf + A (P / m_a)^-alpha with m = 1 for "
        "d = 3, fitted by least squares to each cell's geometric-mean test loss against its "
        "actual parameter count; m > 1: the arm needs m times the parameters d = 3 needs for "
        "the same loss. Predicted: h(3)/h(d) (seed 000 eq. 17), and m_2 / m_4 = 1 exactly "
        f"(h(2) = h(4)). Intervals: {_level(model)}{interval_words(model)} "
        f"({model.n_failed} {'unit fits' if model.method == 'units' else 'draws'} failed).",
        "",
        *multiplier_lines(capacity)[1:],
        "",
        multiplier_lines(capacity)[0],
        "",
        "![multipliers against d = 3](efficiency.png)",
        "",
    ]


def _interval_json(i) -> dict[str, Any]:
    return {"m": i.value, "ci_low": i.low, "ci_high": i.high}


def multiplier_json(capacity) -> dict[str, Any]:
    """The shared model's keys of the JSON contract: `multipliers`, `m2_over_m4`, `alpha`,
    `alpha_ci`, `shape_test`, with the status's `outcome`."""
    model, d = capacity.model, capacity.decision
    out: dict[str, Any] = {
        "outcome": d.outcome.value,
        # what the status is INCONCLUSIVE on where no check failed: the checks at their edge,
        # and the shape test where one unit left out changes it
        "at_edge": names(d),
        "multipliers": {},
        "m2_over_m4": None,
        "alpha": None,
        "alpha_ci": None,
        "shape_test": None,
        "units_for_3pct": d.units_for_3pct,
    }
    if model is None:
        return out
    out["multipliers"] = {a: _interval_json(i) for a, i in model.multipliers.items()}
    if model.ratio_2_4 is not None:
        r = model.ratio_2_4
        out["m2_over_m4"] = {"ratio": r.value, "ci_low": r.low, "ci_high": r.high}
    out["alpha"] = model.alpha.value
    out["alpha_ci"] = [model.alpha.low, model.alpha.high]
    out["shape_test"] = {
        "shared_alpha_preferred": model.shape.shared_alpha_preferred,
        "p": model.shape.p,
        "f": model.shape.f,
        "df": list(model.shape.df),
        "arm_p": model.shape.arm_p,
        "differs": list(model.shape.differs),
        "arm_alpha": {a: _interval_json(i) for a, i in model.arm_alpha.items()},
        # with each (teacher, seed) unit left out in turn: the arms named and the p value;
        # `stable`: every one names what the whole run names
        "stable": model.shape.stable,
        "left_out": [
            {"unit": list(u), "differs": None if d is None else list(d), "p": p}
            for u, d, p in zip(
                model.shape.units, model.shape.left_out, model.shape.left_out_p, strict=True
            )
        ],
    }
    out["L_inf"], out["A"] = model.L_inf, model.A
    return out


def counts_json(capacity) -> dict[str, Any]:
    """`count` (what `multipliers` are fitted on), and `multipliers_<count>` for both counts,
    each {arm: {"m", "ci_low", "ci_high"}} with the reference at 1 ({} where the rows carry no
    such count or its model could not be fitted); `outcomes`: each count's status word and
    `m2_over_m4_<count>`."""
    out: dict[str, Any] = {"count": capacity.count, "outcomes": {}}
    for count in ("nominal", "functional"):
        got = capacity.counts.get(count)
        model = got.model if got else None
        out[f"multipliers_{count}"] = (
            {a: _interval_json(i) for a, i in model.multipliers.items()} if model else {}
        )
        r = model.ratio_2_4 if model else None
        out[f"m2_over_m4_{count}"] = (
            {"ratio": r.value, "ci_low": r.low, "ci_high": r.high} if r else None
        )
        if got:
            out["outcomes"][count] = got.decision.outcome.value
    return out


def fit_table(fit) -> list[str]:
    lines = [
        "",
        "## Each arm's own curve",
        "",
        "Beside the shared model: per arm, L(P) = L_inf + a P^-alpha fit by least squares on "
        "log loss to the per-budget means against the actual parameter counts (SciPy); intervals: "
        f"{fit.level:.0%} bootstrap percentiles over {fit.n_boot} draws that resample teachers, "
        "then seeds within them, the same draws for every arm (paired).",
        "",
    ]
    if not fit.fits:  # an empty table would only repeat its header
        return lines + ["No arm's own curve could be fitted (it needs 3 budgets or more).", ""]
    body = [
        (arm, fmt(f.L_inf), cell(*f.ci["L_inf"], fmt), fmt(f.a), fmt(f.alpha),
         cell(*f.ci["alpha"], fmt))
        for arm, f in fit.fits.items()
    ]  # fmt: skip
    lines += markdown_table(("arm", "L_inf", "95% CI", "a", "alpha", "95% CI"), body)
    return lines + [""]

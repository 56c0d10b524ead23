"""The shared scaling model's part of the degree sweep's report (`analysis.multiplier`,
`analysis.capacity.Decision`): the status line, the multipliers' table, their section of
report.md and their JSON keys."""

import math
import shlex
from typing import Any

from blocklab.analysis import capacity as cap
from blocklab.analysis.capacity import PREDICTED_EFFECT
from blocklab.formatting import markdown_table
from blocklab.reports.degree_sweep.edges import edge_words, names, shape_edge_words
from blocklab.theory import predicted_multiplier

STATUS_WIDTH = 100  # the terminal's columns: the status line fits in one where it can
# what to change where a check failed, in a few words, where the run's config is not known and
# there is no next command with values (each check's line under design checks says more)
FIX = {
    "input_rank": "RMSNorm for LayerNorm or a block that keeps every input direction",
    "budget_span": "more or wider budgets",
    "converged": "more --steps",
    "plateau": "more --steps",
    "search": "more --restarts",
    "curve": "more --restarts or wider budgets",
    "generalization": "a larger --data-ratio",
    "lr_not_at_edge": "a wider --lr-grid",
    "width_matched": "other --budgets or --width",
    "replicates": "more --seeds",
    "resolution": "more --seeds or --teachers",
}


def inf_or(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.3g}"


def _pct(share: float) -> str:
    return "inf" if math.isinf(share) else f"{share:.1%}"


def _finding(f: cap.Finding) -> str:
    name = "m_2 / m_4" if f.name == "m2/m4" else f"m({f.name})"
    i = f.interval
    return f"{name} = {inf_or(i.value)} [{inf_or(i.low)}, {inf_or(i.high)}]"


def _finding_said(f: cap.Finding, reference: str) -> str:
    """A decided finding in words: which way it points and where the prediction lies."""
    text = _finding(f)
    if f.name == "m2/m4":
        if f.excludes_one:
            return f"{text}: d=2 and d=4 differ, against the predicted 1 (h(2) = h(4))"
        return f"{text}: equal within +-{_pct(f.resolution)}, as predicted (1)"
    side = (
        "needs more parameters than" if f.interval.low > 1
        else "needs fewer parameters than" if f.interval.high < 1
        else "is not distinguishable from"
    )  # fmt: skip
    text += f": {f.name} {side} {reference}"
    if f.predicted is not None:
        where = "outside" if f.excludes_prediction else "inside"
        text += f" (predicted {f.predicted:.3f}: {where} the interval)"
    return text


def _actions(d: cap.Decision) -> list[str]:
    """What to change, most explicit first: the next command whole, then its changes alone
    (`analysis.design.next_run`); without one, each failed check's fix in words."""
    if d.next is not None:
        return [d.next.command, f"rerun with {shlex.join(d.next.flags)}"]
    fixes = ", ".join(dict.fromkeys(FIX[c.name] for c in d.failed if c.name in FIX))
    return [fixes] if fixes else []


def _first_fitting(lines: list[str]) -> str:
    """The first of `lines` that fits STATUS_WIDTH, else the last (the shortest to say it)."""
    return next((line for line in lines if len(line) <= STATUS_WIDTH), lines[-1])


def _no_verdict(d: cap.Decision) -> str:
    """NO VERDICT with the failed checks and what to change, in STATUS_WIDTH where it fits: the
    next command whole, else its changes, naming fewer checks before giving the action up."""
    names = [c.name for c in d.failed]
    failed = [
        "design checks failed: "
        + ", ".join(names[:k])
        + (f" and {len(names) - k} more" if k < len(names) else "")
        for k in range(len(names), 0, -1)
    ] + [f"{len(names)} design checks failed" if len(names) > 1 else "a design check failed"]
    tried = [f"NO VERDICT: {n}; to change: {a}" for a in _actions(d) for n in failed]
    # too long to say here: the next command (`next_lines`), or each failed check's line, is
    # with the design checks, wherever those stand from here
    where = "the next command given with the design checks" if d.next else (
        "what each design check says"
    )  # fmt: skip
    return _first_fitting(tried + [f"NO VERDICT: {n}; to change: {where}" for n in failed])


def status_line(capacity) -> tuple[bool, str]:
    """The run's status (`analysis.capacity.Decision`) as its one line: whether it is a
    verdict, and the line, starting with VERDICT, INCONCLUSIVE or NO VERDICT. A run without a
    verdict says what to run next (`next_lines`), where its place (last in the terminal, first
    on the page) makes no "above" or "below" right."""
    d = capacity.decision
    if d.outcome is cap.Outcome.NO_VERDICT:
        if d.failed:
            return False, _no_verdict(d)
        why = (
            f"NO VERDICT: the shared scaling model could not be fitted (it needs {d.reference} "
            "and another arm at 2 budgets or more)"
        )
        return False, _first_fitting([f"{why}; to change: {a}" for a in _actions(d)] or [why])
    model = capacity.model
    if d.edges or d.shape_edge:
        said = [edge_words(c) for c in d.edges]
        if d.shape_edge:
            said.append(shape_edge_words(model.shape))
        line = f"INCONCLUSIVE: {'; '.join(said)}"
        return False, _first_fitting(
            [f"{line}; to settle: {a}" for a in _actions(d)] + [line]
            + [f"INCONCLUSIVE: at its edge: {', '.join(names(d))}"]
        )
    if d.shape_rejected:
        alphas = "; ".join(
            f"{a} {i.value:.3g} [{i.low:.3g}, {i.high:.3g}]" for a, i in model.arm_alpha.items()
        )
        return True, (
            f"VERDICT: no constant multiplier: the arms' exponents differ (F test p = "
            f"{model.shape.p:.2g}); each arm's exponent: {alphas}"
        )
    if d.outcome is cap.Outcome.INCONCLUSIVE:
        worst = max(d.undecided, key=lambda f: f.resolution)
        size = (
            f"; +-3% needs about {d.units_for_3pct} (teacher, seed) units (this run: {d.units})"
            if d.units_for_3pct
            else ""
        )
        line = (
            f"INCONCLUSIVE: {_finding(worst)}, resolution +-{_pct(worst.resolution)}; the "
            f"predicted effect is {PREDICTED_EFFECT:.1%}{size}"
        )
        return False, _first_fitting([f"{line}; to change: {a}" for a in _actions(d)] or [line])
    said = "; ".join(_finding_said(f, d.reference) for f in d.findings if f.name in d.decisive)
    return True, f"VERDICT: {said}"


def next_keywords(capacity) -> dict[str, Any]:
    """The next run's changes as `blocklab.api.run` keywords (the flags' names: a nested key
    "train.steps" is `steps`), lists where the config holds tuples; {} where there is none."""
    d = capacity.decision
    if d.next is None:
        return {}
    return {c.key.rsplit(".", 1)[-1]: list(c.new) if isinstance(c.new, tuple) else c.new
            for c in d.next.changes}  # fmt: skip


def next_lines(capacity, markdown: bool = False) -> list[str]:
    """The command to run next where the run reached no verdict, whole: for the terminal in
    lines of STATUS_WIDTH continued by a backslash (a shell reads them as one), for report.md
    in a code block; [] where there is none."""
    d = capacity.decision
    if d.next is None or (not markdown and d.next.command in status_line(capacity)[1]):
        return []  # none, or the status line holds it whole
    said = (
        "next command, with the changes the failed checks ask for" if d.failed
        else "next command, with the changes that would settle the checks at their edge"
        if d.edges
        else "next command, with the (teacher, seed) units a +-3% interval needs"
    )  # fmt: skip
    if markdown:
        return [f"{said[0].upper()}{said[1:]}:", "", f"    {d.next.command}"]
    groups: list[str] = []  # a flag with its values, kept on one line where they fit
    for word in map(shlex.quote, shlex.split(d.next.command)):
        if groups and not (word.startswith("-") and not word[1:2].isdigit()):
            groups[-1] += f" {word}"
        else:
            groups.append(word)
    lines, line = [], ""
    for group in groups:
        if line and len(line) + len(group) + 3 > STATUS_WIDTH:
            lines.append(f"{line} \\")
            line = "   "
        line = f"{line} {group}" if line else group
    return [f"{said}:", *lines, line]


def multiplier_rows(capacity) -> list[tuple[str, ...]]:
    """The multipliers as a short table's rows: arm, m, interval, predicted, what it says."""
    d = capacity.decision
    rows = [(d.reference, "1", "-", "1", "reference")]
    for arm in d.differs:
        a = capacity.model.arm_alpha.get(arm)
        own = (
            f"own exponent {a.value:.3g} [{inf_or(a.low)}, {inf_or(a.high)}]"
            if a
            else "own exponent"
        )
        pred = predicted_multiplier(arm, capacity.degrees.get(arm))
        rows.append((arm, "-", "-", "-" if pred is None else f"{pred:.3f}", own))
    for f in d.findings:
        if f.name == "m2/m4":
            name, pred = "m_2 / m_4", "-" if f.predicted is None else f"{f.predicted:.3g}"
        else:
            name, pred = f.name, "-" if f.predicted is None else f"{f.predicted:.3f}"
        i = f.interval
        said = "unbounded" if not i.bounded else "decided" if f.decided else (
            f"+-{_pct(f.resolution)}"
        )  # fmt: skip
        rows.append((name, inf_or(i.value), f"[{inf_or(i.low)}, {inf_or(i.high)}]", pred, said))
    return rows


MULTIPLIER_HEAD = ("arm", "m", "95% interval", "predicted", "")


def multiplier_lines(capacity) -> list[str]:
    """The terminal's multiplier table and the shared model's exponent and shape test."""
    model = capacity.model
    if model is None:
        return []
    table = markdown_table(MULTIPLIER_HEAD, multiplier_rows(capacity))
    a = model.alpha
    shape = model.shape
    test = f"every arm's own exponent against one shared: F test p = {_p(shape.p)}"
    if shape.differs:
        test += (
            f"; an exponent of its own fits {', '.join(shape.differs)} significantly better "
            f"(Holm-adjusted p {', '.join(_p(shape.arm_p[a]) for a in shape.differs)}): no "
            "constant multiplier there"
        )
        if not shape.stable:
            test += f"; but {shape_edge_words(shape).split(' but ', 1)[1]}: at its edge"
    return [
        f"shared scaling model on the {capacity.count} count, L_a(P) = L_inf + A (P / m_a)^-alpha, "
        f"m_{capacity.decision.reference} = 1: alpha = {a.value:.3g} "
        f"[{inf_or(a.low)}, {inf_or(a.high)}], L_inf = {model.L_inf:.3g}; "
        f"{test}; {model.level:.0%} {interval_words(model)}",
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
    out = []
    for count in capacity.counts:
        if count == capacity.count or (other := on_count(capacity, count)) is None:
            continue
        word = other.decision.outcome.value
        out += ["", f"on {COUNT_WORDS[count]}: {word} on the same design checks", *(
            multiplier_lines(other))]  # fmt: skip
    return out


def interval_words(model) -> str:
    """How the model's intervals were made (`multiplier.METHODS`), in a clause."""
    if model.method == "bootstrap":
        return (
            f"percentiles of {model.n_boot} paired bootstrap draws over {model.units} (teacher, "
            "seed) units, resampled within teachers"
        )
    over = (
        f"the means of {model.teachers} teachers (a random effect: it covers the spread between "
        "targets)"
        if model.teachers > 1
        else f"{model.units} seeds of one teacher (it says nothing of other targets)"
    )
    return (
        f"t interval (df {model.df:g}) over {over}, each unit's multipliers refitted on its own "
        "cells; such intervals covered >= 90% in simulations at 3-8 units and 1-3 teachers "
        "(benchmarks/coverage.py)"
    )


def _p(p: float) -> str:
    return "-" if not math.isfinite(p) else f"{p:.2g}"


def multiplier_section(capacity) -> list[str]:
    model = capacity.model
    return [
        "## Multipliers against d = 3",
        "",
        "One scaling law for every arm, L_a(P) = L_inf + A (P / m_a)^-alpha with m = 1 for "
        "d = 3, fitted by least squares to each cell's geometric-mean test loss against its "
        "actual parameter count; m > 1: the arm needs m times the parameters d = 3 needs for "
        "the same loss. Predicted: h(3)/h(d) (seed 000 eq. 17), and m_2 / m_4 = 1 exactly "
        f"(h(2) = h(4)). Intervals: {model.level:.0%} {interval_words(model)} "
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

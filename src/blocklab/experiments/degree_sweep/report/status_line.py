"""The degree sweep's status line (`degree_sweep.analysis.capacity.Decision`) and what it says to
run next: the next command whole with its estimated cost, its changes as `blocklab.api.run`
keywords, and each failed check's fix in words where there is no command."""

import shlex
from typing import Any

from blocklab.experiments.degree_sweep.analysis import capacity as cap
from blocklab.experiments.degree_sweep.analysis.capacity import PREDICTED_EFFECT
from blocklab.experiments.degree_sweep.report import answer
from blocklab.experiments.degree_sweep.report.edges import edge_words, names, shape_edge_words
from blocklab.experiments.degree_sweep.report.intervals import after
from blocklab.experiments.degree_sweep.report.multipliers import inf_or, pct
from blocklab.formatting import duration

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


def _finding(f: cap.Finding) -> str:
    name = "m_2 / m_4" if f.name == "m2/m4" else f"m({f.name})"
    i = f.interval
    return f"{name} = {inf_or(i.value)}{after(i.low, i.high)}"


def _finding_said(f: cap.Finding, reference: str) -> str:
    """A decided finding in words: which way it points and where the prediction lies."""
    text = _finding(f)
    if f.name == "m2/m4":
        if f.excludes_one:
            return f"{text}: d=2 and d=4 differ, against the predicted 1 (h(2) = h(4))"
        return f"{text}: equal within +-{pct(f.resolution)}, as predicted (1)"
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


def cost_words(cost) -> str | None:
    """The next run's cost (its plan, `engine.pricing.Plan`) in the status line's few words;
    None where not priced."""
    if cost is None or cost.core_seconds is None:
        return None
    bound = "at most" if cost.bound else "about"
    said = f"{bound} {duration(cost.core_seconds)} of one core's fits"
    if cost.trials_continued:
        said += f": {cost.trials_continued} stored trials continue"
    if cost.trials_new:
        said += f"{'; ' if cost.trials_continued else ': '}{cost.trials_new} new trials"
    return said


def _actions(d: cap.Decision) -> list[str]:
    """What to change, most explicit first: the next command whole (with its estimated cost,
    then without), then its changes alone (`degree_sweep.analysis.design.next_run`); without one,
    each failed check's fix in words."""
    if d.next is not None:
        costed = cost_words(d.next.cost)
        first = [f"{d.next.command} ({costed})"] if costed else []
        return [*first, d.next.command, f"rerun with {shlex.join(d.next.flags)}"]
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


def status_line(capacity, action: bool = True) -> tuple[bool, str]:
    """The run's status (`degree_sweep.analysis.capacity.Decision`) as its one line: whether it is a
    verdict, and the line, starting with VERDICT, INCONCLUSIVE or NO VERDICT. A run without a
    verdict says what to run next (`next_lines`), where its place (last in the terminal, first
    on the page) makes no "above" or "below" right. `action` False: the status alone, whole,
    without what to change and in no set width (the page's banner gives the next command a
    line of its own, `change`). A run whose arms meet leads with its matched answer
    (`_matched_line`)."""
    if getattr(capacity, "matched", None) is not None:
        return _matched_line(capacity, action)
    d = capacity.decision
    if d.outcome is cap.Outcome.NO_VERDICT:
        if d.failed:
            if not action:
                failed = ", ".join(c.name for c in d.failed)
                return False, f"NO VERDICT: design checks failed: {failed}"
            return False, _no_verdict(d)
        why = (
            f"NO VERDICT: the shared scaling model could not be fitted (it needs {d.reference} "
            "and another arm at 2 budgets or more)"
        )
        if not action:
            return False, why
        return False, _first_fitting([f"{why}; to change: {a}" for a in _actions(d)] or [why])
    model = capacity.model
    if d.edges or d.shape_edge:
        said = [edge_words(c) for c in d.edges]
        if d.shape_edge:
            said.append(shape_edge_words(model.shape))
        line = f"INCONCLUSIVE: {'; '.join(said)}"
        if not action:
            return False, line
        return False, _first_fitting(
            [f"{line}; to settle: {a}" for a in _actions(d)]
            + [line]
            + [f"INCONCLUSIVE: at its edge: {', '.join(names(d))}"]
        )
    if d.shape_rejected:
        alphas = "; ".join(
            f"{a} {i.value:.3g}{after(i.low, i.high)}" for a, i in model.arm_alpha.items()
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
            f"INCONCLUSIVE: {_finding(worst)}, resolution +-{pct(worst.resolution)}; the "
            f"predicted effect is {PREDICTED_EFFECT:.1%}{size}"
        )
        if not action:
            return False, line
        return False, _first_fitting([f"{line}; to change: {a}" for a in _actions(d)] or [line])
    said = "; ".join(_finding_said(f, d.reference) for f in d.findings if f.name in d.decisive)
    return True, f"VERDICT: {said}"


def _matched_line(capacity, action: bool) -> tuple[bool, str]:
    """The matched status (`answer`): VERDICT with the comparisons and the hypotheses' words,
    INCONCLUSIVE with the checks at their edge or the teachers that would decide m_2 / m_4,
    or NO VERDICT with the failed checks and what to change (the words of any run)."""
    res = capacity.matched
    d = res.decision
    if d.outcome is cap.Outcome.NO_VERDICT:
        if d.no_model:
            return False, "NO VERDICT: no pair of arms meets at an equal count (--arm-depths)"
        if not action:
            return False, f"NO VERDICT: checks failed: {', '.join(c.name for c in d.failed)}"
        return False, _no_verdict(d)
    said = answer.versus_said(res.answer)
    if d.outcome is cap.Outcome.VERDICT:
        return True, "VERDICT: " + "; ".join(said + answer.hypotheses_said(res.answer))
    if d.edges:
        line = f"INCONCLUSIVE: at its edge: {', '.join(c.name for c in d.edges)}; {said[0]}"
    else:
        line = f"INCONCLUSIVE: {said[0]}"
        e = res.estimates.get("m2/m4")
        if e is not None and res.teachers_needed:
            line = (
                f"INCONCLUSIVE: m_2/m_4 = {e.m:.3g} [{e.low:.3g}, {e.high:.3g}] undecided; "
                f"about {res.teachers_needed} teachers would decide it (this run: {e.teachers})"
            )
    if not action:
        return False, line
    return False, _first_fitting([f"{line}; to settle: {a}" for a in _actions(d)] + [line])


def change(capacity) -> tuple[str | None, str | None]:
    """What the page's banner says to do on a line of its own: (the next command whole, None),
    or (None, each failed check's fix in words) where there is no command; (None, None) for a
    verdict, or where there is nothing to change."""
    d = capacity.decision
    if status_line(capacity, action=False)[0]:
        return None, None
    if d.next is not None:
        return d.next.command, None
    return None, next(iter(_actions(d)), None)


def next_plan(capacity):
    """The next command's plan (`engine.pricing.Plan`: what it fits and costs), None where there
    is no next command or it was not priced."""
    d = capacity.decision
    return d.next.cost if d.next is not None else None


def next_keywords(capacity) -> dict[str, Any]:
    """The next run's changes as `blocklab.api.run` keywords (the flags' names: a nested key
    "train.steps" is `steps`), lists where the config holds tuples; {} where there is none."""
    d = capacity.decision
    if d.next is None:
        return {}
    return {c.key.rsplit(".", 1)[-1]: list(c.new) if isinstance(c.new, tuple) else c.new
            for c in d.next.changes}  # fmt: skip


def next_lines(capacity, markdown: bool = False) -> list[str]:
    """The command to run next where the run reached no verdict, whole, and its cost (its plan,
    `priced`): for the terminal in lines of STATUS_WIDTH continued by a backslash (a shell reads
    them as one), for report.md in a code block; [] where there is none."""
    d = capacity.decision
    if d.next is None or (not markdown and d.next.command in status_line(capacity)[1]):
        return []  # none, or the status line holds it whole
    said = (
        "next command, with the changes the failed checks ask for" if d.failed
        else "next command, with the changes that would settle the checks at their edge"
        if d.edges
        else "next command, with the (teacher, seed) units a +-3% interval needs"
    )  # fmt: skip
    cost = f"its cost: {priced(d.next.cost)}"  # the terminal, report.md and the page alike
    if markdown:
        return [f"{said[0].upper()}{said[1:]}:", "", f"    {d.next.command}", "", cost]
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
    return [f"{said}:", *lines, line, cost]


def priced(plan) -> str:
    """A next command's plan in the words the page's banner gives it (`status.Banner.cost`), or
    why it has none."""
    if plan is None:
        return "not priced: the report was made without a store"
    return "; ".join(x for x in (plan.trials_said(), plan.cost_said(), plan.note) if x)

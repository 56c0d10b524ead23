"""The matched answer in words (`degree_sweep.analysis.matched`): the comparisons and the three
hypotheses (which the status line leads with: `status_line`), the answer table, the words of the
checks it rests on (`DETAIL`, which `capacity` words every check by), and the JSON's `answer`,
`versus` and `contrasts`."""

from __future__ import annotations

import math
from typing import Any

from blocklab.experiments.degree_sweep.analysis import hypotheses as hy
from blocklab.experiments.degree_sweep.analysis import matched as mt
from blocklab.experiments.degree_sweep.analysis import matched_checks as mc
from blocklab.experiments.degree_sweep.analysis.cells import EDGE
from blocklab.formatting import markdown_table

NAMES = {"h(d)": "the note's h(d)", "H_fd": "H_fd", "no_difference": "no difference"}
SHORT = {"m(d=2)": "m(d=2)", "m(d=4)": "m(d=4)", "m2/m4": "m_2/m_4"}


def _m(x: float) -> str:
    """A figure to 3 digits; "-" where there is none to show (NaN: too few teachers)."""
    return "-" if math.isnan(x) else f"{x:.3g}" if math.isfinite(x) else "inf"


def _band(lo: float, hi: float) -> str:
    """An interval, or "-" where it is unbounded (too few teachers to compute one from)."""
    if not (lo > 0 and math.isfinite(hi)):
        return "-"
    return f"[{_m(lo)}, {_m(hi)}]"


def hypotheses_said(answer: hy.Answer) -> list[str]:
    """Each hypothesis in a clause: where it is refuted, where consistent, where undecided."""
    out = []
    for name in hy.HYPOTHESES:
        by: dict[str, list[str]] = {}
        for e in answer.entries:
            h = e["hypotheses"].get(name)
            if h is not None:
                by.setdefault(h["word"], []).append(SHORT[e["quantity"]])
        if not by:
            continue
        if len(by) == 1:
            [(word, qs)] = by.items()
            every = "" if len(qs) < len(answer.entries) else " on every quantity"
            out.append(f"{NAMES[name]} {word}{every or ' on ' + ', '.join(qs)}")
            continue
        parts = [f"{w} on {', '.join(qs)}" for w, qs in by.items()]
        out.append(f"{NAMES[name]} {'; '.join(parts)}")
    return out


def said(v: dict[str, Any]) -> str:
    """One comparison in words: "d=2 beats d=3 per parameter by 11% [4%, 18%]"."""
    a, b, m, lo, hi = v["arm"], v["against"], v["m"], v["ci_low"], v["ci_high"]
    band = f"[{_pct(1 - hi)}, {_pct(1 - lo)}]" if v["word"] == "beats" else (
        f"[{_pct(lo - 1)}, {_pct(hi - 1)}]"
    )  # fmt: skip
    if v["word"] == "beats":
        return f"{a} beats {b} per parameter by {_pct(1 - m)} {band}"
    if v["word"] == "loses to":
        return f"{a} loses to {b} per parameter by {_pct(m - 1)} {band}"
    if v["word"] == "equivalent":
        return f"{a} and {b} equivalent per parameter within +-{v['margin']:.0%} (m = {m:.3g})"
    return f"{a} against {b} undecided (m = {m:.3g} [{lo:.3g}, {hi:.3g}])"


def _pct(x: float) -> str:
    return f"{100 * x:.2g}%" if abs(x) < 0.1 else f"{100 * x:.0f}%"


def versus_said(answer: hy.Answer) -> list[str]:
    """The comparisons, decided ones first (m_2 / m_4's decides the status)."""
    got = sorted(answer.versus, key=lambda v: v["word"] == "undecided")
    return [said(v) for v in got]


def _aligned(head: tuple[str, ...], body: list[tuple[str, ...]]) -> list[str]:
    """A terminal table: each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in [head, *body]]  # fmt: skip


def answer_lines(capacity, markdown: bool = False) -> list[str]:
    """The answer first in words, then its table (each quantity, its interval, the plain mean,
    the median, tau, the prediction interval, and each hypothesis's value and word)."""
    res = capacity.matched
    est, ans = res.estimates, res.answer
    how = "chosen by validation loss" if est.by_validation else (
        "chosen by training loss (this store has no per-chain validation losses)"
    )  # fmt: skip
    lines = [
        "answer at equal parameter counts (nominal), in words:",
        *[f"- {s}" for s in versus_said(ans)],
        *[f"- {s}" for s in hypotheses_said(ans)],
        "",
        f"matched contrast: per (teacher, seed) unit the mean over the counts where two arms "
        f"meet of log L_a - log L_b (test loss, the chain {how}); m = exp(contrast / alpha), "
        f"alpha = {_m(est.alpha)} (pooled within ladders, bootstrap se over teachers "
        f"{_m(est.alpha_se)}); primary: the {mt.TRIM:.0%} trimmed mean over teachers with "
        "Yuen's 95% interval; PI: 95% prediction interval for a new teacher; tau: the spread "
        "between teachers (log scale)",
    ]
    head = ("quantity", "m", "95% interval", "plain mean [95%]", "median", "tau", "95% PI",
            "teachers")  # fmt: skip
    body = [
        (SHORT[e["quantity"]], _m(e["estimate"]), _band(e["ci_low"], e["ci_high"]),
         f"{_m(e['plain'])} {_band(e['plain_ci_low'], e['plain_ci_high'])}", _m(e["median"]),
         _m(e["tau"]), _band(e["pi_low"], e["pi_high"]), str(e["teachers"]))
        for e in ans.entries
    ]  # fmt: skip
    hyp_head = ("quantity", *(NAMES[n] for n in hy.HYPOTHESES))
    hyp_body = [
        (SHORT[e["quantity"]], *(
            f"{h['predicted']:.3g}: {h['word']}" if (h := e["hypotheses"].get(n)) else "-"
            for n in hy.HYPOTHESES))
        for e in ans.entries
    ]  # fmt: skip
    for h, b in ((head, body), (hyp_head, hyp_body)):
        lines += ["", *(markdown_table(h, b) if markdown else _aligned(h, b))]
    where = []
    for q in mt.QUANTITIES:
        e = est.get(q)
        if e is None:
            continue
        at = ", ".join(
            f"{p}{'*' if p in e.interpolated else ''} ({lower}/{n} lower)"
            for p, lower, n in e.signs
        )
        where.append(f"- {e.arm} against {e.against} at {at}")
    missing = [q for q in mt.QUANTITIES if est.get(q) is None]
    lines += ["", "where the arms meet (block parameters; * the second arm interpolated in log-log "
              "between its two nearest rungs; units where the first arm's loss is the lower):",
              *where]  # fmt: skip
    if missing:
        lines.append(f"- never meet: {', '.join(SHORT[q] for q in missing)}: no matched contrast")
    return lines


def _robustness(c: mc.Robustness) -> str:
    parts = [
        f"{SHORT[q]} from {v} moved {s:+.3g} [{lo:+.3g}, {hi:+.3g}] (allowed +-{a:.3g})"
        for q, v, s, lo, hi, a in c.shifts
    ]
    text = (
        f"each estimand (log m) recomputed from the fits at half their iterations and from the "
        f"best of half the chains moves by less than {mc.ROBUST_SHARE:g} of its half width, the "
        f"whole band ({c.method} of the teachers' shifts): " + "; ".join(parts)
    )
    if c.unmeasured:
        text += f"; not measured: {'; '.join(c.unmeasured)}"
    if not c.shifts:
        text = "nothing to recompute: " + "; ".join(c.unmeasured)
    return text


def _control(c: mc.NegativeControl) -> str:
    if not c.ran:
        return f"not run: no '{mt.CONTROL}' arm (--control adds it); the answer cannot pass it"
    return (
        f"{mt.CONTROL} against d=3 over {c.teachers} teachers: m = {_m(c.m)} "
        f"{_band(c.low, c.high)} (plain {_band(c.plain_low, c.plain_high)}); must hold 1"
    )


def _clustered(c: mc.Converged) -> str:
    lo, hi = c.band
    return (
        f"{c.count} of {c.rungs} rungs certified ({c.share:.1%}, {c.method} over {c.ladders} "
        f"ladders [{lo:.1%}, {hi:.1%}]; the last doubling gained < {c.tol:g}; needs >= "
        f"{mc.CONVERGED_SHARE:.0%} with the whole band)"
    )


def _by_design(c: mc.ByDesign) -> str:
    return c.why


# the words of the checks the answer rests on, for `capacity.DETAIL`
DETAIL = {
    mc.Robustness: _robustness,
    mc.NegativeControl: _control,
    mc.ByDesign: _by_design,
    mc.Converged: _clustered,
}


def json(capacity) -> dict[str, Any]:
    """`answer`, `versus` and `contrasts` of the JSON contract (empty where no pair meets)."""
    res = capacity.matched
    if res is None:
        return {"answer": [], "versus": [], "contrasts": []}
    est = res.estimates
    return {
        "answer": res.answer.entries,
        "versus": res.answer.versus,
        "contrasts": [c.json() for c in est.contrasts],
        "matched": {
            "alpha": est.alpha,
            "alpha_se": est.alpha_se,
            "by_validation": est.by_validation,
            "trim": mt.TRIM,
            "teachers_needed": res.teachers_needed,
            "control": None if est.control is None else {
                "m": est.control.m, "ci_low": est.control.low, "ci_high": est.control.high},
            "at_edge": [c.name for c in res.checks if c.outcome == EDGE],
        },
    }  # fmt: skip

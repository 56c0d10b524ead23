"""Reports of a sweep: a terminal table, a Markdown report with figures, and a JSON dict.

Every number comes from the rows (one per finished trial) or from blocklab.theory; nothing else.
"""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from blocklab import plots
from blocklab.analysis.capacity import PREDICTED_EFFECT, REFERENCE, predicted_multiplier
from blocklab.analysis.stats import TEST, compare, layer_degrees, ranking_vs_theory, summarize
from blocklab.theory import degree_proxy_log10, h, layers_at_budget, optimal_degree

COLUMNS = (
    "task",
    "budget",
    "arm",
    "depth",
    "width",
    "block params",
    "embed+readout",
    "test metric",
    "diverged",
    "steps to threshold",
)
NUMERIC = {
    "budget",
    "depth",
    "width",
    "block params",
    "embed+readout",
    "diverged",
}  # right-aligned in the terminal


def _f(x):
    return "-" if x is None or not math.isfinite(x) else f"{x:.4g}"


def _metric_cell(s):
    if s.n == 0:
        return f"{s.metric}: no finished seed"
    spread = f" ± {_f(s.std)} [{_f(s.lo)}, {_f(s.hi)}]" if s.n > 1 else ""
    return f"{s.metric} {_f(s.mean)}{spread} (n={s.n})"


def _steps_cell(s):
    if s.n == 0:
        return "-"
    reached = f"reached {s.n_reached}/{s.n}"
    if s.n_reached == 0:
        return f"never ({reached})"
    spread = f" ± {_f(s.steps_std)}" if s.n_reached > 1 else ""
    return f"{_f(s.steps_mean)}{spread} ({reached})"


def _cells(s):
    return (
        s.task,
        str(s.budget),
        s.arm,
        str(s.depth),
        str(s.width),
        str(s.block_params),
        str(s.other_params),
        _metric_cell(s),
        f"{s.n_diverged}/{s.n_seeds}",
        _steps_cell(s),
    )


def table(summaries):
    """Fixed-width text table, one line per (task, budget, arm)."""
    body = [_cells(s) for s in summaries]
    widths = [max(len(r[i]) for r in [COLUMNS, *body]) for i in range(len(COLUMNS))]

    def line(cells):
        return "  ".join(
            c.rjust(w) if name in NUMERIC else c.ljust(w)
            for name, c, w in zip(COLUMNS, cells, widths, strict=True)
        ).rstrip()

    return "\n".join([line(COLUMNS), "  ".join("-" * w for w in widths), *map(line, body)])


def markdown_table(header, body):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(cells) + " |" for cells in body]


def _order(arms, values):
    # "a > b = c": equal predicted scores (h(2) == h(4) exactly) are shown as ties, not an order.
    text = arms[0]
    for i in range(1, len(arms)):
        tie = math.isclose(values[i - 1], values[i], rel_tol=1e-12)
        text += (" = " if tie else " > ") + arms[i]
    return text


def _question():
    return (
        "Seed 000 asks: at a fixed parameter budget B, which polynomial degree d of a building "
        "block is most expressive? A degree-d layer costs d N_dx parameters (eq. 4), so B buys "
        "B / (d N_dx) layers and a network polynomial of degree (d^(1/d))^(B / N_dx) (eq. 17). "
        f"That is largest where h(d) = ln d / d is (eq. 5): at d = e = {optimal_degree():.4f}, "
        f"so d = 3 among integers (h(3) = {h(3):.4f} > h(2) = h(4) = {h(2):.4f}). Each arm below "
        "is trained at the same block budget over several seeds: integer and fractional "
        "degrees, mixed stacks (per-layer degrees in the label, their average as the degree) and "
        "an mlp control; the verdicts state which differences the seeds support."
    )


def _theory_section(summaries, rankings):
    lines = [
        "## Theory beside measurement",
        "",
        "h of each arm (for a mixed stack [d_1, ..., d_L]: sum ln d_i / sum d_i, the "
        "per-parameter log-degree of eq. 16-17, which is not h of the average degree):",
        "",
    ]
    arms = {s.arm: s.degree for s in summaries if s.degree is not None}
    body = [
        (
            arm,
            ", ".join(f"{x:g}" for x in layer_degrees(arm, d)),
            f"{d:.4g}",
            f"{h(layer_degrees(arm, d)):.5f}",
        )
        for arm, d in sorted(arms.items(), key=lambda kv: (kv[1], kv[0]))
    ]
    lines += markdown_table(("arm", "layer degrees", "degree", "h"), body)
    lines += [
        "",
        "Degree proxy of seed 000 eq. 17 at each budget, with N_dx = width^2 at the "
        "width the arm ran at; layers B / (d N_dx) of eq. 4 beside the depth it ran at:",
        "",
    ]
    body = {}  # tasks that ran an arm at the same shape share a line
    for s in summaries:
        if s.degree is not None and s.width > 0:
            n_dx = s.width**2
            body.setdefault(
                (str(s.budget), s.arm, str(s.width), str(s.depth)),
                (
                    f"{layers_at_budget(s.degree, s.budget, n_dx):.3g}",
                    f"{degree_proxy_log10(layer_degrees(s.arm, s.degree), s.budget, n_dx):.4g}",
                ),
            )
    lines += markdown_table(
        ("budget", "arm", "width", "depth", "layers (eq. 4)", "log10 degree (eq. 17)"),
        [k + v for k, v in body.items()],
    )
    lines += [
        "",
        "Ranking predicted by h (best first) and measured by mean test metric, with "
        "Spearman's rank correlation (rho > 0: the measurement follows the theory):",
        "",
    ]
    for r in rankings:
        h_of = dict(zip(r.arms, r.h, strict=True))
        rho = (
            f"rho = {r.rho:.3g} over {len(r.arms)} arms"
            if math.isfinite(r.rho)
            else f"rho undefined ({len(r.arms)} arms or a constant ranking)"
        )
        lines.append(
            f"- {r.task}, budget {r.budget}: predicted "
            f"{_order(r.predicted, [h_of[a] for a in r.predicted])}; "
            f"measured {' > '.join(r.measured)}; {rho}"
        )
    return lines


def check_lines(capacity):
    """The design checks, one line each, and the verdict or why there is none."""
    lines = [
        f"- {'passed' if c.passed else 'FAILED'}: {c.name}: {c.detail}" for c in capacity.checks
    ]
    if capacity.verdict is not None:
        return lines, capacity.verdict
    failed = [c for c in capacity.checks if not c.passed]
    if failed:
        why = "; ".join(f"design check failed: {c.name}: {c.detail}" for c in failed)
    else:
        why = f"no scaling fit for the reference arm {REFERENCE} (is it among the degrees?)"
    return lines, f"{why} — no verdict"


def _ci(pair):
    lo, hi = pair
    return f"[{_f(lo)}, {_f(hi)}]"


def _mult(x):
    return "inf" if x is not None and math.isinf(x) else _f(x)


def capacity_section(capacity):
    """Markdown: design checks, verdict, per-budget losses, scaling fits, efficiency vs d = 3."""
    fit = capacity.fit
    checks, verdict = check_lines(capacity)
    lines = ["## Design checks", "", *checks, "", "## Verdict", "", verdict, ""]
    lines += [
        "## Test loss per budget",
        "",
        "Mean over (teacher, seed) with std and 95% Student-t interval; plateaued: share of "
        "trials whose smoothed validation loss had stopped falling (see the design checks). "
        "With several teachers, the spread within a teacher (mean std over seeds) and between "
        "teachers (std of their means) are shown apart.",
        "",
    ]
    body = []
    for arm, by_b in capacity.stats.items():
        for b, st in by_b.items():
            body.append(
                (
                    arm,
                    str(b),
                    str(st["params"]),
                    f"{_f(st['mean'])} ± {_f(st['std'])}",
                    f"[{_f(st['ci_low'])}, {_f(st['ci_high'])}]",
                    f"{st['plateaued_fraction']:.0%}",
                    _f(st["within_teacher_std"]),
                    _f(st["between_teacher_std"]),
                )
            )
    header = ("arm", "budget", "params", "test loss", "95% CI", "plateaued", "within", "between")
    lines += markdown_table(header, body)
    lines += [
        "",
        "## Scaling fits",
        "",
        "Per arm, L(P) = L_inf + a P^-alpha fit by least squares on log loss to the per-budget "
        "means against the actual parameter counts (SciPy); intervals: "
        f"{fit.level:.0%} bootstrap percentiles over {fit.n_boot} draws that resample teachers, "
        "then seeds within them, the same draws for every arm (paired).",
        "",
    ]
    body = [
        (arm, _f(f.L_inf), _ci(f.ci["L_inf"]), _f(f.a), _f(f.alpha), _ci(f.ci["alpha"]))
        for arm, f in fit.fits.items()
    ]
    lines += markdown_table(("arm", "L_inf", "95% CI", "a", "alpha", "95% CI"), body)
    lines += ["", "![test loss vs budget](scaling.png)", ""]
    if fit.reference is None:
        return lines + [f"No parameter-efficiency multipliers: {REFERENCE} was not fitted.", ""]
    ref = fit.efficiency[fit.reference]
    lines += [
        "## Parameter efficiency against d = 3",
        "",
        f"The loss {fit.reference} reaches at P_ref = {ref.ref_params:.0f} parameters (the middle "
        f"of its measured log range) is {ref.target_loss:.4g}. For each arm: the parameters its "
        "fitted curve needs for that loss, divided by P_ref (above 1: it needs more than "
        f"{fit.reference}; inf: its fitted floor L_inf lies above the target). Seed 000's "
        "prediction beside it: equal degree proxy (eq. 17) means B_X h(X) = B_3 h(3), so the "
        "multiplier is h(3) / h(X). Measurement and prediction are never fitted to each other.",
        "",
    ]
    body = []
    for arm, e in fit.efficiency.items():
        pred = predicted_multiplier(arm, capacity.degrees.get(arm))
        body.append(
            (
                arm,
                _mult(e.multiplier),
                f"[{_mult(e.ci_low)}, {_mult(e.ci_high)}]",
                "-" if pred is None else f"{pred:.4f}",
                "yes" if e.extrapolated else "no",
            )
        )
    lines += markdown_table(("arm", "multiplier", "95% CI", "predicted", "extrapolated"), body)
    res = fit.resolution
    lines += [
        "",
        (
            f"Resolution: the intervals' median half-width is {res:.3g} (in multiplier units); "
            f"the predicted difference between d = 3 and d = 2 or 4 is {PREDICTED_EFFECT:.3f}. "
            + (
                "This run can resolve it."
                if res < PREDICTED_EFFECT / 2
                else "This run cannot resolve it: more seeds, teachers or budgets narrow the "
                "intervals (roughly as one over the square root of the number of units)."
            )
            if res is not None
            else "Resolution: no finite interval."
        ),
        "",
        "![parameter efficiency](efficiency.png)",
        "",
    ]
    return lines


def write_report(out_dir, rows, *, title, config, provenance, alpha=0.05, capacity=None):
    """Write report.md and its figures into out_dir; return the report's path. With `capacity`
    (blocklab.analysis.capacity) the design checks, verdict, fits and efficiency lead."""
    if not rows:
        raise ValueError("no finished trials to report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summaries = summarize(rows)
    verdicts = compare(rows, alpha)
    rankings = ranking_vs_theory(summaries)
    plots.metric_vs_degree(summaries, out / "metric_vs_degree.png")
    plots.learning_curves(rows, out / "learning_curves.png")
    plots.ranking_vs_theory(summaries, out / "ranking_vs_theory.png")
    if capacity is not None:
        plots.scaling_curves(capacity, out / "scaling.png")
        if capacity.fit.efficiency:
            plots.efficiency(capacity, out / "efficiency.png")

    lines = [f"# {title}", "", "## Question", "", _question(), ""]
    if capacity is not None:
        lines += capacity_section(capacity)
    lines += [
        "## Paired tests per budget",
        "",
        f"Test: {TEST} over the comparisons of the best arm with each other arm within a "
        f"task and budget, pairing (teacher, seed)s that both arms finished; alpha = {alpha:g}; "
        "the p-values shown are Holm-adjusted.",
        "",
    ]
    lines += [f"- {v.claim} ({v.n_seeds} pairs)" for v in verdicts]
    lines += [
        "",
        "## Results",
        "",
        "Test metric over the seeds that finished (mean ± std, 95% "
        "Student-t interval); diverged seeds are excluded and counted.",
        "",
    ]
    lines += markdown_table(COLUMNS, [_cells(s) for s in summaries])
    lines += [""] + _theory_section(summaries, rankings)
    lines += [
        "",
        "![test metric vs degree](metric_vs_degree.png)",
        "",
        "![learning curves](learning_curves.png)",
        "",
        "![ranking vs theory](ranking_vs_theory.png)",
        "",
        "## Configuration",
        "",
        "```json",
        json.dumps(config, indent=2, default=str),
        "```",
        "",
        "## Provenance",
        "",
    ]
    lines += [f"- {key}: {value}" for key, value in provenance.items()]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def plain(x):
    # JSON has no NaN or Infinity: a missing statistic is null.
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return x


def to_json(rows, alpha=0.05):
    """Summaries, verdicts and rankings as JSON-serializable dicts (NaN -> None)."""
    summaries = summarize(rows)
    return plain(
        {
            "summaries": [dataclasses.asdict(s) for s in summaries],
            "verdicts": [dataclasses.asdict(v) for v in compare(rows, alpha)],
            "ranking": [dataclasses.asdict(r) for r in ranking_vs_theory(summaries)],
            "test": TEST,
            "alpha": alpha,
        }
    )

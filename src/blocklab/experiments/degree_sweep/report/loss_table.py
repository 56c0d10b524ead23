"""The degree sweep's per-cell table of report.md (`loss_table`): each (arm, budget) cell's
nominal and functional parameter counts, its test loss over (teacher, seed) units, how far its
trials got, and the spread within and between teachers (`analysis.cells.budget_stats`)."""

import math

from blocklab.experiments.degree_sweep.report.intervals import cell
from blocklab.formatting import markdown_table, short, with_spread
from blocklab.formatting import short as fmt

# how far the trials got: Adam runs by their plateau, second-order fits by their training loss,
# certificates and restarts (the plateau is not their criterion)
TRAINED = ("plateaued",)
FITTED = ("train loss", "median restart", "certified", "restart spread")


def _share(x: float, digits: int = 0) -> str:
    return f"{x:.{digits}%}" if math.isfinite(x) else "-"


def _trained(st, second_order: bool) -> tuple[str, ...]:
    if not second_order:
        return (_share(st["plateaued_fraction"]),)
    return (
        fmt(st["train_mean"]),
        fmt(st["restart_median_mean"]),
        _share(st["converged_fraction"]),
        _share(st["restart_spread"], 1),
    )


def _none(stats) -> str:
    """Why a cell shows "-" for its std and interval, said once where some cell does."""
    one = any(not math.isfinite(st["std"]) for by_b in stats.values() for st in by_b.values())
    return "; a cell of one (teacher, seed) unit has neither: -" if one else ""


def loss_table(stats, second_order: bool) -> list[str]:
    """report.md's "Test loss per budget": per cell its counts, test loss over units (mean and
    geometric mean) and how far its trials got."""
    if second_order:
        trained = (
            "train loss: the final training MSE of each trial's best restart, mean over trials; "
            "median restart: the same of each trial's median restart; certified: share of trials "
            "whose certificate holds (the fit's last doubling gained less than --converge-tol; "
            "the `converged` design check reads another tolerance, the loss slack of the "
            "resolution the run claims, so its share can differ); restart spread: (median "
            "restart - best) / best, mean over trials."
        )
    else:
        trained = (
            "plateaued: share of trials that had stopped improving (the criterion is in the "
            "design checks)."
        )
    lines = [
        "## Test loss per budget",
        "",
        "Mean over (teacher, seed) with std, and the geometric mean with the 95% Student-t "
        f"interval of the log loss mapped back (never below zero{_none(stats)}); {trained} "
        "With several teachers, the spread within a teacher (mean std over seeds) and between "
        "teachers (std of their means) are shown apart.",
        "",
    ]
    body = [
        (
            arm,
            str(b),
            str(st["block_params"]),
            str(st.get("functional_params") or "-"),
            f"{fmt(st['mean'])} ± {fmt(st['std'])}",
            f"{fmt(st['gmean'])} {cell(st['g_low'], st['g_high'], fmt)}",
            *_trained(st, second_order),
            fmt(st["within_teacher_std"]),
            fmt(st["between_teacher_std"]),
        )
        for arm, by_b in stats.items()
        for b, st in by_b.items()
    ]
    header = (
        ("arm", "budget", "params", "functional", "test loss", "geometric mean [95% CI]")
        + (FITTED if second_order else TRAINED)
        + ("within", "between")
    )
    return lines + markdown_table(header, body)


def _metric_cell(s, named=True):
    name = f"{s.metric} " if named else ""
    if s.n == 0:
        return f"{s.metric}: no finished seed"
    if s.n == 1:
        return f"{name}{short(s.mean)} (n=1)"
    # every metric here is a loss (>= 0) or an accuracy (in [0, 1])
    cap = 1.0 if s.metric == "accuracy" else None
    return f"{name}{with_spread(s.mean, s.std, s.lo, s.hi, 0.0, cap)} (n={s.n})"


def table(summaries) -> str:
    """The terminal's table, one line per (budget, arm), in 100 columns: the run's task and
    metric named once above it, and report.md's other columns (embedding and readout, steps to
    threshold) left to the report and the page."""
    tasks = list(dict.fromkeys(s.task for s in summaries))
    metrics = list(dict.fromkeys(s.metric for s in summaries))
    several = len(tasks) > 1 or len(metrics) > 1  # then each row names its own
    metric = "metric" if several else metrics[0]
    head = ("task",) * several + ("budget", "arm", "depth", "width", "params", f"test {metric}")
    head += ("diverged",)
    body = [
        (s.task,) * several
        + (str(s.budget), s.arm, str(s.depth), str(s.width), str(s.block_params))
        + (_metric_cell(s, named=several), f"{s.n_diverged}/{s.n_seeds}")
        for s in summaries
    ]
    numeric = {"budget", "depth", "width", "params", "diverged"}
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

    def line(cells):
        return "  ".join(
            c.rjust(w) if name in numeric else c.ljust(w)
            for name, c, w in zip(head, cells, widths, strict=True)
        ).rstrip()

    title = f"{', '.join(tasks)}: test {', '.join(metrics)}, mean ± std [95% interval] over seeds"
    rule = "  ".join("-" * w for w in widths)
    return "\n".join([title, "", line(head), rule, *map(line, body)])

"""Figures of the degree sweep: metric vs degree, learning curves, and the measured ranking
beside h(d) (its capacity figures are in `curves`).

Each function takes rows or summaries (`analysis.arms`) and a path, writes a PNG and returns
the path. Diverged seeds and missing values are skipped, never drawn as zeros.
"""

import math
from collections import defaultdict
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from blocklab.reports.figures import arm_color, arm_colors, neighbour_runs
from blocklab.theory import h, layer_degrees, optimal_degree

DPI = 120
# fits whose stopping rule is a certificate, not a loss threshold (`fitting.converge`): a loss
# threshold and the steps to reach it mean nothing for them
SECOND_ORDER = ("lm", "lbfgs")


def second_order(row) -> bool:
    """Whether a row's trial was a second-order fit (`_trials.row`'s `optimizer`)."""
    return row.get("optimizer") in SECOND_ORDER


def _is_mix(arm):
    return arm.startswith("mix")


def _better(higher_is_better):
    return "higher is better" if higher_is_better else "lower is better"


def colors(keys):
    """Colours by position, for series that are not arms (budgets); an arm's colour is its own
    on every figure (`reports.figures.arm_color`)."""
    cmap = plt.get_cmap("tab10")
    return {k: cmap(i % 10) for i, k in enumerate(keys)}


METRIC_LABELS = {
    "mse": "test MSE (squared error per output)",
    "accuracy": "test accuracy (fraction correct)",
}


def metric_label(metric):
    """The axis label of a test metric (`tasks.base.Task.metric`) with its unit."""
    return METRIC_LABELS.get(metric, f"test {metric} (units of {metric})")


def loss_unit(tasks):
    """The unit of the training loss of these tasks (`tasks.base.score`): MSE for regression
    (also when scored by accuracy), cross-entropy in nats per target for classification."""
    from blocklab.errors import UserError
    from blocklab.tasks import TASKS

    units = {"regression": "MSE", "classification": "cross-entropy, nats"}
    found = set()
    for task in tasks:
        try:
            found.add(units[TASKS.get(task).kind])
        except (UserError, KeyError, AttributeError):
            found.add("MSE or cross-entropy in nats")
    return found.pop() if len(found) == 1 else "MSE or cross-entropy in nats"


def save(fig, path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _mark_e(ax, text=True):
    ax.axvline(optimal_degree(), color="0.4", linestyle=":", linewidth=1)
    if text:
        ax.text(optimal_degree(), 1.0, " d = e", transform=ax.get_xaxis_transform(), va="top",
                ha="left", fontsize=8, color="0.3")  # fmt: skip


def _degree_xlim(ax, degrees):
    # always show d = 2 .. e, so a single arm still sits in context
    degrees = [*degrees, 2.0, optimal_degree()]
    ax.set_xlim(min(degrees) - 0.3, max(degrees) + 0.3)


def _band(s, bands) -> tuple[float, float]:
    """The interval the analysis chose to draw for `s` (`analysis.summary.drawn_interval`)."""
    return bands[(s.task, s.budget, s.arm)]


def _yerr(summaries, bands):
    # Asymmetric bars from the interval; a single seed has no interval, so no bar.
    bands = [_band(s, bands) for s in summaries]
    lo = [
        s.mean - b[0] if math.isfinite(b[0]) else 0.0 for s, b in zip(summaries, bands, strict=True)
    ]
    hi = [
        b[1] - s.mean if math.isfinite(b[1]) else 0.0 for s, b in zip(summaries, bands, strict=True)
    ]
    return [lo, hi]


def _pure_and_mixed(group):
    """The arms of a uniform degree, in degree order, and the mixed stacks (placed at their
    average degree); an arm without a degree is in neither."""
    pure = sorted(
        (s for s in group if s.degree is not None and not _is_mix(s.arm)), key=lambda s: s.degree
    )
    mixed = [s for s in group if s.degree is not None and _is_mix(s.arm)]
    return pure, mixed


# a mixed stack is an open square off the line: its average degree is not a point on the curve
MIXED = dict(marker="s", markerfacecolor="none", linestyle="none")


def metric_vs_degree(summaries, bands, path):
    """Mean test metric (95% interval bars) vs degree, one panel per task, one line per budget;
    `bands` maps each (task, budget, arm) to the interval drawn."""
    summaries = [s for s in summaries if math.isfinite(s.mean)]
    tasks = sorted({s.task for s in summaries}) or ["(no finished trials)"]
    fig, axes = plt.subplots(
        1, len(tasks), figsize=(5.5 * len(tasks), 4.2), squeeze=False, layout="constrained"
    )
    color = colors(sorted({s.budget for s in summaries}))
    for ax, task in zip(axes[0], tasks, strict=True):
        mine = [s for s in summaries if s.task == task]
        # the uniform degrees that ran in this panel: a line joins only neighbours among them
        ran = sorted({s.degree for s in _pure_and_mixed(mine)[0]})
        for budget in sorted({s.budget for s in mine}):
            at = [s for s in mine if s.budget == budget]
            _budget_line(ax, at, budget, color[budget], bands, ran)
        _degree_xlim(ax, [s.degree for s in mine if s.degree is not None])
        _mark_e(ax)
        _label_metric_panel(ax, task, mine)
    return save(fig, path)


def neighbours(pure, ran) -> list[list]:
    """`pure` (sorted by degree) cut into runs of neighbours in `ran`, the degrees that ran in
    the panel: where a degree between two points did not run at this budget, no line may pass
    through it (it would draw a value nothing measured)."""
    return [[pure[i] for i in run] for run in neighbour_runs([s.degree for s in pure], ran)]


def _budget_line(ax, at, budget, c, bands, ran):
    """One budget's arms: the uniform ones as points, a line joining only neighbouring degrees
    that both ran (`neighbours`), mixed stacks as open squares, an arm without a degree as a
    horizontal reference level with its interval as a band."""
    pure, mixed = _pure_and_mixed(at)
    label = f"B = {budget:,}"
    if pure:
        x, y, yerr = [s.degree for s in pure], [s.mean for s in pure], _yerr(pure, bands)
        ax.errorbar(x, y, yerr=yerr, color=c, marker="o", capsize=3, ls="none", label=label)
        for run in neighbours(pure, ran):
            if len(run) > 1:
                ax.plot([s.degree for s in run], [s.mean for s in run], color=c)
    if mixed:
        x, y, yerr = [s.degree for s in mixed], [s.mean for s in mixed], _yerr(mixed, bands)
        ax.errorbar(x, y, yerr=yerr, color=c, capsize=3, label=None if pure else label, **MIXED)
    for s in at:
        if s.degree is None:
            ax.axhline(s.mean, color=c, linestyle="--", linewidth=1)
            lo, hi = _band(s, bands)
            if math.isfinite(lo):
                ax.axhspan(lo, hi, color=c, alpha=0.12, linewidth=0)


def _label_metric_panel(ax, task, mine):
    metric = mine[0].metric if mine else "metric"
    better = f" ({_better(mine[0].higher_is_better)})" if mine else ""
    ax.set(
        title=f"{task}{better}",
        xlabel="degree d (polynomial degree; mixed stacks: average)",
        ylabel=f"{metric_label(metric)},\nmean and 95% CI"
        + (" (bootstrap: stays > 0)" if metric == "mse" else ""),
    )
    handles, _ = ax.get_legend_handles_labels()
    # the legend names only the kinds of arm that ran in this panel
    if any(s.degree is not None and _is_mix(s.arm) for s in mine):
        handles.append(Line2D([], [], color="0.4", label="mixed stack", **MIXED))
    if any(s.degree is None for s in mine):
        label = "non-polynomial (mlp), band: CI"
        handles.append(Line2D([], [], color="0.4", linestyle="--", label=label))
    ax.legend(handles=handles, fontsize=8)


def _mean_curve(trials):
    """Mean, min and max val loss across seeds on the longest seed's steps (nan where none)."""
    steps = np.asarray(max((r["curve_step"] for r in trials), key=len), dtype=float)
    curves = []
    for r in trials:
        x = np.asarray(r["curve_step"], dtype=float)
        y = np.array([np.nan if v is None else v for v in r["curve_val_loss"]], dtype=float)
        y[~np.isfinite(y)] = np.nan
        if len(x) != len(steps) or not np.array_equal(x, steps):
            # nan outside a seed's own steps: a shorter run must not be extended flat; but a
            # second-order fit that stopped early stopped at its certificate and keeps its
            # parameters, so its loss holds to the end (else the mean jumps where it stops)
            right = y[-1] if second_order(r) and len(y) else np.nan
            y = np.interp(steps, x, y, left=np.nan, right=right) if len(x) else steps * np.nan
        curves.append(y)
    curves = np.vstack(curves)
    ok = np.isfinite(curves).any(axis=0)
    with np.errstate(all="ignore"):
        mean, lo, hi = (np.full(len(steps), np.nan) for _ in range(3))
        mean[ok] = np.nanmean(curves[:, ok], axis=0)
        lo[ok], hi[ok] = np.nanmin(curves[:, ok], axis=0), np.nanmax(curves[:, ok], axis=0)
    return steps, mean, lo, hi


def _curves_by_panel(rows):
    """The finished seeds' rows per (task, budget) and arm, each arm's degree, and the count of
    diverged seeds per (task, budget, arm)."""
    groups = defaultdict(lambda: defaultdict(list))
    degree, diverged = {}, defaultdict(int)
    for r in sorted(rows, key=lambda r: r["seed"]):
        key = (r["task"], int(r["budget"]))
        degree[r["arm"]] = r["degree"]
        if r["status"] != "done":
            diverged[(*key, r["arm"])] += 1
        elif len(r["curve_step"]):
            groups[key][r["arm"]].append(r)
    return groups, degree, diverged


def learning_curves(rows, path):
    """Validation loss vs step, one panel per (task, budget), one line per arm (done seeds only)."""
    groups, degree, diverged = _curves_by_panel(rows)
    arms = sorted(degree, key=lambda a: (degree[a] is None, degree[a] or 0.0, a))
    color = arm_colors(arms)
    keys = sorted(groups) or [("(no finished trials)", 0)]
    ncols = min(3, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(5 * ncols + 1.5, 3.8 * nrows), squeeze=False, layout="constrained"
    )
    for ax in axes.flat[len(keys) :]:
        ax.set_visible(False)
    shown = {}
    # a second-order fit counts iterations (each a full-batch solve), Adam optimizer steps
    fitted = bool(rows) and all(second_order(r) for r in rows)
    xlabel = "iteration (iterations)" if fitted else "optimizer step (steps)"
    for ax, key in zip(axes.flat, keys, strict=False):
        shown |= _curve_panel(ax, groups[key], arms, color)
        lost = ", ".join(f"{a} ({n})" for (t, b, a), n in diverged.items() if (t, b) == key)
        lost = f"\ndiverged seeds (not drawn): {lost}" if lost else ""
        ax.set_title(f"{key[0]}, B = {key[1]:,}{lost}", fontsize=10)
        ax.set(xlabel=xlabel, ylabel=f"validation loss ({loss_unit([key[0]])})")
    if shown:  # arms keep one colour across panels, so one legend serves them all
        fig.legend(handles=list(shown.values()), loc="outside right upper", fontsize=8)
    fig.suptitle("mean of finished seeds; band: min to max", fontsize=10)
    return save(fig, path)


def _curve_panel(ax, by_arm, arms, color):
    """One (task, budget): each arm's mean curve with its min-max band, and the loss threshold
    where an Adam run has one (a second-order fit stops at its certificate: no threshold).
    Returns the lines drawn, by arm, for the figure's legend."""
    shown, positive, threshold = {}, True, None
    for arm in arms:
        trials = by_arm.get(arm)
        if not trials:
            continue
        if not second_order(trials[0]):
            threshold = trials[0]["threshold"]
        steps, mean, lo, hi = _mean_curve(trials)
        shown[arm] = ax.plot(steps, mean, color=color[arm], label=arm)[0]
        ax.fill_between(steps, lo, hi, color=color[arm], alpha=0.15, linewidth=0)
        positive &= bool(np.all(lo[np.isfinite(lo)] > 0))
    if threshold is not None:
        shown["threshold"] = ax.axhline(
            threshold, color="0.3", linestyle=":", linewidth=1, label="loss threshold"
        )
        positive &= threshold > 0
    if positive and by_arm:  # a log axis only where nothing drawn is zero or below
        _plain_log_y(ax)
    return shown


def _plain_log_y(ax):
    ax.set_yscale("log")
    # 0.3, not 3 x 10^-1; of the minor ticks only 2 and 5 times a power of ten are labelled:
    # all eight crowd
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    sparse = FuncFormatter(lambda v, _: f"{v:g}" if v > 0 and f"{v:.0e}"[0] in "25" else "")
    ax.yaxis.set_minor_formatter(sparse)


def _normalized(group):
    # Score / best score (or best / score when lower is better): 1 is the best arm, higher is
    # better, comparable across budgets. Needs positive means, true of mse and accuracy.
    hib = group[0].higher_is_better
    means = [s.mean for s in group]
    if min(means) <= 0:
        return None
    best = max(means) if hib else min(means)
    return [m / best if hib else best / m for m in means]


def ranking_vs_theory(summaries, path):
    """Left: h(d) with the arms' degrees marked. Right: measured metric relative to the best arm."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    _theory_panel(left, summaries)
    _relative_panel(right, summaries)
    return save(fig, path)


def _theory_panel(ax, summaries):
    """h(d) with each arm marked at its degree."""
    grid = np.linspace(1.5, 5.0, 200)
    ax.plot(grid, [h(d) for d in grid], color="0.2", label="h(d) = ln d / d")
    arms = {s.arm: s.degree for s in summaries if s.degree is not None}
    for arm, d in sorted(arms.items(), key=lambda kv: kv[1]):
        mixed = _is_mix(arm)
        # a mixed stack's h is that of its layers, not of its average degree
        y = h(layer_degrees(arm, d))
        c = arm_color(arm)
        marker = dict(marker="s" if mixed else "o", markerfacecolor="none" if mixed else c)
        ax.plot(d, y, linestyle="none", color=c, label=arm, **marker)
        offset = (4, -10 if mixed else 5)
        ax.annotate(arm, (d, y), textcoords="offset points", xytext=offset, fontsize=8)
    _mark_e(ax, text=False)
    ax.set(
        title="theory: h(d) = ln d / d (higher is better)",
        xlabel="degree d (polynomial degree)",
        ylabel="h(d) = ln d / d (dimensionless)",
    )
    handles = [
        Line2D([], [], color="0.2", label="h(d) = ln d / d"),
        Line2D([], [], color="0.4", linestyle=":", label="d = e, the maximum"),
    ]
    # the legend names only the kinds of arm that ran (each arm in its colour, named beside it)
    if any(not _is_mix(a) for a in arms):
        handles.append(Line2D([], [], color="0.4", marker="o", ls="none", label="uniform arm"))
    if any(_is_mix(a) for a in arms):
        mixed = "mixed stack: sum ln d_i / sum d_i"
        handles.append(Line2D([], [], color="0.4", label=mixed, **MIXED))
    ax.legend(handles=handles, fontsize=8, loc="lower center")


def _relative_panel(ax, summaries):
    """Each (task, budget)'s arms relative to its best arm, one line each."""
    groups = defaultdict(list)
    for s in summaries:
        if math.isfinite(s.mean):
            groups[(s.task, s.budget)].append(s)
    # an arm alone at its budget is its own best, 1 by construction: nothing to compare
    groups = {k: g for k, g in groups.items() if len(g) > 1}
    color = colors(sorted(groups))
    ran = sorted({s.degree for s in _pure_and_mixed(summaries)[0]})
    for key, group in sorted(groups.items()):
        scores = _normalized(group)
        if scores is not None:
            by_arm = dict(zip((s.arm for s in group), scores, strict=True))
            _relative_line(ax, group, by_arm, f"{key[0]}, B = {key[1]:,}", color[key], ran)
    if not groups:
        ax.text(0.5, 0.5, "no budget ran two arms or more:\nnothing to compare",
                transform=ax.transAxes, ha="center", va="center", fontsize=9)  # fmt: skip
    _degree_xlim(ax, [s.degree for s in summaries if s.degree is not None])
    _mark_e(ax)
    ax.set(
        title="measured, relative to the best arm (higher is better)",
        xlabel="degree d (polynomial degree; mixed stacks: average)"
        + ("\ndashed line: mlp" if any(s.arm == "mlp" for g in groups.values() for s in g) else ""),
        ylabel="score relative to the best arm (ratio):\nbest / mean if lower is better,\n"
        "mean / best if higher is better",
    )
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _relative_line(ax, group, by_arm, label, c, ran):
    pure, mixed = _pure_and_mixed(group)
    x, y = [s.degree for s in pure], [by_arm[s.arm] for s in pure]
    ax.plot(x, y, marker="o", ls="none", color=c, label=label if pure else None)
    for run in neighbours(pure, ran):  # no line through a degree this budget did not run
        ax.plot([s.degree for s in run], [by_arm[s.arm] for s in run], color=c)
    x, y = [s.degree for s in mixed], [by_arm[s.arm] for s in mixed]
    ax.plot(x, y, color=c, label=None if pure else label, **MIXED)
    for s in group:
        if s.degree is None:
            ax.axhline(by_arm[s.arm], color=c, linestyle="--", linewidth=1)

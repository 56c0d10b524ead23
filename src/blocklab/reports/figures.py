"""Figure helpers the reports share: saving a figure beside its report, and means over seeds
with their 95% intervals, drawn as lines against one key."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt


def save_figure(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path.name


def errorbar(ax, xs, group, **kw):
    means = [s["mean"] for s in group]
    err = [
        [0 if not s["n"] > 1 else s["mean"] - s["lo"] for s in group],
        [0 if not s["n"] > 1 else s["hi"] - s["mean"] for s in group],
    ]
    return ax.errorbar(xs, means, yerr=err, capsize=3, marker="o", **kw)


def neighbour_runs(xs: list, ran: list) -> list[list[int]]:
    """The indices of `xs` (sorted) in runs of neighbours in `ran`, every x a panel ran: a line
    may join two points only where no x between them is missing from the series (it would draw
    a value nothing measured)."""
    at = {v: i for i, v in enumerate(ran)}
    runs: list[list[int]] = []
    for i, v in enumerate(xs):
        if runs and at[v] == at[xs[runs[-1][-1]]] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def lines_plot(
    summaries: list[dict[str, Any]],
    path: Path,
    *,
    x: str,
    series: tuple[str, ...],
    panels: str | None = None,
    xlabel: str,
    ylabel: str,
    logx: bool = True,
    hline: float | None = None,
) -> str:
    """One panel per value of `panels`, one line per value of `series`, x against the mean with
    its 95% interval. The labels state their units: "model width (hidden units)"."""
    panel_keys = sorted({s[panels] for s in summaries}, key=str) if panels else [None]
    fig, axes = plt.subplots(
        1, len(panel_keys), figsize=(4.2 * len(panel_keys), 3.4), squeeze=False
    )
    for ax, pk in zip(axes[0], panel_keys, strict=True):
        groups = defaultdict(list)
        for s in summaries:
            if (panels is None or s[panels] == pk) and s["n"]:
                groups[tuple(s[k] for k in series)].append(s)
        ran = sorted({s[x] for group in groups.values() for s in group})
        for key, group in sorted(groups.items(), key=lambda kv: str(kv[0])):
            group.sort(key=lambda s: s[x])
            label = ", ".join(
                f"{k}={v}" if k not in ("model",) else str(v)
                for k, v in zip(series, key, strict=True)
            )
            xs = [s[x] for s in group]
            bars = errorbar(ax, xs, group, label=label, ls="none")
            for run in neighbour_runs(xs, ran):  # no line through an x this series lacks
                if len(run) > 1:
                    ax.plot([xs[i] for i in run], [group[i]["mean"] for i in run],
                            color=bars[0].get_color())  # fmt: skip
        if hline is not None:
            ax.axhline(hline, color="grey", lw=0.8, ls=":")
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if pk is not None:
            ax.set_title(f"{panels} = {pk}")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def group_by(rows, keys):
    groups = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in keys)].append(r)
    return groups

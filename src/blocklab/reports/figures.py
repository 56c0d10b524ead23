"""Figure helpers the reports share: each arm's colour, saving a figure beside its report, and
means over seeds with their 95% intervals, drawn as lines against one key."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from blocklab.theory import CONTROL_LABEL

# an arm's colour on every figure of every run and page: the lab's arms fixed, named as the
# experiments label them, distinct wherever two can share a figure; names of one block share
# its colour (the needle's "softmax", the match's "standard" and the suite's
# "softmax_attention" are one attention). The control is d=3 again, in a lighter orange.
ARM_COLORS = {
    "d=2": "#1f77b4",
    "d=3": "#ff7f0e",
    "d=4": "#2ca02c",
    "d=e": "#9467bd",
    CONTROL_LABEL: "#ffbb78",
    "mlp": "#d62728",
    "fully connected": "#d62728",  # sanford qsa's mlp
    "softmax_attention": "#17becf",
    "softmax": "#17becf",
    "standard": "#17becf",
    "attention": "#17becf",
    "linear_attention": "#bcbd22",
    "linear": "#bcbd22",
    "linearized_attention": "#bd9e39",
    "linearized": "#bd9e39",
    "tensor_attention": "#e377c2",
    "tensor": "#e377c2",
    "hyena": "#8c564b",
    "h3": "#393b79",
    "quadratic_mixing": "#637939",
    "poly_attention": "#7b4173",
    "mixer": "#6b6ecf",
    # the collapse's variants (its "mlp" is the mlp's), never beside the arms above
    "pure": "#3182bd",
    "skip": "#31a354",
    "norm": "#756bb1",
    "skip+mlp+norm": "#e6550d",
}
# every other label's colour, by a hash of its text: none of these is an arm's above
OTHER_COLORS = (
    "#5254a3",
    "#8ca252",
    "#b5cf6b",
    "#8c6d31",
    "#e7ba52",
    "#843c39",
    "#ad494a",
    "#d6616b",
    "#e7969c",
    "#a55194",
    "#ce6dbd",
)


def arm_color(label: str) -> str:
    """The colour of the arm labelled `label`, a function of the label alone (never of which
    arms a run has, or their order): `ARM_COLORS`', else one of `OTHER_COLORS` by a hash of the
    label that is the same in every process (Python's own `hash` of a string is not)."""
    if label in ARM_COLORS:
        return ARM_COLORS[label]
    digest = hashlib.sha256(label.encode()).digest()
    return OTHER_COLORS[int.from_bytes(digest[:8], "big") % len(OTHER_COLORS)]


def arm_colors(labels: Iterable[str]) -> dict[str, str]:
    """{label: `arm_color(label)`} of the arms a figure draws."""
    return {label: arm_color(label) for label in labels}


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
    return ax.errorbar(xs, means, yerr=err, capsize=3, **{"marker": "o", **kw})


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


# the line styles and markers that tell apart the series of one arm (`lines_plot`'s `arm`)
STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def lines_plot(
    summaries: list[dict[str, Any]],
    path: Path,
    *,
    x: str,
    series: tuple[str, ...],
    arm: str,
    panels: str | None = None,
    xlabel: str,
    ylabel: str,
    logx: bool = True,
    hline: float | None = None,
) -> str:
    """One panel per value of `panels`, one line per value of `series`, x against the mean with
    its 95% interval. `arm`, one of `series`, names the arm: its colour is the arm's
    (`arm_color`), and the other keys of `series` are told apart by line style and marker. The
    labels state their units: "model width (hidden units)"."""
    panel_keys = sorted({s[panels] for s in summaries}, key=str) if panels else [None]
    fig, axes = plt.subplots(
        1, len(panel_keys), figsize=(4.2 * len(panel_keys), 3.4), squeeze=False
    )
    at = series.index(arm)
    rest = sorted({tuple(s[k] for k in series if k != arm) for s in summaries}, key=str)
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
            color = arm_color(str(key[at]))
            ls, marker = STYLES[rest.index(key[:at] + key[at + 1 :]) % len(STYLES)]
            xs = [s[x] for s in group]
            errorbar(ax, xs, group, label=label, ls="none", color=color, marker=marker)
            for run in neighbour_runs(xs, ran):  # no line through an x this series lacks
                if len(run) > 1:
                    ax.plot([xs[i] for i in run], [group[i]["mean"] for i in run],
                            color=color, ls=ls)  # fmt: skip
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

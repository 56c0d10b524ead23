"""The rule every figure blocklab saves must follow: each visible axis has a label, and a numeric
one states its unit in parentheses ("test loss (MSE)", "depth L (layers)"). `tests/conftest.py`
applies it to every figure the test suite saves; `test_plot_labels.py` checks the rule itself."""

from __future__ import annotations

import functools
import re

from matplotlib.ticker import FixedFormatter, FuncFormatter

UNIT = re.compile(r"\(.+\)")


def _by_hand(formatter) -> bool:
    """Tick labels given as a list: a FixedFormatter, or (matplotlib >= 3.9, `set_ticks(ticks,
    labels)`) a FuncFormatter reading a position -> label dict."""
    if isinstance(formatter, FixedFormatter):
        return True
    func = getattr(formatter, "func", None) if isinstance(formatter, FuncFormatter) else None
    return isinstance(func, functools.partial) and func.func.__name__ == "_format_with_dict"


def _categorical(axis) -> bool:
    """Tick labels set by hand (a list of names), or no ticks at all: no unit to state."""
    return _by_hand(axis.get_major_formatter()) or not len(axis.get_ticklocs())


def _problem(axis, name: str) -> str | None:
    label = axis.get_label_text().strip()
    if not label:
        return f"{name} axis has no label"
    if not _categorical(axis) and not UNIT.search(label):
        return f"{name} axis label {label!r} states no unit in parentheses"
    return None


def label_problems(fig) -> list[str]:
    """What is wrong with the axis labels of a figure: one line per offending axis, empty if none.
    Hidden axes (`ax.axison` False, invisible) are skipped; a colorbar is checked on its long
    axis only (the short one carries no ticks)."""
    problems = []
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison:
            continue
        title = ax.get_title() or f"axes {i}"
        colorbar = getattr(ax, "_colorbar", None)
        if colorbar is not None or ax.get_label() == "<colorbar>":
            axes = [("colorbar", colorbar.long_axis)] if colorbar is not None else []
        else:
            axes = [("x", ax.xaxis), ("y", ax.yaxis)]
        for name, axis in axes:
            if not axis.get_visible():  # e.g. the shared x axis of a twinx
                continue
            problem = _problem(axis, name)
            if problem:
                problems.append(f"{title!r}: {problem}")
    return problems


def check_labels(fig, path="<figure>") -> None:
    """Raise AssertionError naming the figure and each offending axis label."""
    problems = label_problems(fig)
    if problems:
        raise AssertionError(f"figure {path}: " + "; ".join(problems))

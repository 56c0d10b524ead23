"""Plain text for people and JSON for programs: Markdown tables, numbers at a stated precision,
a summary's spread, a duration in minutes and seconds, JSON without NaN. Reports, trackers, the
engine's progress and the command line share these; nothing here imports numpy, torch or
matplotlib.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from typing import Any


def markdown_table(header, body) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(cells) + " |" for cells in body]


def plain(x):
    """`x` as JSON takes it: numpy scalars as Python numbers, tuples as lists, and a non-finite
    float as null (JSON has no NaN or Infinity: a missing statistic is null)."""
    np = sys.modules.get("numpy")  # a numpy scalar exists only once numpy is imported
    if np is not None and isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return x


def config_json(cfg: Any) -> dict[str, Any]:
    """A config as the JSON a report and `--json` show (tuples as lists, other values as text)."""
    return plain(json.loads(json.dumps(dataclasses.asdict(cfg), default=str)))


def short(x) -> str:
    """Four significant digits; '-' for a missing or non-finite value."""
    return "-" if x is None or not math.isfinite(x) else f"{x:.4g}"


def with_spread(
    mean: float, std: float, lo: float, hi: float, floor: float | None = 0.0, cap=None
) -> str:
    """'0.0272 ± 0.0082 [0.0068, 0.0477]': every number at the decimals that give the std two
    significant digits (one rule for the cell), and the interval cut to the metric's range
    [`floor`, `cap`]: a t interval over few seeds can reach below zero for a loss, which no
    seed could."""
    if not all(math.isfinite(v) for v in (mean, std, lo, hi)):
        return f"{short(mean)} ± {short(std)} [{short(lo)}, {short(hi)}]"
    decimals = max(0, 1 - math.floor(math.log10(std))) if std > 0 else 4
    lo = lo if floor is None else max(lo, floor)
    hi = hi if cap is None else min(hi, cap)
    f = f"{{:.{decimals}f}}".format
    return f"{f(mean)} ± {f(std)} [{f(lo)}, {f(hi)}]"


def number(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def spread(s: dict[str, Any]) -> str:
    """A summary over seeds: mean, and with two seeds or more its std and 95% interval."""
    if not s["n"]:
        return "-"
    text = f"{s['mean']:.3f}"
    if s["n"] > 1:
        text += f" ± {s['std']:.3f} [{s['lo']:.3f}, {s['hi']:.3f}]"
    return text + (f" ({s['diverged']} diverged)" if s.get("diverged") else "")


TERMINAL_COLUMNS = 100


def wrapped(text: str, width: int = TERMINAL_COLUMNS) -> str:
    """`text` with each line longer than `width` wrapped at spaces, continued under its first
    word (a bullet's text under the text, not the dash); a word longer than the line stays
    whole."""
    import textwrap

    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        lead = re.match(r"\s*(- )?", line).group(0)
        out.append(
            textwrap.fill(
                line,
                width,
                subsequent_indent=" " * len(lead),
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return "\n".join(out)


def minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def duration(seconds: float) -> str:
    """`minutes` up to an hour, then hours and minutes ("3h05m")."""
    if seconds < 3600:
        return minutes(seconds)
    h, m = divmod(round(seconds / 60), 60)
    return f"{h}h{m:02d}m"

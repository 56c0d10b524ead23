"""The run page's table of stored trials (`reports.html`): one row per trial, what tells the
rows apart (arm, budget, depth or a ladder's rungs, seed, teacher, rounding), its metrics and its
learning curves drawn inline as SVG; and the page's table and cell helpers."""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

from blocklab.frames import curve_points, run_row, varying

# the learning curves a trial stores, in the order and colour the trials table draws them
CURVE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")


def html_table(header: list[str] | None, rows: list[list[str]], cls: str = "sortable") -> str:
    """A table of already-escaped cells; without a header, a table of facts."""
    head = "".join(f"<th>{h}</th>" for h in header or [])
    head = f"<thead><tr>{head}</tr></thead>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}">{head}<tbody>{body}</tbody></table>'


def cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return escape(f"{value:.4g}")
    if isinstance(value, dict | list):
        return escape(json.dumps(value, sort_keys=True))
    return escape(str(value))


def curve_names(records: list[dict[str, Any]]) -> list[str]:
    """The curves the records store, in first-seen order."""
    names: dict[str, None] = {}
    for r in records:
        names.update(dict.fromkeys(curve_points(r)))
    return list(names)


def sparkline(
    points: dict[str, list[tuple[Any, Any]]], names: list[str], width: int = 160, height: int = 40
) -> str:
    """A trial's curves (`frames.curve_points`) as one small inline SVG, each scaled to its own
    range, on the log scale where it is positive (the tooltip gives first and last values); a
    missing (non-finite) value breaks its line."""
    steps = [s for curve in points.values() for s, _ in curve]
    if len(set(steps)) < 2:
        return "-"
    x0, x1 = min(steps), max(steps)
    lines, tips = [], []
    for name, color in zip(names, CURVE_COLORS, strict=False):
        curve = points.get(name, [])
        finite = [v for _, v in curve if v is not None and math.isfinite(v)]
        if not finite:
            continue
        # losses fall by orders of magnitude: a positive curve is drawn on the log scale
        scale = math.log if min(finite) > 0 else float
        lo, hi = scale(min(finite)), scale(max(finite))
        span = (hi - lo) or 1.0
        segments: list[list[str]] = [[]]
        for s, v in curve:
            if v is None or not math.isfinite(v):
                segments.append([])
                continue
            x = (s - x0) / (x1 - x0) * (width - 4) + 2
            y = height - 2 - (scale(v) - lo) / span * (height - 4)
            segments[-1].append(f"{x:.1f},{y:.1f}")
        lines += [
            f'<polyline points="{" ".join(seg)}" fill="none" stroke="{color}" stroke-width="1.2"/>'
            for seg in segments
            if len(seg) > 1
        ]
        tips.append(f"{name}: {finite[0]:.4g} -> {finite[-1]:.4g}")
    title = escape(f"steps {x0}-{x1}; " + "; ".join(tips))
    return (
        f'<svg class="curve" width="{width}" height="{height}" role="img">'
        f"<title>{title}</title>{''.join(lines)}</svg>"
    )


# the config fields that tell one trial from another (with its seed), each shown under its name
# wherever a record holds it, whether or not it varies: a reader tells rows apart by them
IDENTITY = {
    "config.arm.label": "arm",
    "config.budget": "budget",
    "config.depth": "depth",
    "config.data_seed": "teacher",  # the target's data seed (None: the data follow the seed)
    "config.rounding": "rounding",  # stored only where it is not 0
}


def _identity(records: list[dict[str, Any]], flat: list[dict[str, Any]]) -> dict[str, str]:
    """The `IDENTITY` columns some record holds, with their headers; a ladder's depth column
    names its rungs and its budget is its top rung's."""
    ladders = any((r.get("config") or {}).get("ladder") for r in records)
    cols = {k: v for k, v in IDENTITY.items() if any(f.get(k) is not None for f in flat)}
    if ladders and "config.depth" in cols:
        cols["config.depth"] = "depths (rungs)"
        cols["config.budget"] = "budget (top rung)" if "config.budget" in cols else None
    return {k: v for k, v in cols.items() if v}


def _identity_cell(record: dict[str, Any], flat: dict[str, Any], key: str) -> str:
    ladder = (record.get("config") or {}).get("ladder")
    if key == "config.depth" and ladder:
        return escape("/".join(map(str, ladder)))
    if key == "config.rounding":
        return cell(flat.get(key) or 0)
    return cell(flat.get(key))


def _what_a_row_is(records: list[dict[str, Any]]) -> str:
    """The table's lead: a row is one trial, and for a depth ladder what its fits are."""
    if any((r.get("config") or {}).get("ladder") for r in records):
        return (
            "Each row is one trial: a stored ladder of rungs, one per depth, each rung's fits "
            "started from the fitted rung below; its budget, test_metric and curves are its top "
            "rung's (the report's tables above give each rung a row). "
        )
    return "Each row is one trial: one configuration at one seed, as the store holds it. "


def trials_section(records: list[dict[str, Any]]) -> str:
    """Every stored trial: id, status, seed, its metrics and learning curves, the fields that
    tell trials apart (`IDENTITY`) and the other config fields that vary."""
    if not records:
        return "<p>The store holds no trials.</p>"
    names = curve_names(records)
    flat = [run_row(r) for r in records]
    ident = _identity(records, flat)
    # the ladder is in the depth column; an arm's other fields are in its label
    arm = "config.arm.label" in ident
    cols = [
        c
        for c in varying(records)
        if c not in ident and c != "config.ladder" and not (arm and c.startswith("config.arm."))
    ]
    metrics = [m for m in ("test_metric", "seconds") if any(m in r["metrics"] for r in records)]
    header = ["id", "status", "seed", *metrics, *(["curves"] if names else [])]
    header += [*ident.values(), *(c.removeprefix("config.") for c in cols)]
    rows = []
    for r, f in zip(records, flat, strict=True):
        row = [cell(r["id"]), cell(r["status"]), cell(r["seed"])]
        row += [cell(r["metrics"].get(m)) for m in metrics]
        row += [sparkline(curve_points(r), names)] if names else []
        row += [_identity_cell(r, f, k) for k in ident]
        rows.append(row + [cell(f.get(c)) for c in cols])
    legend = "".join(
        f'<span style="color:{c}">&#9644; {escape(n)}</span>'
        for n, c in zip(names, CURVE_COLORS, strict=False)
    )
    # a second-order fit's curve is against its iterations, each a full-batch solve
    fitted = all(r["metrics"].get("optimizer") in ("lm", "lbfgs") for r in records)
    note = (
        f'<p class="legend">{_what_a_row_is(records)}Curves against the '
        f"{'iteration' if fitted else 'optimizer step'}, each scaled to its own range, log scale "
        f"where positive (hover for first and last values): {legend}</p>"
        if names
        else f"<p>{_what_a_row_is(records)}</p>"
    )
    return note + '<div class="wide">' + html_table(header, rows) + "</div>"

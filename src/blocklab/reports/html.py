"""A run directory as one self-contained web page, and an index page for a directory of runs.

`write(run_dir)` writes `index.html`: the experiment, the command that ran it and its config (the
run's `run.json`), report.md rendered by Python-Markdown with its figures embedded as PNG data,
every stored trial with its learning curves drawn inline as SVG, and any figure report.md does not
show. `write_index(parent)` writes the page of every run directory under `parent` and an index
linking them. Nothing is fetched when the page opens: no CDN, no font, no remote script; a few
lines of inline script sort a table when its header is clicked.
"""

from __future__ import annotations

import base64
import datetime
import json
import xml.etree.ElementTree as etree
from html import escape
from pathlib import Path
from typing import Any

from blocklab.errors import UserError
from blocklab.reports.page_trials import cell, html_table, trials_section
from blocklab.reports.page_trials import sparkline as sparkline  # the trials' curves
from blocklab.rundir import PAGE, RunDir
from blocklab.store import DB_NAME, Store

FIGURES = (".png", ".svg")
MIME = {".png": "image/png", ".svg": "image/svg+xml"}

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em;
       color: #222; }
/* a table wider than the window scrolls inside itself, never the page (phones) */
table { border-collapse: collapse; margin: 0.8em 0; font-size: 13px; display: block;
        max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
table.sortable th { cursor: pointer; }
/* a number never breaks across lines: a narrow window scrolls the table instead */
table.sortable td { white-space: nowrap; }
img { max-width: 100%; border: 1px solid #eee; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 12px; }
code { font-size: 12px; }
.wide { overflow-x: auto; }
.facts td:first-child { font-weight: 600; white-space: nowrap; }
.legend span { display: inline-block; margin-right: 1.2em; }
.status { padding: 0.5em 0.8em; border-left: 6px solid; }
/* the banner's parts, each on a line of its own; the clauses beside the result as a list */
.status span { display: block; margin: 0.2em 0; }
.status .head { font-size: 16px; font-weight: 600; }
.status .beside { display: list-item; margin-left: 1.4em; }
.status code { overflow-wrap: anywhere; }
.status.verdict { border-color: #2a7; background: #eef8f1; }
.status.no-verdict { border-color: #c33; background: #fbeeee; }
.status.inconclusive { border-color: #d90; background: #fdf6e3; }
.status.findings { border-color: #888; background: #f4f4f4; }
"""
# sort a table by the clicked column: numbers as numbers, the rest as text; a second click reverses
SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var dir = th.dataset.dir === "asc" ? -1 : 1; th.dataset.dir = dir === 1 ? "asc" : "desc";
      function key(r) { var t = r.cells[col] ? r.cells[col].textContent.trim() : "";
        var n = parseFloat(t); return isNaN(n) ? t : n; }
      rows.sort(function (a, b) { var x = key(a), y = key(b);
        if (typeof x === typeof y) return (x < y ? -1 : x > y ? 1 : 0) * dir;
        return (typeof x === "number" ? -1 : 1) * dir; });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def data_uri(path: Path) -> str:
    return (
        f"data:{MIME[path.suffix.lower()]};base64," + base64.b64encode(path.read_bytes()).decode()
    )


def _markdown(text: str, run_dir: Path, shown: set[str]) -> str:
    """report.md as HTML: its tables sortable, its figures embedded (their names added to
    `shown`); a figure that is missing says so in place of the image."""
    import markdown
    from markdown.treeprocessors import Treeprocessor

    class Embed(Treeprocessor):
        def run(self, root: etree.Element) -> None:
            for table in root.iter("table"):
                table.set("class", "sortable")
                # Python-Markdown gives a table of no rows one row of empty cells: none is shown
                for body in table.iter("tbody"):
                    rows = list(body)
                    if len(rows) == 1 and not "".join(rows[0].itertext()).strip():
                        body.remove(rows[0])
            for img in root.iter("img"):
                path = run_dir / (img.get("src") or "")
                if path.suffix.lower() in FIGURES and path.is_file():
                    shown.add(path.name)
                    img.set("src", data_uri(path))
                else:
                    img.tag, img.text = "em", f"[figure {img.get('src')} is missing]"
                    img.attrib.clear()

    class EmbedFigures(markdown.Extension):
        def extendMarkdown(self, md):  # noqa: N802 (Python-Markdown's name)
            md.treeprocessors.register(Embed(md), "blocklab-embed", 0)

    md = markdown.Markdown(extensions=["tables", "fenced_code", EmbedFigures()])
    return md.convert(text)


def run_facts(run_dir: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """What the page and the index say of a run: its experiment, command, config, trial counts,
    the code that made it and when it last stored a trial."""
    meta = RunDir(run_dir).record()
    statuses = [r["status"] for r in records]
    experiments = sorted({r["experiment"] for r in records}) or [meta.get("experiment", "-")]
    codes = {((r.get("provenance") or {}).get("code") or {}).get("fingerprint") for r in records}
    last = max((r["finished_at"] for r in records), default=None)
    return {
        "experiment": meta.get("experiment") or ", ".join(experiments),
        "command": meta.get("command"),
        "config": meta.get("config"),
        "trials": len(records),
        "done": statuses.count("done"),
        "diverged": statuses.count("diverged"),
        "failed": statuses.count("failed"),
        "fingerprints": sorted(c for c in codes if c),
        "last_stored": _when(last),
        "trial_seconds": sum((r["metrics"] or {}).get("seconds") or 0 for r in records),
    }


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M")


def _records(run_dir: Path) -> list[dict[str, Any]]:
    store = Store(run_dir / DB_NAME, read_only=True)
    try:
        return store.records()
    finally:
        store.close()


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}<script>{SCRIPT}</script></body></html>\n"
    )


def write(run_dir: str | Path, records: list[dict[str, Any]] | None = None) -> Path:
    """`run_dir/index.html`: the run's page (see the module's docstring), from `records` when
    the caller has read the store already."""
    run_dir = Path(run_dir)
    records = _records(run_dir) if records is None else records
    facts = run_facts(run_dir, records)
    command = facts["command"] or "not recorded (the run predates run.json)"
    counts = f"{facts['trials']} ({facts['done']} done, {facts['diverged']} diverged, "
    counts += f"{facts['failed']} failed)"
    rows = [
        ["experiment", escape(facts["experiment"])],
        ["last command", f"<code>{escape(command)}</code>"],
        ["run directory", escape(str(run_dir.resolve()))],
        ["trials", counts],
        ["trial time", escape(f"{facts['trial_seconds']:.0f} s (sum over trials)")],
        ["last trial stored", escape(facts["last_stored"])],
        ["code fingerprints", _fingerprints(facts["fingerprints"])],
    ]
    parts = [f"<h1>{escape(run_dir.name)}: {escape(facts['experiment'])}</h1>"]
    if status := RunDir(run_dir).status():
        parts.append(banner(status))
    parts.append(html_table(None, rows, cls="facts"))
    if facts["config"] is not None:
        config = escape(json.dumps(facts["config"], indent=2))
        parts.append(f"<details><summary>config</summary><pre>{config}</pre></details>")
    shown: set[str] = set()
    report = RunDir(run_dir).report
    if report.is_file():
        text = report.read_text()
        if status.get("line"):  # report.md leads with the status line: the banner says it once
            text = text.replace(f"\n**{status['line']}**\n", "\n", 1)
        parts.append(_markdown(text, run_dir, shown))
    else:
        parts.append(
            "<p><em>No report.md: the run has not finished. Rerun its command to resume it and "
            "write the report.</em></p>"
        )
    others = sorted(p for p in run_dir.iterdir() if p.suffix.lower() in FIGURES)
    others = [p for p in others if p.name not in shown]
    if others:
        parts.append("<h2>Other figures</h2>")
        parts += [f'<p><img alt="{escape(p.stem)}" src="{data_uri(p)}"></p>' for p in others]
    parts.append('<h2 id="trials">Trials</h2>')
    parts.append(trials_section(records))
    return _save(run_dir / PAGE, _page(f"{run_dir.name}: {facts['experiment']}", "".join(parts)))


def banner(status: dict[str, Any]) -> str:
    """The run's status as one banner: the status itself first, the next command (or what to
    change) on a line of its own, then the clauses beside the result, one to a line (the parts
    a report keeps apart under `banner`, `degree_sweep.report.status`); a status without
    parts is its line alone. One paragraph, its parts blocks by the style (`.status span`)."""
    parts = status.get("banner") or {}
    said = [f'<span class="head">{escape(parts.get("head") or status.get("line", ""))}</span>']
    if parts.get("command"):
        said.append(
            f'<span class="next">next command: <code>{escape(parts["command"])}</code></span>'
        )
        # its plan and cost (`status.next_cost`), or why it has none: on its own line
        if parts.get("cost"):
            said.append(f'<span class="cost">its cost: {escape(parts["cost"])}</span>')
    elif parts.get("change"):
        said.append(f'<span class="next">to change: {escape(parts["change"])}</span>')
    said += [f'<span class="beside">{escape(b)}</span>' for b in parts.get("beside") or ()]
    return f'<p class="status {status_kind(status)}">{"".join(said)}</p>'


def _fingerprints(found: list[str], shown: int = 3) -> str:
    """The code fingerprints of a run's trials (one per set of modules a trial ran): a few in
    line, all of them folded away when there are more."""
    if len(found) <= shown:
        return escape(", ".join(found) or "-")
    every = escape(", ".join(found))
    return (
        f"<details><summary>{len(found)}, one per set of code modules a trial ran: "
        f"{escape(', '.join(found[:shown]))}, &hellip;</summary>{every}</details>"
    )


def _save(path: Path, text: str) -> Path:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
    return path


def run_dirs(parent: Path) -> list[Path]:
    """The run directories right under `parent`: those holding a store."""
    return sorted(p.parent for p in parent.glob(f"*/{DB_NAME}"))


def status_kind(status: dict) -> str:
    """The banner's class, by what the status line says: a VERDICT green, INCONCLUSIVE amber,
    NO VERDICT red, FINDINGS (an experiment without a verdict) grey."""
    line = status.get("line", "")
    if status.get("verdict"):
        return "verdict"
    if line.startswith("INCONCLUSIVE"):
        return "inconclusive"
    if line.startswith("FINDINGS"):
        return "findings"
    return "no-verdict"


def _title(run_dir: Path) -> str:
    """The report's first heading; "-" before there is a report."""
    try:
        lines = RunDir(run_dir).report.read_text().splitlines()
    except OSError:
        return "-"
    return next((ln[2:] for ln in lines if ln.startswith("# ")), "-")


def write_index(parent: str | Path) -> list[Path]:
    """The page of every run directory under `parent`, and `parent/index.html` linking them;
    returns the pages written, the index last."""
    parent = Path(parent)
    pages, rows = [], []
    for run_dir in run_dirs(parent):
        records = _records(run_dir)
        pages.append(write(run_dir, records))
        facts = run_facts(run_dir, records)
        # the status line, or `incomplete k/n` for a run stopped before its report
        title, verdict = _title(run_dir), RunDir(run_dir).state(records)
        link = f'<a href="{escape(run_dir.name)}/{PAGE}">{escape(run_dir.name)}</a>'
        rows.append(
            [link, escape(facts["experiment"]), escape(title), cell(facts["trials"])]
            + [cell(facts[k]) for k in ("done", "diverged", "failed")]
            + [escape(facts["last_stored"]), escape(verdict)]
        )
    header = ["run", "experiment", "report", "trials", "done", "diverged", "failed"]
    header += ["last trial stored", "status"]
    body = f"<h1>Runs in {escape(str(parent.resolve()))}</h1>" + html_table(header, rows)
    pages.append(_save(parent / PAGE, _page(f"runs in {parent.name}", body)))
    return pages


def write_any(path: str | Path) -> list[Path]:
    """The page of a run directory, or of every run under a directory of runs and their index."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path} is not a directory: name a run directory or one holding runs")
    if (path / DB_NAME).is_file():
        return [write(path)]
    if run_dirs(path):
        return write_index(path)
    raise UserError(
        f"no run in {path}: a run directory holds {DB_NAME} (run an experiment with --out {path})"
    )

"""`blocklab report DIR`: the web page of a run directory (DIR/index.html), or of every run in a
directory of runs and an index linking them (`blocklab.reports.html`)."""

from __future__ import annotations

import argparse
import json


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report", help="write DIR/index.html: a run's self-contained page, or an index of runs"
    )
    p.add_argument("dir", help="a run directory (holding blocklab.sqlite) or one holding runs")
    p.add_argument("--json", action="store_true", help="print the pages written as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from blocklab.reports import html

    pages = html.write_any(args.dir)
    if args.json:
        print(json.dumps({"pages": [str(p) for p in pages]}, indent=2))
    else:
        print("\n".join(f"wrote {p}" for p in pages))
    return 0

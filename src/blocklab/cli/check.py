"""`blocklab check`: the contract battery the package's tests run over its own blocks, tasks and
measures (`blocklab.checks`), over every registered entry, plugins included, or those named by
`--only`. Exit 0 when every check passes, 1 when one fails."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict


def add_parser(sub) -> None:
    p = sub.add_parser(
        "check", help="run the contract checks over blocks, tasks and measures, plugins included"
    )
    p.add_argument("--only", nargs="+", metavar="NAME", help="only the entries of these names")
    p.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from blocklab.checks import run as run_checks

    results = run_checks(args.only)
    passed = all(r.passed for r in results)
    if args.json:
        print(json.dumps({"checks": [asdict(r) for r in results], "passed": passed}, indent=2))
    else:
        print("\n".join(table(results)))
    return 0 if passed else 1


def table(results) -> list[str]:
    """Per kind, a row per entry and example, a column per check: ok, FAIL or - (not
    applicable); then each failure's message."""
    lines: list[str] = []
    for kind in dict.fromkeys(r.kind for r in results):
        mine = [r for r in results if r.kind == kind]
        checks = list(dict.fromkeys(r.check for r in mine))
        rows = list(dict.fromkeys(r.label for r in mine))
        cell = {(r.label, r.check): _mark(r) for r in mine}
        first = max(len(kind), *map(len, rows))
        columns = [(c, max(len(c), 4)) for c in checks]
        lines.append("  ".join([kind.ljust(first), *(c.ljust(w) for c, w in columns)]))
        for row in rows:
            marks = (cell[(row, c)].ljust(w) for c, w in columns)
            lines.append("  ".join([row.ljust(first), *marks]).rstrip())
        lines.append("")
    failed = [r for r in results if not r.passed]
    lines += [f"FAIL {r.kind} {r.label} [{r.check}]: {r.message}" for r in failed]
    lines.append(f"{len(results) - len(failed)} of {len(results)} checks passed")
    return lines


def _mark(result) -> str:
    if not result.passed:
        return "FAIL"
    return "-" if result.message.startswith("not applicable") else "ok"

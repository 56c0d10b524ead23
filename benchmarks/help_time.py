"""How long `blocklab --help` and every `blocklab SUBCOMMAND --help` take, and what heavy modules
they import (none should: the parser is built from torch-free configs).

    python benchmarks/help_time.py [--repeats 5] [--json]

Run it in the environment blocklab is installed in (or with its src/ on PYTHONPATH). Each
command runs in a fresh interpreter `repeats` times and the fastest wall time is kept, as
`timeit` keeps its minimum: a busy machine only ever slows a run down. A second run of each
command under `python -X importtime` lists the heavy modules it imported.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from blocklab.cli import build_parser

HEAVY = ("torch", "numpy", "scipy", "matplotlib")
TARGET = 0.5  # seconds


def commands(parser, words=()):
    """Every command path of the parser: (), ('degree-sweep',), ('sanford', 'qsa'), ..."""
    yield words
    for action in parser._subparsers._actions if parser._subparsers else ():
        for name, sub in (getattr(action, "choices", None) or {}).items():
            yield from commands(sub, (*words, name))


def best_time(words: tuple[str, ...], repeats: int) -> float:
    cmd = [sys.executable, "-m", "blocklab", *words, "--help"]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        best = min(best, time.perf_counter() - start)
    return best


def heavy_imports(words: tuple[str, ...]) -> list[str]:
    cmd = [sys.executable, "-X", "importtime", "-m", "blocklab", *words, "--help"]
    err = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    names = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines()}
    return sorted(names & set(HEAVY))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="runs per command, fastest kept (5)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args()
    rows = [
        {
            "command": " ".join(("blocklab", *words, "--help")),
            "seconds": best_time(words, args.repeats),
            "heavy_imports": heavy_imports(words),
        }
        for words in commands(build_parser())
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            heavy = ", ".join(r["heavy_imports"]) or "none"
            print(f"{r['seconds']:6.3f} s  heavy imports: {heavy:<10}  {r['command']}")
        slowest = max(r["seconds"] for r in rows)
        verdict = "met" if slowest < TARGET else "MISSED"
        print(f"slowest {slowest:.3f} s; target {TARGET} s: {verdict}")
    return 0 if all(r["seconds"] < TARGET and not r["heavy_imports"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

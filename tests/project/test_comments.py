"""Comments say why, not what was measured: a time or a rate written into a comment or docstring
goes stale as the code it describes changes, and nothing checks it. Measured numbers live in the
results log (`docs/results/`) and in the manifests `--help` reads; a comment names the entry."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import blocklab

SRC = Path(blocklab.__file__).resolve().parent

# a number (thousands by commas, decimals, a range) then a unit of time or of a rate, the unit
# perhaps after one word ("220 more seconds") or joined to one ("220 core-seconds", "3 GPU-hours")
MEASURED = re.compile(
    r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?:-\d+(?:\.\d+)?)?\s?"
    r"(?:[A-Za-z]+-|(?:[A-Za-z]+ )?(?=(?:seconds?|minutes?|hours?)\b))?"
    r"(?:ms|s|sec|seconds?|min|minutes?|h|hours?|[GMT]FLOP/s|it/s)(?![\w/])"
)
# (file under src/blocklab, the matched text) -> why it stays: a setting or a formula's value
# written with its unit, not a measurement
ALLOW: dict[tuple[str, str], str] = {}


def texts(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module's source."""
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                out.append((node.body[0].lineno, doc))
    return out


def stale(name: str, source: str, allow: dict[tuple[str, str], str]) -> list[tuple]:
    """(file, line, the number with its unit, its context) for each measured time or rate in the
    comments and docstrings of `source` that `allow` does not name."""
    return [
        (name, line, m.group(), text[max(0, m.start() - 40) : m.end() + 20])
        for line, text in texts(source)
        for m in MEASURED.finditer(text)
        if (name, m.group()) not in allow
    ]


def test_no_source_comment_keeps_a_measured_time_or_rate():
    """Every measured number found is allowed, and every allowed one is still found (an entry
    whose comment changed would otherwise allow nothing, silently)."""
    found = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        for hit in stale(str(path.relative_to(SRC)), path.read_text(), {})
    ]
    kept = [(name, line, n, text) for name, line, n, text in found if (name, n) not in ALLOW]
    lines = [f"{name}:{line}: {number!r} in {context!r}" for name, line, number, context in kept]
    assert not kept, "measured numbers in comments (move them to docs/results/):\n" + "\n".join(
        lines
    )
    assert set(ALLOW) <= {(name, number) for name, _, number, _ in found}, "a stale ALLOW entry"
    assert all(ALLOW.values()), "each allowed number says why it stays"


def test_the_rule_finds_a_planted_measurement_and_lets_an_allowed_one_stay():
    planted = (
        '"""A module."""\n'
        "LIMIT = 2.0  # the iteration took 143 ms at P = 409\n"
        "def f():\n"
        '    """Runs at 42 GFLOP/s on one thread, 1,024 iterations in 2-5 min."""\n'
        "    return ['2', '[3,2]', 'f(n=2,h=1)']  # 3 steps, 95% interval, d=3\n"
        "# a unit cost 220 core-seconds, 3 more minutes on 2 cores, 1.5 GPU-hours\n"
    )
    hits = stale("planted.py", planted, {})
    assert sorted((line, number) for _, line, number, _ in hits) == [
        (2, "143 ms"), (4, "2-5 min"), (4, "42 GFLOP/s"), (6, "1.5 GPU-hours"),
        (6, "220 core-seconds"), (6, "3 more minutes")
    ]  # fmt: skip
    # a word before "min" is not read as a unit: "the K/2 against min over all K" is no time
    assert stale("planted.py", "# min over the first K/2 against min over all K\n", {}) == []
    allowed = {("planted.py", "143 ms"): "a planted one"}
    assert len(stale("planted.py", planted, allowed)) == 5

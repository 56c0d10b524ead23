"""The README quotes measured runs, and each quote names the results-log entry it comes from, so
that the README cannot drift from what was measured.

Two places quote: the demo's printout ("What the demo prints", from the paragraph that links the
entry to the section's end) and the measured column of "Results at a glance" (each cell links
its entry). A quote names its entry by a link to the entry's heading in `docs/results/`
(`degree.md#the-demo-...`) and by the entry's date and commit in the text beside the link. Every
number the quote shows must be in that entry's text (its heading to the next heading): the same
value, or the entry's value rounded to the digits the quote shows. The checker is a function,
tested here on a README and a results log made up for it and on the real README with one number
changed, so that it can fail."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from test_docs import heading_anchors, heading_lines, split_fences

ROOT = Path(__file__).resolve().parents[2]
RESULTS = "docs/results/"
DEMO, GLANCE, MEASURED = "What the demo prints", "Results at a glance", "measured"

# a number: digits with an optional thousands grouping, decimals and exponent, standing alone
# (not part of a word, a version or a hash such as avx512f or 74814db; `x1.57` and `2.12x` are
# factors); a minus sign counts where it is not a range's dash (`12-288`)
NUMBER = re.compile(
    r"(?:(?<![\w.])|(?<=[^\w]x))"
    r"(?P<sign>(?<![\w)\]])-)?"
    r"(?P<digits>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<fraction>\.\d+)?(?P<exponent>e[-+]?\d+)?"
    r"(?![A-Za-wyz_\d]|x\w|\.\d)"
)
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


def numbers(text: str) -> list[str]:
    """Every number in `text` as written (`-0.5`, `19,264`, `4.4e-05`); dates and commits are
    names, not numbers."""
    text = COMMIT.sub(" ", DATE.sub(" ", text))
    return [m.group(0) for m in NUMBER.finditer(text)]


def value(number: str) -> Decimal:
    return Decimal(number.replace(",", ""))


def quotes_number(quoted: str, recorded: str) -> bool:
    """Whether `quoted` shows `recorded`: the same value, or, for a quote with decimals, the
    recorded value rounded to the quote's last digit (either way at a half)."""
    q, r = value(quoted), value(recorded)
    if q == r:
        return True
    place = q.as_tuple().exponent
    if not isinstance(place, int) or place >= 0 or r.as_tuple().exponent >= place:
        return False  # an integer quotes only itself; rounding only drops digits
    step = Decimal(1).scaleb(place)
    return any(r.quantize(step, rounding=mode) == q for mode in (ROUND_HALF_UP, ROUND_HALF_EVEN))


def section(text: str, title: str) -> list[str]:
    """The lines under the heading `title` up to the next heading of its level or above."""
    lines, heads = text.splitlines(), heading_lines(text)
    for n, (start, level, heading) in enumerate(heads):
        if heading.strip() == title:
            end = next((s for s, lv, _ in heads[n + 1 :] if lv <= level), len(lines))
            return lines[start + 1 : end]
    return []


def entry(page: str, anchor: str) -> str | None:
    """The entry of a results page whose heading has `anchor`: its heading and the text under
    it up to the next heading (of any level: a sub-entry is another run). None if no heading
    has that anchor."""
    lines, heads = page.splitlines(), heading_lines(page)
    for n, name in enumerate(heading_anchors(page)):
        if name == anchor:
            end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
            return "\n".join(lines[heads[n][0] : end])
    return None


def demo_quote(readme: str) -> tuple[str, str] | None:
    """(the paragraph that names the entry, the quoted text) of the demo's printout: the first
    paragraph of "What the demo prints" that links into the results log, and from it to the
    section's end."""
    lines = section(readme, DEMO)
    for n, line in enumerate(lines):
        if any(dest.startswith(RESULTS) for _, dest in LINK.findall(line)):
            start = n
            while start > 0 and lines[start - 1].strip():
                start -= 1
            end = next((k for k in range(n, len(lines)) if not lines[k].strip()), len(lines))
            return " ".join(lines[start:end]), "\n".join(lines[start:])
    return None


def table_rows(lines: list[str]) -> list[list[str]]:
    """The cells of a Markdown table's rows (the separator row left out), outside code blocks;
    a `|` inside a code span stays in its cell."""
    prose, _ = split_fences("\n".join(lines))
    rows = []
    for line in prose.splitlines():
        if not line.strip().startswith("|"):
            continue
        cells, cell, code = [], "", False
        for c in line.strip().strip("|"):
            if c == "`":
                code = not code
            if c == "|" and not code:
                cells.append(cell.strip())
                cell = ""
            else:
                cell += c
        cells.append(cell.strip())
        if not all(set(c) <= set("-: ") for c in cells):
            rows.append(cells)
    return rows


def glance_quotes(readme: str) -> list[tuple[str, str]] | None:
    """(row name, cell) of the measured column of "Results at a glance"; None if the section or
    its column is missing."""
    rows = table_rows(section(readme, GLANCE))
    if not rows or MEASURED not in rows[0]:
        return None
    at = rows[0].index(MEASURED)
    return [(" | ".join(row[:at]), row[at]) for row in rows[1:] if len(row) > at]


def check_quote(where: str, naming: str, quoted: str, root: Path) -> list[str]:
    """What is wrong with one quote: `naming` holds its link into the results log with the
    entry's date and commit, `quoted` the text whose numbers must be in the entry."""
    links = [(text, dest) for text, dest in LINK.findall(naming) if dest.startswith(RESULTS)]
    if len(links) != 1:
        return [f"{where}: names {len(links)} results-log entries (one link, with its #heading)"]
    text, dest = links[0]
    page, _, anchor = dest.partition("#")
    path = root / page
    if not anchor or not path.is_file():
        return [f"{where}: {dest} is not a heading of a results-log page"]
    recorded = entry(path.read_text(encoding="utf-8"), anchor)
    if recorded is None:
        return [f"{where}: {page} has no entry #{anchor}"]
    problems = []
    for kind, pattern in (("date", DATE), ("commit", COMMIT)):
        named = pattern.findall(LINK.sub(r"\1", naming))
        if not named:
            problems.append(f"{where}: names no {kind} of its run beside the link")
        problems += [
            f"{where}: {kind} {n} is not in {dest}"
            for n in named
            if not re.search(rf"\b{re.escape(n)}\b", recorded)
        ]
    shown = numbers(LINK.sub(r"\1", quoted))  # a link's address is no quote
    if not shown:
        problems.append(f"{where}: quotes no number")
    measured = numbers(recorded)
    for number in shown:
        if not any(quotes_number(number, r) for r in measured):
            problems.append(f"{where}: {number} is not in {dest}")
    return problems


def quote_problems(readme: str, root: Path = ROOT) -> list[str]:
    """Every way the README's quotes of runs fail their entries; [] when each number it quotes
    is in the entry it names."""
    problems = []
    demo = demo_quote(readme)
    if demo is None:
        problems.append(f'"{DEMO}": no line links the results-log entry its printout quotes')
    else:
        problems += check_quote(DEMO, demo[0], demo[1], root)
    cells = glance_quotes(readme)
    if not cells:
        problems.append(f'"{GLANCE}": no table with a "{MEASURED}" column')
    for name, cell in cells or []:
        problems += check_quote(f"{GLANCE}, {name}", cell, cell, root)
    return problems


# --- the README as it stands -----------------------------------------------------------------

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_number_the_readme_quotes_is_in_the_entry_it_names():
    assert quote_problems(README) == []


def test_the_readme_quotes_enough_to_check():
    """Not vacuous: the demo's quote shows a printout with numbers, and every row of the table
    links its entry."""
    naming, quoted = demo_quote(README)
    assert "```" in quoted and len(numbers(quoted)) >= 20
    cells = glance_quotes(README)
    assert len(cells) >= 5 and all(RESULTS in cell for _, cell in cells)


def _changed(readme: str, quoted: str) -> tuple[str, str]:
    """`readme` with the first decimal of `quoted` (in the README's text) given a digit more,
    one no entry rounds to; and that number."""
    number = next(n for n in numbers(quoted) if "." in n)
    planted = number + "37"
    start = readme.index(quoted)
    at = start + quoted.index(number)
    return readme[:at] + planted + readme[at + len(number) :], planted


def test_a_number_changed_in_the_demo_printout_is_reported():
    naming, quoted = demo_quote(README)
    code = quoted[quoted.index("```") :]  # inside the printout, not in the line naming the run
    planted, number = _changed(README, code)
    assert quote_problems(planted) == [f"{DEMO}: {number} is not in " + LINK.findall(naming)[0][1]]


def test_a_number_changed_in_the_table_is_reported():
    name, cell = glance_quotes(README)[0]
    planted, number = _changed(README, cell)
    problems = quote_problems(planted)
    assert len(problems) == 1 and problems[0].startswith(f"{GLANCE}, {name}: {number} is not in")


# --- the checker, on a README and results log made here ---------------------------------------

PAGE = """\
# Results

## The demo (2026-11-26, commit 74814db, 2 cores)

Test MSE 0.0179 ± 0.0021 at 18 parameters, 19,264 examples; alpha = 2.96 [2.62, 3.14];
m(d=4) = 1.04 [0.86, 1.30]; Holm p = 4.4e-05; converged 43 of 48 (89.6%); fell 2,000x.

```text
NO VERDICT: design checks failed: converged
```

### Six seeds (2026-11-26, commit 43fbe8a)

m_2 / m_4 = 0.793 [0.691, 0.910] at 6 seeds.

## An older run (2026-11-24, commit 01d2b49)

alpha = 2.70
"""

GOOD = """\
# Project

## What the demo prints

The design: depths 1, 2, 4 and 8 (not a quote: above the paragraph naming the run).

Recorded 2026-11-26 at commit 74814db ([results log](docs/results/x.md#{anchor})):

```text
d=4  0.0179 ± 0.0021 (18)  alpha = 2.96 [2.62, 3.14] on N = 19,264
m(d=4) = 1.04 [0.86, 1.3]  Holm p 4.4e-05  43 of 48 (89.6%)  2,000x
NO VERDICT
```

## Results at a glance

| seed | prediction | measured | held? |
|---|---|---|---|
"""
GOOD += (
    "| 000 | m = 1, `a|b` | m_2 / m_4 = 0.79 [0.69, 0.91] "
    "([2026-11-26, 43fbe8a](docs/results/x.md#six-seeds-2026-11-26-commit-43fbe8a)) | 12 |\n"
    "| 001 | - | alpha 2.7 "
    "([2026-11-24, 01d2b49](docs/results/x.md#an-older-run-2026-11-24-commit-01d2b49)) | yes |\n"
    "\n## Next\n"
)
ANCHOR = "the-demo-2026-11-26-commit-74814db-2-cores"


@pytest.fixture
def made(tmp_path):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "x.md").write_text(PAGE, encoding="utf-8")
    return tmp_path


def test_the_checker_passes_quotes_of_their_entries(made):
    assert quote_problems(GOOD.replace("{anchor}", ANCHOR), made) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        # a number changed, in the printout and in the table
        ("alpha = 2.96", "alpha = 2.97", f"{DEMO}: 2.97 is not in docs/results/x.md#{ANCHOR}"),
        ("(89.6%)", "(90.6%)", f"{DEMO}: 90.6 is not in docs/results/x.md#{ANCHOR}"),
        ("19,264", "19,265", f"{DEMO}: 19,265 is not in docs/results/x.md#{ANCHOR}"),
        ("0.79 [", "0.78 [", f"{GLANCE}, 000 | m = 1, `a|b`: 0.78 is not in docs/results/x.md#six"),
        # rounded the wrong way, or a decimal's integer part quoted as if it were the number
        ("[0.86, 1.3]", "[0.86, 1.2]", f"{DEMO}: 1.2 is not in"),
        ("alpha 2.7", "alpha 3", f"{GLANCE}, 001 | -: 3 is not in"),
        # a sign flipped
        ("p 4.4e-05", "p -4.4e-05", f"{DEMO}: -4.4e-05 is not in"),
        # a number of another run: the sub-entry below is not the entry
        ("NO VERDICT\n", "NO VERDICT 0.793\n", f"{DEMO}: 0.793 is not in"),
        # the entry named wrongly
        ("#{anchor}", "#no-such-run", f"{DEMO}: docs/results/x.md has no entry #no-such-run"),
        ("at commit 74814db", "at commit 43fbe8a", f"{DEMO}: commit 43fbe8a is not in"),
        ("Recorded 2026-11-26", "Recorded 2026-11-25", f"{DEMO}: date 2026-11-25 is not in"),
        ("Recorded 2026-11-26 at", "Recorded at", f"{DEMO}: names no date"),
        (
            "([2026-11-24, 01d2b49](docs/results/x.md#an-older-run-2026-11-24-commit-01d2b49))",
            "",
            f"{GLANCE}, 001 | -: names 0 results-log entries",
        ),
        ("([results log](docs/results/x.md#{anchor}))", "", f'"{DEMO}": no line links'),
        ("| measured |", "| found |", f'"{GLANCE}": no table with a "{MEASURED}" column'),
    ],
)
def test_the_checker_reports_what_its_entry_does_not_hold(made, old, new, problem):
    assert GOOD.count(old) == 1
    problems = quote_problems(GOOD.replace(old, new).replace("{anchor}", ANCHOR), made)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_numbers_are_read_as_written():
    text = "d=2 x705 2.12x [0.66, 1.06] 12-288 -0.5 p 4.4e-05 at 4e5, 19,264 (89.6%) m_2 log3"
    assert numbers(text) == [
        "2", "705", "2.12", "0.66", "1.06", "12", "288", "-0.5", "4.4e-05", "4e5", "19,264", "89.6"
    ]  # fmt: skip
    assert numbers("avx512f float64 6m02s 74814db 5e2ade8 on 2026-11-26 0x1f v1.2.3") == []
    assert quotes_number("0.81", "0.808") and quotes_number("1.0", "1.000")
    assert quotes_number("0.00036", "3.6e-4") and quotes_number("2,000", "2000")
    assert quotes_number("0.12", "0.125") and quotes_number("0.13", "0.125")  # either at a half
    assert not quotes_number("0.80", "0.808") and not quotes_number("2", "2.3")
    assert not quotes_number("0.8081", "0.808") and not quotes_number("-0.5", "0.5")

"""The documentation holds together: every relative link and anchor in README.md, ARCHITECTURE.md
and docs/**/*.md leads somewhere (anchors by GitHub's heading slugs), every `blocklab` command
their shell blocks show parses with the real parser (parsed only, never run), and the README
stays short. The checkers are tested on files made here, so that they can fail."""

from __future__ import annotations

import contextlib
import functools
import io
import re
import subprocess
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

from blocklab.cli import build_parser
from blocklab.cli.markdown import blocklab_argv, commands, split_fences
from blocklab.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250


def markdown_files(root: Path = ROOT) -> list[Path]:
    found = [root / "README.md", root / "ARCHITECTURE.md", *sorted((root / "docs").rglob("*.md"))]
    return [path for path in found if path.is_file()]


# --- reading Markdown as GitHub does -------------------------------------------------------------

CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.DOTALL)
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
# `](dest)` ends every inline link and image, nested ones too (`[![alt](img)](page)`)
INLINE = re.compile(
    r"\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
DEFINITION = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*(<[^>\n]*>|\S+)", re.MULTILINE)
HTML_URL = re.compile(r"<(?:a|img|source)\b[^>]*?\b(?:href|src|srcset)\s*=\s*[\"']([^\"']+)")
HTML_ID = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)", re.IGNORECASE)
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _blank(match: re.Match) -> str:
    """A match replaced by spaces, its line breaks kept: offsets and line numbers still hold."""
    return re.sub(r"[^\n]", " ", match.group(0))


def prose(text: str) -> str:
    """What links and headings are read from: no fenced blocks, code spans or HTML comments."""
    outside, _ = split_fences(text)
    return CODE_SPAN.sub(_blank, COMMENT.sub(_blank, outside))


def links(text: str) -> list[tuple[int, str]]:
    """Every link destination as (line number, destination): inline links and images, reference
    definitions, and the href / src of HTML tags."""
    body = prose(text)
    found = []
    for pattern in (INLINE, DEFINITION, HTML_URL):
        for match in pattern.finditer(body):
            dest = match.group(1).strip()
            if dest.startswith("<") and dest.endswith(">"):
                dest = dest[1:-1]
            found.append((match.start(1), body.count("\n", 0, match.start(1)) + 1, dest))
    return [(line, dest) for _, line, dest in sorted(found)]  # in the order they appear


def heading_lines(text: str) -> list[tuple[int, int, str]]:
    """(index of its first line, level, text) of every heading, ATX (`## Title`) and setext (a
    line under `===`, level 1, or `---`, level 2)."""
    outside, _ = split_fences(text)
    lines = COMMENT.sub(_blank, outside).splitlines()  # code spans kept: a heading shows them
    found = []
    for n, line in enumerate(lines):
        atx = ATX.match(line)
        if atx:
            found.append((n, len(atx[1]), atx[2] or ""))
        elif n and SETEXT.match(line) and _paragraph(lines[n - 1]) and _opens(lines, n - 1):
            found.append((n - 1, 1 if line.strip()[0] == "=" else 2, lines[n - 1].strip()))
    return found


def headings(text: str) -> list[str]:
    """The text of every heading, ATX (`## Title`) and setext (a line under `===` or `---`)."""
    return [heading for _, _, heading in heading_lines(text)]


def _opens(lines: list[str], n: int) -> bool:
    """Whether line `n` can hold a setext heading's text: after a blank line or more text."""
    return n == 0 or not lines[n - 1].strip() or _paragraph(lines[n - 1])


def _paragraph(line: str) -> bool:
    """A line that can be a setext heading's text: plain text, not a list item, table row,
    quote, heading or thematic break."""
    stripped = line.strip()
    if not stripped or line.startswith("    ") or stripped[0] in "|>#":
        return False
    return not re.match(r"^([-*+]|\d+[.)])(\s|$)", stripped) and not SETEXT.match(line)


def plain(heading: str) -> str:
    """A heading as GitHub renders its text: links and images as their text, no HTML tags, no
    emphasis marks; a code span's text kept as it is."""
    parts = re.split(r"(`+[^`]*`+)", heading)
    out = []
    for n, part in enumerate(parts):
        if n % 2:
            out.append(part.strip("`"))
            continue
        part = re.sub(r"!?\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])", r"\1", part)
        part = re.sub(r"<[^>]+>", "", part)
        part = re.sub(r"(?<![\w\\])(_{1,2})(?=\S)(.+?)(?<=\S)(?<!\\)\1(?!\w)", r"\2", part)
        out.append(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", part))
    return "".join(out)


def slug(text: str) -> str:
    """github-slugger: lowercase, drop every character but letters, marks, numbers, connector
    punctuation (the underscore), spaces and hyphens, then each space a hyphen."""
    kept = (
        c
        for c in plain(text).strip().lower()
        if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc"
    )
    return "".join(kept).replace(" ", "-")


def heading_anchors(text: str) -> list[str]:
    """Each heading's anchor, in order: its slug, a repeated one numbered -1, -2, ... as
    github-slugger numbers it."""
    occurrences: dict[str, int] = {}
    found = []
    for heading in headings(text):
        result = original = slug(heading)
        while result in occurrences:
            occurrences[original] += 1
            result = f"{original}-{occurrences[original]}"
        occurrences[result] = 0
        found.append(result)
    return found


def anchors(text: str) -> set[str]:
    """The anchors a page has: its headings' (`heading_anchors`) and the ids and names of its
    HTML tags."""
    return set(heading_anchors(text)) | set(HTML_ID.findall(prose(text)))


@functools.cache
def _anchors_of(path: Path) -> frozenset[str]:
    return frozenset(anchors(path.read_text(encoding="utf-8")))


def _ignored(path: Path, root: Path) -> bool:
    """Whether git ignores `path` (a run's output, say): a link to it works here, not on GitHub."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "check-ignore", "-q", str(path)], capture_output=True
        )
    except OSError:  # no git: nothing to ask
        return False
    return proc.returncode == 0


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """'LINE: DEST (why)' for every relative link of `path` that leads nowhere: a missing file or
    folder (relative to the file's folder; `/x` from the repository's root), one outside the
    repository or ignored by git, or an anchor that no heading of the target has."""
    root = root.resolve()
    problems = []
    for line, dest in links(path.read_text(encoding="utf-8")):
        if SCHEME.match(dest) or dest.startswith("//"):
            continue  # http, https, mailto, ...: not ours to check
        target, _, anchor = dest.partition("#")
        target = unquote(target.split("?", 1)[0])
        if not target:
            where = path
        elif target.startswith("/"):
            where = root / target.lstrip("/")
        else:
            where = path.parent / target
        where = where.resolve()
        if not where.is_relative_to(root):
            problems.append(f"{line}: {dest} (outside the repository)")
        elif not where.exists():
            problems.append(f"{line}: {dest} ({where.relative_to(root)} does not exist)")
        elif where != root and _ignored(where, root):
            problems.append(f"{line}: {dest} ({where.relative_to(root)} is ignored by git)")
        elif anchor:
            if where.is_dir() and (where / "README.md").is_file():
                where = where / "README.md"  # what GitHub shows for a folder
            markdown = where.suffix.lower() in (".md", ".markdown")
            if markdown and unquote(anchor) not in _anchors_of(where):
                name = where.relative_to(root)
                problems.append(f"{line}: {dest} (no heading of {name} has #{anchor})")
    return problems


# --- the commands shown ----------------------------------------------------------------------
# read by blocklab.cli.markdown, the reader the timings file's examples use too


@functools.lru_cache(maxsize=1)
def _parser():
    return build_parser()


def parse_error(command: str, root: Path = ROOT) -> str | None:
    """Why the parser refuses `command` (its message), or None when it parses. `--help` and
    `--version` print and exit 0: that counts as parsing. A `--config` or `--import` file in a
    folder of the repository (`examples/...`) must exist there: the commands run from its root.
    A bare name (`my_factories.py`) is the reader's own file."""
    try:
        argv = blocklab_argv(command)
    except ValueError as exc:
        return f"cannot be split into words: {exc}"
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            args = _parser().parse_args(argv)
    except UserError as exc:
        return str(exc)
    except SystemExit as exc:
        return None if exc.code in (0, None) else f"exit {exc.code}: {sink.getvalue().strip()}"
    named = [args.config] if getattr(args, "config", None) else []
    named += args.imports or []
    ours = [n for n in named if "/" in n and (root / n.split("/", 1)[0]).is_dir()]
    missing = [name for name in ours if not (root / name).is_file()]
    return f"no such file in the repository: {', '.join(missing)}" if missing else None


# --- the documentation as it stands ----------------------------------------------------------

FILES = markdown_files()
IDS = [str(path.relative_to(ROOT)) for path in FILES]


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_links_and_anchors_resolve(path):
    problems = broken_links(path)
    assert not problems, f"{path.relative_to(ROOT)}: broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_commands_shown_parse(path):
    wrong = []
    for line, command in commands(path.read_text(encoding="utf-8")):
        error = parse_error(command)
        if error:
            wrong.append(f"{line}: {command}\n    -> {error}")
    assert not wrong, f"{path.relative_to(ROOT)}: commands the parser refuses:\n" + "\n".join(wrong)


def test_readme_is_short():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}"


def test_the_docs_show_commands():
    """The command check has something to check: the README shows the demo."""
    shown = [c for path in FILES for _, c in commands(path.read_text(encoding="utf-8"))]
    assert any(blocklab_argv(c)[:1] == ["demo"] for c in shown), shown


# --- the checkers themselves -----------------------------------------------------------------

PAGE = """\
# Über größe

## What's new? (v2)

## `blocklab demo`, _fast_ and __snake_case__

## Notes

## Notes

Good: [other](other.md), [its part](other.md#a-part), [here](#notes-1), [top](#über-größe),
[v2](#whats-new-v2), [demo](#blocklab-demo-fast-and-snake_case), ![figure](fig.png "Fig"),
[web](https://example.com/missing.md), [mail](mailto:a@b.c), [folder](sub/), [ref][r].

Broken: [missing](missing.md), [bad part](other.md#no-such-part), [bad here](#notes-2),
![gone](img/gone.png), [case](#Notes), [out](../../../../outside.md).

Ignored: `[code](nowhere.md)` and <!-- [comment](nowhere.md) -->

```bash
cat [fenced](nowhere.md)
```

[r]: other.md#another
"""


def test_the_link_checker_reports_broken_links_and_anchors(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "fig.png").write_bytes(b"")
    (tmp_path / "other.md").write_text("# Title\n\nA part\n------\n\n## Another\n")
    page = tmp_path / "page.md"
    page.write_text(PAGE, encoding="utf-8")
    problems = broken_links(page, root=tmp_path)
    assert [p.split(" (")[0] for p in problems] == [
        "15: missing.md",
        "15: other.md#no-such-part",
        "15: #notes-2",
        "16: img/gone.png",
        "16: #Notes",
        "16: ../../../../outside.md",
    ], problems
    assert "does not exist" in problems[0] and "no heading of other.md" in problems[1]
    assert "outside the repository" in problems[-1]


def test_slugs_follow_github():
    assert slug("Set-up: two commands") == "set-up-two-commands"
    assert slug("`blocklab sanford qsa`") == "blocklab-sanford-qsa"
    assert slug("Seed 000 — the degree sweep") == "seed-000--the-degree-sweep"
    assert slug("Why h(d) > 1?") == "why-hd--1"
    assert slug("[Guide](docs/guide/README.md) & more") == "guide--more"
    assert anchors("# A\n\n# A\n\n# A-1\n") == {"a", "a-1", "a-1-1"}
    assert anchors("```\n# not a heading\n```\n<a name='here'></a>\n") == {"here"}


SHELL_PAGE = """\
```bash
# a comment
blocklab demo --seeds 2  # trailing comment
.venv/bin/blocklab runs list --out runs/demo | head -2
blocklab degree-sweep --degrees 2 3 \\
    --budgets 45 90 2>/dev/null > out.txt
python3 -m venv .venv && .venv/bin/blocklab demo --quiet; echo done
OMP_NUM_THREADS=1 blocklab demo --seed 3
blocklab sanford qsa --qs 'a|b'
```

```console
$ blocklab theory --degrees 2 e
blocklab 0.1.0
```

```text
blocklab not --a command
```

```python
blocklab = "not shell"
```
"""


def test_the_command_checker_reads_shell_blocks_and_reports_refusals():
    found = commands(SHELL_PAGE)
    assert found == [
        (3, "blocklab demo --seeds 2"),
        (4, ".venv/bin/blocklab runs list --out runs/demo"),
        (5, "blocklab degree-sweep --degrees 2 3 --budgets 45 90"),
        (7, ".venv/bin/blocklab demo --quiet"),
        (8, "OMP_NUM_THREADS=1 blocklab demo --seed 3"),
        (9, "blocklab sanford qsa --qs 'a|b'"),
        (13, "blocklab theory --degrees 2 e"),
    ], found
    errors = {command: parse_error(command) for _, command in found}
    assert errors.pop("OMP_NUM_THREADS=1 blocklab demo --seed 3") == (
        "blocklab demo: unrecognized argument --seed (did you mean --seeds?)"
    )
    assert not any(errors.values()), errors
    assert parse_error("blocklab sanford qsaa") and parse_error("blocklab demo --workers 0")
    assert parse_error("blocklab demo --config examples/nowhere.toml") == (
        "no such file in the repository: examples/nowhere.toml"
    )
    assert parse_error("blocklab check --import examples/nowhere.py --import mine.py") == (
        "no such file in the repository: examples/nowhere.py"
    )
    assert parse_error("blocklab --help") is None and parse_error("blocklab nope --help")
    assert blocklab_argv("python -m blocklab.cli.docs --check") is None

"""The examples the documentation gives, read from its Markdown: every `blocklab` command in a
shell block of README.md and the guide's pages (`PAGES`), and every Python block there that
calls `run(`. The timings file (`blocklab.cli.timings`) keys each example's time by `key`: the
command line as written, normalized (`blocklab` for `.venv/bin/blocklab`, `--flag=value` as two
words, and for an experiment's command no `--out DIR` or `--quiet`, which change where a run
writes and what it shows, not what it runs); a Python block by its code as `ast.unparse` writes
it. A command that is exactly a command's quick defaults or a named form (`blocklab mad
--sweep-width`) has that command's key (`command_key`).

An example too long to time here (an hours-long `--full` run, a cluster's executor) states next
to it the timed command that stands for it (its tiny form: small flags, the same code path), in
a comment on its line or on the comment lines right below it: `# timed: COMMAND (WALL)`, with
the wall time that command's entry holds (`targets`: what must be timed). `untimed` names every
example with neither a time nor such a link, a link to no entry, and a stated time that is not
the entry's; `stale` every example entry whose config is not the one its command line resolves
to now; `unused` every example entry that nothing shows or names. The examples' test runs all
three, and `benchmarks/command_times.py --examples` times what `targets` names.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blocklab.cli import timings
from blocklab.cli.markdown import blocklab_argv, shell_commands, split_fences, split_line
from blocklab.experiments import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[3]  # the checkout: its README.md and docs/
PAGES = ("README.md", "docs/*.md", "docs/guide/*.md")
LINK = re.compile(r"\btimed: (?P<command>.+?) \((?P<wall>[^()]+)\)")
# flags of an experiment's command that change where its run writes and what it shows, not
# what it runs: the key leaves them out (the value after `--out` with it)
UNKEYED = {"--out": 1, "--quiet": 0}
SCRIPT_EXAMPLES = f"python {timings.SCRIPT} --examples --only"


@dataclass(frozen=True)
class Example:
    """One example: its page and line, its key, the arguments after `blocklab` (a shell
    command) or the code (a Python block), and the link its page states (the stand-in's key
    and the wall time stated beside it), if any."""

    page: str
    line: int
    key: str
    argv: tuple[str, ...] | None = None
    code: str | None = None
    link: str | None = None
    stated: str | None = None

    def where(self) -> str:
        return f"{self.page}:{self.line}"


# --- keys ----------------------------------------------------------------------------------------


def _experiment_words(argv: list[str]) -> str | None:
    """The words of the experiment command `blocklab ARGV` runs ("sanford qsa"), or None where
    it runs no experiment (`check`, `report`)."""
    ran = {c.words for name in EXPERIMENTS.names() for c in EXPERIMENTS.get(name).commands}
    return next((w for w in (" ".join(argv[:2]), " ".join(argv[:1])) if w in ran), None)


def key(argv: Iterable[str]) -> str:
    """The timings file's key of `blocklab ARGV` (the module's docstring says what it leaves
    out)."""
    words: list[str] = []
    for word in argv:
        flag, eq, value = word.partition("=")
        words += [flag, value] if word.startswith("--") and eq else [word]
    if _experiment_words(words):
        kept, i = [], 0
        while i < len(words):
            if words[i] in UNKEYED:
                i += 1 + UNKEYED[words[i]]
                continue
            kept.append(words[i])
            i += 1
        words = kept
    return shlex.join(["blocklab", *words])


def command_key(words: str, form: str = "") -> str:
    """The key of a command's quick defaults (`form` "") or of its named form."""
    return key([*words.split(), *([f"--{form.replace('_', '-')}"] if form else [])])


def entry_key(entry: dict[str, Any]) -> str:
    """An entry's key: an example's, or its command's at its form."""
    if "example" in entry:
        return entry["example"]
    return command_key(entry["command"], entry["form"])


# --- the examples ---------------------------------------------------------------------------


def _link(comment: str) -> tuple[str | None, str | None]:
    found = LINK.search(comment)
    if found is None:
        return None, None
    argv = blocklab_argv(found["command"])
    return (key(argv) if argv is not None else found["command"]), found["wall"].strip()


def _calls_run(tree: ast.AST) -> bool:
    """Whether the code calls `run(...)` or `blocklab.run(...)` (not a `def run`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "run") or (
                isinstance(f, ast.Attribute)
                and f.attr == "run"
                and ast.unparse(f.value) in ("blocklab", "blocklab.api", "api")
            ):
                return True
    return False


def read(text: str, page: str) -> list[Example]:
    """The examples of one page's text, in order."""
    found = []
    for line, command, comment in shell_commands(text):
        link, stated = _link(comment)
        try:
            argv = blocklab_argv(command) or []
        except ValueError:
            continue  # unbalanced quotes: the docs' parse test names it
        found.append(Example(page, line, key(argv), argv=tuple(argv), link=link, stated=stated))
    for info, start, body in split_fences(text)[1]:
        if (info.split() or [""])[0].lower() != "python":
            continue
        code = "\n".join(body)
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue  # a fragment, not a script
        if _calls_run(tree):
            comments = " ".join(c for _, c in (split_line(b) for b in body) if c)
            link, stated = _link(comments)
            found.append(
                Example(page, start, ast.unparse(tree), code=code, link=link, stated=stated)
            )
    return sorted(found, key=lambda e: e.line)


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and the guide's pages: the pages whose examples must be timed."""
    found: list[Path] = []
    for pattern in PAGES:
        found += sorted(root.glob(pattern))
    return [p for p in dict.fromkeys(found) if p.is_file()]


def find(root: Path = ROOT) -> list[Example]:
    """Every example of the pages under `root`."""
    out = []
    for path in pages(root):
        out += read(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
    return out


def targets(found: list[Example]) -> list[Example]:
    """What must be timed for `found`: each example with no link, and the stand-in each link
    names (at the page and line of the example that names it), once each, in order."""
    out: dict[str, Example] = {}
    for ex in found:
        if ex.link is None:
            out.setdefault(ex.key, ex)
        elif ex.link.startswith("blocklab "):
            argv = tuple(shlex.split(ex.link)[1:])
            out.setdefault(ex.link, Example(ex.page, ex.line, ex.link, argv=argv))
    return list(out.values())


def untimed(found: list[Example], entries: list[dict[str, Any]]) -> list[str]:
    """'page:line: what is wrong' for each example with neither an entry of its key nor a link,
    a link to a key no entry holds, or a time stated beside its link that is not the entry's."""
    held = {entry_key(e): e for e in entries}
    out = []
    for ex in found:
        if ex.link is None:
            if ex.key not in held:
                out.append(
                    f"{ex.where()}: `{_short(ex.key)}` has no time: time it with "
                    f"`{SCRIPT_EXAMPLES} PATTERN`, or state the timed command that stands for "
                    "it beside it (`# timed: COMMAND (WALL)`)"
                )
            continue
        entry = held.get(ex.link)
        if entry is None:
            out.append(f"{ex.where()}: links to `{ex.link}`, which no entry of timings.json holds")
        elif ex.stated != timings.wall(entry["seconds"]):
            out.append(
                f"{ex.where()}: states `{ex.link}` took {ex.stated}; its entry: "
                f"{timings.wall(entry['seconds'])}"
            )
    return out


def unused(found: list[Example], entries: list[dict[str, Any]]) -> list[str]:
    """Each example entry no page shows or names as a stand-in any more: its time stands for
    nothing (a command's entries are `--help`'s, and stay)."""
    asked = {ex.key for ex in targets(found)}
    return [
        f"timings.json holds `{_short(e['example'])}`, which no page shows or names: remove it"
        for e in entries
        if "example" in e and e["example"] not in asked
    ]


def _short(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else text
    return first if first == text.strip() else first + " ..."


# --- what an example runs: its config ----------------------------------------------------


def fingerprint(example: Example, root: Path = ROOT) -> str | None:
    """The fingerprint (`timings.config_fingerprint`) of the config the example's first run
    resolves to now, its plugins loaded; None where it runs no experiment (`check`, `report`)
    or runs one with keywords its code computes."""
    if example.code is not None:
        found = _python_call(example.code)
        if found is None:
            return None
        words, given = found
        return _resolved(words, given, root)
    words = _experiment_words(list(example.argv or ()))
    if words is None or "--help" in example.argv:
        return None
    from blocklab import launch, plugins
    from blocklab.cli import build_parser
    from blocklab.cli import experiment as command

    argv = [_rooted(a, b, root) for a, b in zip(("", *example.argv), example.argv, strict=False)]
    with contextlib.redirect_stdout(io.StringIO()):
        args = build_parser().parse_args(argv)

    plugins.load(args.imports or ())
    found, _ = launch.find(words)
    given = {"form": command.form(found, args), "config_file": args.config}
    return _config(words, given, command.flags(found, args))


def _rooted(before: str, word: str, root: Path) -> str:
    """A `--config` or `--import` file named from the checkout's root, as its absolute path."""
    if before in ("--config", "--import") and (root / word).is_file():
        return str(root / word)
    return word


def _python_call(code: str) -> tuple[str, dict[str, Any]] | None:
    """(the experiment's words, its keywords) of the code's first `run(...)`: literal keywords,
    and `**name` where the code binds `name` to a dict of literals; None for any other."""
    tree = ast.parse(code)
    bound: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            with contextlib.suppress(ValueError, TypeError, SyntaxError):
                bound[ast.unparse(node.targets[0])] = _literal_dict(node.value)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _calls_run(n)]
    if not calls:
        return None
    call = min(calls, key=lambda n: (n.lineno, n.col_offset))
    try:
        words = ast.literal_eval(call.args[0])
        given: dict[str, Any] = {}
        for kw in call.keywords:
            if kw.arg is not None:
                given[kw.arg] = ast.literal_eval(kw.value)
            elif isinstance(kw.value, ast.Name) and kw.value.id in bound:
                given.update(bound[kw.value.id])
            else:
                return None
    except (ValueError, TypeError, SyntaxError, IndexError):
        return None
    return words, given


def _literal_dict(node: ast.expr) -> dict[str, Any]:
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "dict" and not node.args:
        return {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    value = ast.literal_eval(node)
    if not isinstance(value, dict):
        raise ValueError("not a dict")
    return value


def _resolved(words: str, given: dict[str, Any], root: Path) -> str:
    """The fingerprint of `blocklab.run(words, **given)`'s config."""
    from blocklab import api, launch, plugins

    runs = {"form", "config_file", "imports"}
    options = {k: v for k, v in given.items() if k in runs}
    config = {k: v for k, v in given.items() if k not in api.run.__kwdefaults__ and k != "out"}
    plugins.load(options.get("imports", ()), base=root)
    found, _ = launch.find(words)
    return _config(words, options, api._given(found, config))


def _config(words: str, options: dict[str, Any], given: dict[str, Any]) -> str:
    from blocklab import config as cfgmod
    from blocklab import launch, plugins

    toml = options.get("config_file")
    plugins.load(cfgmod.imports(toml))
    found, _ = launch.find(words)
    cfg = launch.resolve(found, words, options.get("form"), toml, given)
    return timings.config_fingerprint(cfg)


def stale(entries: list[dict[str, Any]], found: list[Example], root: Path = ROOT) -> list[str]:
    """Each example entry whose config fingerprint is not that of the config its example's
    command line resolves to now (its defaults changed since it was timed), naming the script
    that times it again."""
    by_key = {ex.key: ex for ex in found}
    out = []
    for entry in entries:
        if "example" not in entry:
            continue
        ex = by_key.get(entry["example"])
        if ex is None:
            ex = _from_entry(entry)
        if fingerprint(ex, root) != entry["config_fingerprint"]:
            out.append(
                f"`{_short(ex.key)}` was timed with another config than it runs now: time it "
                f"again with `{SCRIPT_EXAMPLES} {shlex.quote(re.escape(_short(ex.key)))}`"
            )
    return out


def _from_entry(entry: dict[str, Any]) -> Example:
    """An example entry's example where no page shows it any more (a stand-in): its command
    line from the key."""
    text = entry["example"]
    if text.startswith("blocklab "):
        return Example("timings.json", 0, text, argv=tuple(shlex.split(text)[1:]))
    return Example("timings.json", 0, text, code=text)

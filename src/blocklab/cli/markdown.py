"""Reading the documentation's Markdown as GitHub renders it: its fenced blocks
(`split_fences`), and the `blocklab` commands its shell blocks show (`commands`, and
`shell_commands` with each command's comments), which the docs' tests parse and the timings
file's examples (`blocklab.cli.examples`) are read from. No blocklab import here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

SHELLS = {"", "bash", "sh", "shell", "console", "zsh"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def split_fences(text: str) -> tuple[str, list[tuple[str, int, list[str]]]]:
    """(the text with fenced blocks blanked, line for line; the blocks as (info, the line number
    of their first content line, their lines)). An unclosed fence runs to the end."""
    prose, blocks = [], []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened or (opened["fence"][0] == "`" and "`" in opened["info"]):
            prose.append(lines[i])
            i += 1
            continue
        fence, indent = opened["fence"], len(opened["indent"])
        body, start = [], i + 2
        prose.append("")
        i += 1
        while i < len(lines):
            closing = lines[i].strip()
            prose.append("")
            i += 1
            if closing and set(closing) == {fence[0]} and len(closing) >= len(fence):
                break
            body.append(lines[i - 1][indent:] if lines[i - 1][:indent].isspace() else lines[i - 1])
        blocks.append((opened["info"].strip(), start, body))
    return "\n".join(prose), blocks


def split_line(line: str) -> tuple[list[str], str]:
    """A shell line's simple commands, split at `|`, `&&`, `||`, `;` and `&` outside quotes,
    each cut at its first redirection (`>`, `2>`, `<`); and its `#` comment ("" without)."""
    out: list[str] = []
    current: list[str] = []
    quote, cut, i, comment = "", False, 0, ""
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"' and i + 1 < len(line):
                c, i = c + line[i + 1], i + 1
            elif c == quote:
                quote = ""
        elif c == "\\" and i + 1 < len(line):
            c, i = c + line[i + 1], i + 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (not current or current[-1].isspace()):
            comment = line[i + 1 :].strip()
            break
        elif c in "|&;":
            out.append("".join(current))
            current, cut = [], False
            i += 1
            continue
        elif c in "<>":
            text = "".join(current)
            current, cut = list(re.sub(r"(^|\s)\d+$", r"\1", text)), True  # `2>` names a fd
        if not cut:
            current.append(c)
        i += 1
    out.append("".join(current))
    return [s.strip() for s in out if s.strip()], comment


def segments(line: str) -> list[str]:
    """A shell line's simple commands (`split_line`), its comment left out."""
    return split_line(line)[0]


def blocklab_argv(segment: str) -> list[str] | None:
    """The arguments after `blocklab` (`.venv/bin/blocklab`, `python -m blocklab`), or None for
    a command that is not blocklab's."""
    words = shlex.split(segment)
    while words and ASSIGNMENT.match(words[0]):
        words.pop(0)  # FOO=1 blocklab ...
    if words and Path(words[0]).name == "blocklab":
        return words[1:]
    module = words[1:3] == ["-m", "blocklab"]  # not `-m blocklab.cli.docs`
    if module and Path(words[0]).name.startswith("python"):
        return words[3:]
    return None


def shell_commands(text: str) -> list[tuple[int, str, str]]:
    """(line number, command, its comments) for every `blocklab` command in the shell blocks of
    `text`: the comment of its line and of the comment-only lines right below it."""
    _, blocks = split_fences(text)
    found = []
    for info, start, body in blocks:
        if (info.split() or [""])[0].lower() not in SHELLS:
            continue
        prompted = any(line.lstrip().startswith("$ ") for line in body)
        n = 0
        while n < len(body):
            first, line = n, body[n]
            while line.rstrip().endswith("\\") and n + 1 < len(body):
                n += 1
                line = line.rstrip()[:-1].rstrip() + " " + body[n].strip()
            n += 1
            line = line.strip()
            if prompted:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            parts, comment = split_line(line)
            below = n
            while below < len(body) and body[below].lstrip().startswith("#"):
                comment += " " + body[below].lstrip()[1:].strip()
                below += 1
            for segment in parts:
                try:
                    argv = blocklab_argv(segment)
                except ValueError:  # unbalanced quotes: only a blocklab command is ours
                    argv = [] if re.match(r"^(\S*/)?blocklab\b", segment) else None
                if argv is not None:
                    found.append((start + first, segment, comment.strip()))
    return found


def commands(text: str) -> list[tuple[int, str]]:
    """(line number, command) for every `blocklab` command in the shell blocks of `text`: bash,
    sh, console or unlabelled; `\\` continuations joined; where a block shows `$ ` prompts, only
    the prompted lines are commands (the others are output)."""
    return [(line, command) for line, command, _ in shell_commands(text)]

"""Configs are frozen dataclasses: defaults, then a TOML file, then command-line flags.

The flags are generated from the dataclass fields, so every option is declared once. A TOML
file's top-level `import = [...]` names plugins (`blocklab.plugins`) rather than a config key:
the command loads them (`imports`) before the config is resolved, and `resolve` skips the key.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from blocklab import options, plugins
from blocklab.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

D = TypeVar("D")


def load_toml(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise UserError(f"cannot read config {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"config {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise UserError(
            f"config {path} is not UTF-8 text (byte {exc.start}): TOML files are UTF-8; "
            "save it as UTF-8"
        ) from None


def number(kind: type, **rules: Any):
    """An argparse `type` for an int or a float held to `rules` (those of `options.meta`), so a
    bad value is a one-line error naming its flag before anything runs. It keeps `kind` and
    `rules`, which tests read."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"needs {_NAMES[kind]}, got {text!r}") from None
        try:
            options.check_value("the value", value, kind, rules)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    parse.__name__ = kind.__name__
    parse.kind, parse.rules = kind, rules  # type: ignore[attr-defined]
    return parse


_NAMES = {int: "an integer", float: "a number"}


def invalid_choice(value: Any, choices: Any) -> str:
    """One line naming the choices, and the one likely meant where one is close."""
    names = [str(c) for c in choices]
    close = difflib.get_close_matches(str(value), names, n=1)
    hint = f": did you mean {close[0]!r}?" if close else ""
    return f"invalid choice {str(value)!r}{hint} (choose from {', '.join(names)})"


def _each_of(choices: tuple[str, ...]):
    """An argparse `type` for a list flag's words: each comma-separated name one of `choices`
    (argparse's own `choices` would refuse '--tasks match2,match3', which the flags accept)."""

    def parse(text: str) -> str:
        for name in options.split_list(text):
            if name not in choices:
                raise argparse.ArgumentTypeError(invalid_choice(name, choices))
        return text

    parse.__name__ = "choice"
    return parse


IMPORT_KEY = "import"


def imports(path: str | Path | None) -> list[str]:
    """The plugins a TOML config names, files resolved from the config's own folder."""
    if not path:
        return []
    value = load_toml(path).get(IMPORT_KEY, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"config {path}: {IMPORT_KEY} must be a list of module names or .py files")
    base = Path(path).resolve().parent
    return [plugins.canonical(v, base) for v in value]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_flags(
    parser: Any,
    cls: type,
    skip: tuple[str, ...] = (),
    defaults: Any = None,
    groups: Mapping[str, Any] | None = None,
) -> None:
    """One flag per field (nested dataclass fields flattened); defaults are None = 'not given'.
    The help shows the values of `defaults` (an instance), else the fields' own defaults, so a
    nested config shows what its parent sets, not its class defaults. `parser` is a parser or an
    argument group; `groups` maps a nested field's name (`train`) to where its flags go instead,
    so `--help` shows them under their own heading. A field with `choices` shows and checks
    them as it is parsed."""
    groups = groups or {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if f.name in skip or typing.get_origin(tp) is dict or tp is dict:
            continue
        if defaults is not None:
            default = getattr(defaults, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        else:
            default = f.default_factory()
        if dataclasses.is_dataclass(tp):
            add_flags(groups.get(f.name, parser), tp, skip, default, groups)
            continue
        shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
        if shown == "":  # an empty list is none, an empty text is ''
            shown = "none" if isinstance(default, tuple) else "''"
        help_text = f"{f.metadata.get('help', f.name)} (default: {shown})".replace("%", "%%")
        kw: dict[str, Any] = {"default": None, "help": help_text}
        choices = f.metadata.get("choices")
        if tp is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(tp) is tuple:
            kw["nargs"] = "*"  # `--baselines` alone means none
            kw["metavar"] = f.name.upper().rstrip("S") or "X"
            if choices:
                kw["type"] = _each_of(tuple(choices))
                kw["metavar"] = "{" + ",".join(choices) + "}"
        elif choices:
            kw["choices"] = tuple(choices)
        parser.add_argument(_flag(f.name), dest=f.name, **kw)


def flags(cls: type, skip: tuple[str, ...] = ()) -> dict[str, tuple[str, Any]]:
    """The command line's flag of every field of the config class `cls`, as
    `add_flags` makes them (a nested config's fields flattened): flag -> (key, type)."""
    out: dict[str, tuple[str, Any]] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if f.name in skip or tp is dict or typing.get_origin(tp) is dict:
            continue
        if dataclasses.is_dataclass(tp):
            sub = flags(tp, skip)
            out.update({flag: (f"{f.name}.{key}", t) for flag, (key, t) in sub.items()})
        else:
            out[_flag(f.name)] = (f.name, tp)
    return out


def _word(value: Any) -> str:
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def flag_words(flag: str, value: Any, tp: Any) -> list[str]:
    """A setting as the command line gives it."""
    if tp is bool:
        return [flag if value else f"--no-{flag[2:]}"]
    if isinstance(value, tuple):  # `--budgets` alone: none
        return [flag, *map(_word, value)]
    return [flag, _word(value)]


def _is_flag(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return word.startswith("-")
    return False  # a negative number is a value


def without(words: list[str], dropped: dict[str, Any]) -> list[str]:
    """`words` (a command's) without the flags `dropped` (flag -> the field's type) and their
    values."""
    out, i = [], 0
    while i < len(words):
        word = words[i]
        i += 1
        name = word.split("=", 1)[0]
        if name.startswith("--no-") and dropped.get(f"--{name[5:]}") is bool:
            continue
        if name not in dropped:
            out.append(word)
        elif "=" in word or dropped[name] is bool:
            continue
        elif typing.get_origin(dropped[name]) is tuple:  # a list runs to the next flag
            while i < len(words) and not _is_flag(words[i]):
                i += 1
        else:
            i += 1
    return out


def overrides(args: argparse.Namespace, cls: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The flags the user gave, nested like the dataclass."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            sub = overrides(args, tp, skip)
            if sub:
                out[f.name] = sub
        elif getattr(args, f.name, None) is not None:
            value = getattr(args, f.name)
            if isinstance(value, list):  # '--degrees 2,3 e' and '--degrees 2 3 e' mean the same
                value = [p for v in value for p in options.split_list(v)]
            out[f.name] = value
    return out


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def resolve(
    cls: type[D], defaults: D, toml_path: str | None, flags: dict[str, Any], what: str = "config"
) -> D:
    """defaults < TOML file < flags, tables merged key by key (a flag's task option changes that
    option of the defaults' task; another task starts from the config's OTHER_TASK); unknown
    keys anywhere fail with a hint, and so do keys the config does not read as it stands (its
    `unused()`: {dotted key: what sets that instead})."""
    table = load_toml(toml_path) if toml_path else {}
    table.pop(IMPORT_KEY, None)  # plugins, loaded by the command before this (`imports`)
    given = merge(table, flags)
    base = dataclasses.asdict(defaults)
    if given.get("task", base.get("task")) != base.get("task"):
        # the defaults chosen for their task (its options, how many targets) are not another's:
        # that one starts from the config's OTHER_TASK (by default, no task options)
        base.update(getattr(cls, "OTHER_TASK", {"task_options": {}}))
    if hasattr(cls, "yield_to"):  # a form's values that what is given takes the place of
        cls.yield_to(base, given)
    cfg = options.build(cls, merge(base, given), what="config")
    for key, why in unused(cfg).items():
        if _has(given, key.split(".")):
            raise UserError(f"{key} is not used by {what}: {why}")
    return cfg


def unused(cfg: Any) -> dict[str, str]:
    """{dotted key: what sets that part instead} for the keys a config does not read as it
    stands: its own `unused()` and those of the configs it holds (a TrainConfig's)."""
    out = dict(cfg.unused()) if hasattr(cfg, "unused") else {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update({f"{f.name}.{k}": why for k, why in unused(value).items()})
    return out


def _has(mapping: Any, path: list[str]) -> bool:
    head, *rest = path
    if not isinstance(mapping, dict) or head not in mapping:
        return False
    return _has(mapping[head], rest) if rest else True

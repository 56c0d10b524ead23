"""Frozen option dataclasses from TOML mappings or CLI `key=value` strings; unknown keys fail.

A field states what values it takes in its metadata (`meta`), and `validate`, which every config's
`__post_init__` calls, holds each instance to it: the command line, TOML files and Python build
configs the same way, so they share one check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from blocklab.errors import UserError

D = TypeVar("D")


def _unknown(key: str, known: list[str], what: str) -> UserError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return UserError(f"unknown {what} option {key!r}{hint} (known: {', '.join(known) or 'none'})")


def check_keys(given: Mapping[str, Any], known: list[str], what: str) -> None:
    """Refuse the first key of `given` not in `known`, with the nearest known name, if one is
    near, and every known one (a block's options, which its constructor names)."""
    for key in given:
        if key not in known:
            raise _unknown(key, sorted(known), what)


def _coerce(value: Any, tp: Any, key: str, what: str) -> Any:
    """Turn a CLI string (or a TOML value) into the field's declared type."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise UserError(f"{what} option {key!r} needs a table of {tp.__name__} options")
        return build(tp, value, what=key)
    if tp is dict or origin is dict:
        if not isinstance(value, Mapping):
            raise UserError(f"{what} option {key!r} needs a table, got {value!r}")
        return dict(value)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            return None
        return _coerce(value, args[0], key, what)
    if origin in (tuple, list):
        (inner, *_) = typing.get_args(tp) or (Any,)
        if isinstance(value, str):
            value = split_list(value)
        if not isinstance(value, (list, tuple)):  # a TOML scalar where a list belongs
            raise UserError(f"{what} option {key!r} needs a list, got {value!r} (e.g. [{value!r}])")
        return tuple(_coerce(v, inner, key, what) for v in value)
    try:
        if tp is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if tp is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if tp is float:
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
            if not math.isfinite(out):
                raise UserError(f"{what} option {key!r} must be a finite number, got {value!r}")
            return out
        if tp is str:
            # a TOML number may name something (degrees = [2, 3]); a list or a table does not
            if isinstance(value, (bool, list, tuple, Mapping)):
                raise ValueError
            return str(value)
    except UserError:
        raise
    except (TypeError, ValueError):
        name = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
        raise UserError(f"{what} option {key!r} needs {name.get(tp, tp)}, got {value!r}") from None
    return value


def build(cls: type[D], values: Mapping[str, Any] | None = None, what: str = "") -> D:
    """Instantiate the frozen dataclass `cls` from `values`, coercing types; unknown keys fail."""
    values = dict(values or {})
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            home = _nested_home(cls, key)
            if home:  # `norm = ...` at the top of a file whose config nests it under [shape]
                raise UserError(
                    f"{what or cls.__name__} option {key!r} belongs in the [{home}] table "
                    f"({home}.{key})"
                )
            raise _unknown(key, sorted(fields), what or cls.__name__)
        kwargs[key] = _coerce(value, hints[key], key, what or cls.__name__)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{what or cls.__name__}: {exc}") from None


def _nested_home(cls: type, key: str) -> str | None:
    """The field of `cls` holding a nested config that has `key`, if one does."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp) and key in {g.name for g in dataclasses.fields(tp)}:
            return f.name
    return None


RULES = ("ge", "gt", "le", "lt", "choices", "min_len", "unbounded")


def meta(help: str, **rules: Any) -> dict[str, Any]:
    """A field's metadata: its help line and the values it takes, which `validate` enforces.
    Numbers (or each element of a tuple of numbers): `ge`, `gt`, `le`, `lt`, or `unbounded=True`
    for a number of any sign; names: `choices`; tuples: `min_len` (1 unless stated). Every number
    must be finite."""
    unknown = set(rules) - set(RULES)
    if unknown:
        raise TypeError(f"unknown field rules {sorted(unknown)} (known: {', '.join(RULES)})")
    return {"help": help, **rules}


_OPS = {"ge": (">=", float.__ge__), "gt": (">", float.__gt__)}
_OPS |= {"le": ("<=", float.__le__), "lt": ("<", float.__lt__)}


def check_value(name: str, value: Any, tp: Any, rules: Mapping[str, Any]) -> None:
    """Raise a ValueError naming `name` unless `value` is of type `tp` and keeps `rules`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
        origin = typing.get_origin(tp)
    if origin in (tuple, list):
        if not isinstance(value, (tuple, list)):
            raise ValueError(f"{name} must be a list, got {value!r}")
        least = rules.get("min_len", 1)
        if len(value) < least:
            raise ValueError(f"{name} needs at least {least} value(s), got {len(value)}")
        (inner, *_) = typing.get_args(tp) or (Any,)
        for v in value:
            _check_one(f"each of {name}", v, inner, rules)
    elif dataclasses.is_dataclass(tp) or tp is dict or origin is dict:
        want = tp if dataclasses.is_dataclass(tp) else Mapping
        if not isinstance(value, want):
            raise ValueError(f"{name} must be a {getattr(want, '__name__', want)}, got {value!r}")
    else:
        _check_one(name, value, tp, rules)


def _check_one(name: str, value: Any, tp: Any, rules: Mapping[str, Any]) -> None:
    if tp in (int, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or (tp is int and not isinstance(value, int)):
            raise ValueError(
                f"{name} must be {'an integer' if tp is int else 'a number'}, got {value!r}"
            )
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
        for rule, (sign, holds) in _OPS.items():
            if rule in rules and not holds(float(value), float(rules[rule])):
                raise ValueError(f"{name} must be {sign} {rules[rule]:g}, got {value!r}")
    elif tp in (bool, str) and not isinstance(value, tp):
        raise ValueError(
            f"{name} must be {'true or false' if tp is bool else 'a string'}, got {value!r}"
        )
    if "choices" in rules and value not in rules["choices"]:
        raise ValueError(f"{name} must be one of {', '.join(rules['choices'])}, got {value!r}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def validate(obj: Any) -> None:
    """Hold every field of the config dataclass `obj` to its type and its metadata (`meta`)."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        check_value(f.name, getattr(obj, f.name), hints[f.name], f.metadata)


def split_list(text: str) -> list[str]:
    """Split on commas outside brackets: '2,[3,2],f(n=2,h=1)' -> ['2', '[3,2]', 'f(n=2,h=1)']."""
    parts, depth, cur = [], 0, ""
    for ch in str(text):
        depth += (ch in "[(") - (ch in "])")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def parse_pairs(pairs: list[str] | None, what: str) -> dict[str, str]:
    """`["n=8", "rank=4"]` -> {"n": "8", "rank": "4"}, for `--task-option n=8`."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"{what} option {pair!r} is not of the form key=value")
        out[key.strip()] = value.strip()
    return out


@contextlib.contextmanager
def unchecked(cls: type):
    """Within it, `cls` builds without its `__post_init__` checks: for reading a form's values
    where a check would import torch (a command's --help); never for a config that runs."""
    post = cls.__dict__.get("__post_init__")
    if post is None:
        yield
        return
    cls.__post_init__ = lambda self: None
    try:
        yield
    finally:
        cls.__post_init__ = post

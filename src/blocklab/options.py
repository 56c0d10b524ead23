"""Frozen option dataclasses from TOML mappings or CLI `key=value` strings; unknown keys fail."""

from __future__ import annotations

import dataclasses
import difflib
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
                raise ValueError
            return out
        if tp is str:
            return str(value)
    except (TypeError, ValueError):
        name = getattr(tp, "__name__", str(tp))
        raise UserError(f"{what} option {key!r} needs a {name}, got {value!r}") from None
    return value


def build(cls: type[D], values: Mapping[str, Any] | None = None, what: str = "") -> D:
    """Instantiate the frozen dataclass `cls` from `values`, coercing types; unknown keys fail."""
    values = dict(values or {})
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            raise _unknown(key, sorted(fields), what or cls.__name__)
        kwargs[key] = _coerce(value, hints[key], key, what or cls.__name__)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{what or cls.__name__}: {exc}") from None


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

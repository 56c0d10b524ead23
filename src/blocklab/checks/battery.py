"""The battery's parts: a check's outcome (`Result`), its refusal to apply (`NotApplicable`),
`expect`, and `run`, which runs the checks of one kind over whatever is registered."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from blocklab.errors import UserError

KINDS = ("block", "task", "measure")  # each the name of its module here


class NotApplicable(Exception):
    """The check has nothing to check on this case (a block that states no degree)."""


def expect(condition: Any, message: str) -> None:
    """`assert`, kept under `python -O`."""
    if not condition:
        raise AssertionError(message)


def label(name: str, example: dict[str, Any]) -> str:
    """'poly(degree=3,bias=False)': the case as an arm would name it."""
    return name + ("(" + ",".join(f"{k}={v}" for k, v in example.items()) + ")" if example else "")


@dataclass
class Result:
    kind: str
    name: str
    example: dict[str, Any]
    check: str
    passed: bool
    message: str = ""

    @property
    def label(self) -> str:
        return label(self.name, self.example)


def module(kind: str):
    return importlib.import_module(f"blocklab.checks.{kind}s")


def run_check(fn, case) -> tuple[bool, str]:
    """(passed, message): a failed expectation, or any exception the entry raised."""
    try:
        fn(case)
    except NotApplicable as exc:
        return True, f"not applicable: {exc}"
    except AssertionError as exc:
        return False, " ".join(str(exc).split()) or "assertion failed"
    except Exception as exc:
        return False, f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return True, ""


def run(only: Iterable[str] | None = None) -> list[Result]:
    """Every check on every case of every registered entry (or of the entries named `only`)."""
    kinds = {kind: module(kind) for kind in KINDS}
    registered = {kind: m.registry().names() for kind, m in kinds.items()}
    wanted = None if only is None else list(dict.fromkeys(only))
    if wanted is not None:
        every = sorted({n for names in registered.values() for n in names})
        for name in wanted:
            if name not in every:
                close = difflib.get_close_matches(name, every, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise UserError(f"nothing registered is named {name!r}{hint}")
    results = []
    for kind, m in kinds.items():
        names = [n for n in registered[kind] if wanted is None or n in wanted]
        for case in m.cases(names):
            for check, fn in m.CHECKS.items():
                passed, message = run_check(fn, case)
                results.append(Result(kind, case.name, case.example, check, passed, message))
    return results

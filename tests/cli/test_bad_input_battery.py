"""Bad input, generated: every option of every command meets values of the wrong kind or out of
range, and every config key its TOML forms (a scalar where a list belongs, a wrong type, an
unknown key, a key the command ignores); each must exit 2 with one line on stderr, no traceback
and no warning, before any work starts.

The cases come from the experiments' config dataclasses (their fields, with the values each
takes stated in its metadata, `options.meta`) and from the parser's typed flags (`config.number`
keeps its rules), so a new option is tried without a new test. A number whose field states no
bounds must refuse -1 and 0, unless it says `unbounded=True`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import sys
import types
import typing
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from blocklab import config, options
from blocklab.cli import build_parser, main
from blocklab.experiments import EXPERIMENTS
from blocklab.store import Store

NAME = "no-such-name"
NUMBERS = {int: ["-1", "0", "1.5", "abc"], float: ["nan", "inf", "-1", "0", "abc"]}
BOUNDS = ("ge", "gt", "le", "lt")
# a valid call of each command that is not an experiment, to which one bad value is added
BASE = {"advise": ["--params", "1e9"], "runs": ["--out", "{store}"]}


@dataclass
class Case:
    words: list[str]  # the command's words
    argv: list[str]  # what follows them
    toml: str | None = None  # a --config file's text
    experiment: bool = True  # work starts at the store: reaching it means a bad value passed

    @property
    def label(self) -> str:
        shown = " ".join([*self.words, *self.argv])
        return shown + (f" --config <{self.toml.strip()!r}>" if self.toml is not None else "")


def refused(text: str, kind: type, rules: typing.Mapping[str, Any]) -> bool:
    """Whether a field of `kind` with `rules` must refuse `text`; with no bounds stated, -1 and
    0 are refused (a count), unless the field says it is unbounded."""
    try:
        value = kind(text)
        options.check_value("x", value, kind, rules)
    except ValueError:
        return True
    stated = any(b in rules for b in BOUNDS) or rules.get("unbounded")
    return not stated and value <= 0


def bad_numbers(kind: type, rules: typing.Mapping[str, Any]) -> list[str]:
    tried = list(NUMBERS[kind])
    for bound in ("le", "lt"):  # and one past an upper bound
        if bound in rules:
            tried.append(str(kind(rules[bound]) + 1))
    return [t for t in tried if refused(t, kind, rules)]


def literal(value: Any) -> str:
    """A Python value as a TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    return json.dumps(value)


def unwrap(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def cli_values(tp: Any, rules) -> Iterator[list[str]]:
    """Bad command-line values of a field: each a list of words after the flag."""
    tp = unwrap(tp)
    if typing.get_origin(tp) is tuple:
        (inner,) = typing.get_args(tp)[:1]
        if rules.get("min_len", 1) >= 1:
            yield []
        for v in bad_numbers(inner, rules) if inner in NUMBERS else [NAME]:
            yield [v]
    elif tp in NUMBERS:
        yield from ([v] for v in bad_numbers(tp, rules))
    elif tp is str:
        yield [NAME]


def toml_values(tp: Any, rules) -> Iterator[str]:
    """Bad TOML values of a field: wrong shapes and types, and the command line's bad values."""
    tp = unwrap(tp)
    if typing.get_origin(tp) is tuple:
        (inner,) = typing.get_args(tp)[:1]
        yield "3.0" if inner is float else "3"  # a scalar where a list belongs
        yield "[[1]]" if inner is str else '["abc"]'
        if rules.get("min_len", 1) >= 1:
            yield "[]"
    elif tp is bool:
        yield from ('"maybe"', "3")
    elif tp in NUMBERS:
        yield from ('"abc"', "[1]", *(["1.5"] if tp is int else ["nan", "inf"]))
        for v in bad_numbers(tp, rules):
            if v not in ("abc", "1.5", "nan", "inf"):
                yield literal(tp(v))
    elif tp is str:
        yield from ("[1]", literal(NAME))
    elif tp is dict or typing.get_origin(tp) is dict:
        yield "3"


def toml_text(path: list[str], value: str) -> str:
    *tables, key = path
    return (f"[{'.'.join(tables)}]\n" if tables else "") + f"{key} = {value}\n"


def config_cases(words: list[str], cls: type, skip: tuple[str, ...], path=()) -> Iterator[Case]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, rules = hints[f.name], f.metadata
        if dataclasses.is_dataclass(tp):
            yield from config_cases(words, tp, skip, (*path, f.name))
            continue
        for value in toml_values(tp, rules):
            yield Case(words, [], toml_text([*path, f.name], value))
        if f.name in skip or typing.get_origin(tp) is dict or tp is dict:
            continue
        flag = "--" + f.name.replace("_", "-")
        for value in cli_values(tp, rules):
            yield Case(words, [f"{flag}={value[0]}"] if value else [flag])
    yield Case(words, [], toml_text([*path, "no_such_key"], "1"))


def experiment_cases() -> Iterator[Case]:
    for name in EXPERIMENTS.names():
        manifest = EXPERIMENTS.get(name)
        cls = manifest.Config
        for command in manifest.commands:
            words = command.words.split()
            yield from config_cases(words, cls, manifest.no_flags)
            defaults = cls()
            for key in config.unused(defaults):  # keys the command does not read
                value = defaults
                for part in key.split("."):
                    value = getattr(value, part)
                yield Case(words, [], toml_text(key.split("."), literal(value)))
            if manifest.task_options:
                from blocklab.tasks import TASKS

                yield Case(words, ["--task-option", "no_such_key=1"])
                task_options = TASKS.get(defaults.task).Options
                for f in dataclasses.fields(task_options):
                    if unwrap(typing.get_type_hints(task_options)[f.name]) in NUMBERS:
                        yield Case(words, ["--task-option", f"{f.name}=abc"])


def parser_cases(parser: argparse.ArgumentParser, words=()) -> Iterator[Case]:
    """The flags of every command that are not config fields: the run flags of experiments,
    and every option of the other commands."""
    manifests = [EXPERIMENTS.get(name) for name in EXPERIMENTS.names()]
    experiments = {c.words: m for m in manifests for c in m.commands}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parser_cases(sub, (*words, name))
    if not words or any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        return
    manifest = experiments.get(" ".join(words))
    fields = set()
    if manifest is not None:
        fields = {f.name for f in _all_fields(manifest.Config)}
    for action in parser._actions:
        if action.nargs == 0 or action.dest in fields or action.dest == "help":
            continue
        if manifest is not None and action.dest == "out":
            continue  # an experiment's --out names any directory, new or not
        if not action.option_strings and action.choices is None:
            continue  # a free positional (a trial id, a file to write)
        rules = getattr(action.type, "rules", None)
        assert action.type is None or rules is not None, (
            f"{' '.join(words)} {action.option_strings}: a number flag states its bounds "
            "(config.number)"
        )
        values = bad_numbers(action.type.kind, rules) if rules is not None else [NAME]
        if action.nargs == "+":
            values.append(None)
        for value in values:
            flag = action.option_strings[0] if action.option_strings else None
            if value is None:
                argv = [flag]
            elif flag:
                argv = [f"{flag}={value}"]
            else:
                argv = [value]
            yield Case(list(words), argv, experiment=manifest is not None)


def _all_fields(cls: type) -> Iterator[dataclasses.Field]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        yield f
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _all_fields(hints[f.name])


def all_cases() -> list[Case]:
    return [*experiment_cases(), *parser_cases(build_parser())]


class Reached(BaseException):
    """Work started with a bad value: the run reached the store, the data or the computation."""


def _reached(what: str):
    def stop(*args, **kwargs):
        raise Reached(what)

    return stop


@pytest.fixture
def guarded(monkeypatch):
    """Where work starts, a bad value that got through stops, so that none runs for long."""
    import blocklab.bench
    import blocklab.engine.sweep
    import blocklab.measures.exact_rank
    import blocklab.measures.seprank

    for module, name in [
        (blocklab.engine.sweep, "check_builds"),
        (blocklab.bench, "run_bench"),
        (blocklab.measures.seprank, "separation_rank"),
        (blocklab.measures.exact_rank, "exact_grid_rank"),
    ]:
        monkeypatch.setattr(module, name, _reached(f"{module.__name__}.{name}"))
    parser = build_parser()  # one parser for every case: building it is most of a case's time
    monkeypatch.setattr(sys.modules["blocklab.cli.main"], "build_parser", lambda: parser)
    return monkeypatch


def attempt(case: Case, tmp: Path, store_dir: Path, monkeypatch) -> str | None:
    """None when the case is refused as it should be, else what happened instead."""
    argv = [
        a.replace("{store}", str(store_dir)) for a in [*case.words, *BASE.get(case.words[0], [])]
    ]
    argv += case.argv
    if case.experiment:
        argv += ["--out", str(tmp / "run"), "--quiet"]
    if case.toml is not None:
        config = tmp / "config.toml"
        config.write_text(case.toml)
        argv += ["--config", str(config)]
    err = io.StringIO()
    with monkeypatch.context() as patch:
        if case.experiment:
            for name in ("get", "finished", "records"):
                patch.setattr(Store, name, _reached(f"Store.{name}"))
        try:
            with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(err):
                warnings.simplefilter("always")
                with contextlib.redirect_stdout(io.StringIO()):
                    code = main(argv)
        except Reached as exc:
            return f"accepted: reached {exc}"
        except SystemExit as exc:
            return f"exit {exc.code}"
        except Exception as exc:  # a traceback for the user
            return f"raised {type(exc).__name__}: {exc}"
    lines = err.getvalue().strip().splitlines()
    if caught:
        return f"warned: {caught[0].message}"
    if code != 2 or len(lines) != 1 or not lines[0].startswith("blocklab: error:"):
        return f"exit {code}, stderr {lines}"
    return None


def test_every_bad_value_is_one_line_and_exit_2(tmp_path, guarded, capsys):
    store_dir = tmp_path / "stored"
    store = Store(store_dir)
    store.put({"id": "abc", "experiment": "e", "status": "done", "seed": 0, "config": {}})
    store.close()
    cases = all_cases()
    wrong = {}
    for i, case in enumerate(cases):
        work = tmp_path / str(i)
        work.mkdir()
        what = attempt(case, work, store_dir, guarded)
        if what is not None:
            wrong[case.label] = what
    with capsys.disabled():
        print(f"\nbad-input battery: {len(cases) - len(wrong)} of {len(cases)} handled")
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())
    commands = {" ".join(c.words) for c in cases}
    assert {"demo", "degree-sweep", "runs", "bench", "seprank measure", "advise"} <= commands

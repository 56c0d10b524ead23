"""blocklab from Python: `run` an experiment as its command does, from a notebook or a script.

    from blocklab.api import run
    result = run("degree-sweep", out="runs/x", seeds=2, steps=50)
    print(result["status"]["line"])

The config resolves as the command line's does (quick defaults, or `form="medium"`/`"full"`;
then a TOML file; then the keywords, which are the flags' names with underscores), with the
same checks: a bad value raises `blocklab.errors.UserError` with the message the command
prints. The run writes the same store, `run.json`, report and page, and `run` returns the JSON
the command prints with `--json`. On a terminal it shows the command's progress on stderr
(the trials, then the analysis), as the command does; `progress=False` turns it off.

`run.json` records the call with its arguments. Where a run reaches no verdict,
`result["status"]["next"]` holds the keywords the next run changes ({"steps": 1024}), so

    result = run("demo", out="runs/x", **result["status"]["next"])

runs what the status line advises; `result["status"]["next_cost"]` says first what it costs,
and `plan(...)` with the same arguments what it would fit, keep or continue.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import typing
from pathlib import Path
from typing import Any

from blocklab import launch
from blocklab.engine.executors import ENSEMBLE, Resources, default_workers
from blocklab.errors import ArmsFailed, UserError
from blocklab.experiments import Experiment
from blocklab.options import parse_pairs


def run(
    experiment: str,
    out: str | Path | None = None,
    *,
    form: str | None = None,
    config_file: str | Path | None = None,
    fresh: bool = False,
    workers: int | None = None,
    device: str = "auto",
    ensemble: int = ENSEMBLE,
    trackers: tuple[str, ...] = (),
    progress: bool | None = None,
    imports: tuple[str, ...] = (),
    **config: Any,
) -> dict[str, Any]:
    """Run `experiment` (its command's words: "degree-sweep", "demo", "sanford match") into
    `out` (the command's default directory when None) with the config keys `config` (flat:
    `steps=50` sets the training config's steps); return what `--json` prints, `status`
    included. `fresh` reruns what the store held before; `progress` shows the run's progress on
    stderr (None: when stderr is a terminal, as lm-eval's `simple_evaluate` shows its bars);
    the rest are the command's run flags. A run in which every trial of an arm raised raises
    `blocklab.errors.ArmsFailed` (as the command exits 1), its `result` the JSON."""
    ran = launch.run(
        experiment,
        lambda found: _given(found, config),
        form=form,
        config_file=config_file,
        imports=imports,
        out=out,
        reuse="none" if fresh else "current",
        resources=lambda loaded: Resources(
            workers or default_workers(), device, ensemble, "local", {}, loaded
        ),
        trackers=trackers,
        command=lambda out: _call(experiment, out, form, config_file, config),
        progress=sys.stderr.isatty() if progress is None else bool(progress),
        device=device,
    )
    if ran.lost:  # as the command exits 1: never silently
        raise ArmsFailed(ran.failures, ran.payload)
    return ran.payload


def plan(
    experiment: str,
    out: str | Path | None = None,
    *,
    form: str | None = None,
    config_file: str | Path | None = None,
    imports: tuple[str, ...] = (),
    **config: Any,
) -> dict[str, Any]:
    """What `run` with the same arguments would fit, keep or continue in `out`, and what that
    costs, fitting nothing: the `plan` object `--plan --json` prints (`engine.pricing.Plan`).
    An experiment that prices no run raises `UserError`, as `--plan` is refused."""
    ran = launch.run(
        experiment,
        lambda found: _given(found, config),
        form=form,
        config_file=config_file,
        imports=imports,
        out=out,
        resources=lambda loaded: Resources(),
        command=lambda out: "",
        progress=False,
        plan_only=True,
    )
    return ran.plan.json()


def _call(experiment: str, out, form, config_file, config: dict[str, Any]) -> str:
    """The call as `run.json` records it: the experiment, where it wrote, and every config
    keyword given (the run flags are not the run's design)."""
    given = {"out": str(out), "form": form, "config_file": config_file}
    given = {k: v for k, v in given.items() if v is not None} | config
    args = [repr(experiment)] + [f"{k}={v!r}" for k, v in given.items()]
    return f"blocklab.api.run({', '.join(args)})"


def _given(found: type[Experiment], given: dict[str, Any]) -> dict[str, Any]:
    """The keywords nested as the flags are, task options read as `--task-option K=V` reads
    them."""
    if found.task_options and "task_options" in given:
        pairs = [f"{k}={v}" for k, v in given["task_options"].items()]
        given = {**given, "task_options": parse_pairs(pairs, "task")}
    return _nest(found.Config, given, found)


def _nest(cls: type, given: dict[str, Any], found) -> dict[str, Any]:
    """Flat keywords -> the config's nesting: a key of a nested config (a TrainConfig's
    `steps`) goes under that field, as its flag does."""
    hints = typing.get_type_hints(cls)
    top = {f.name for f in dataclasses.fields(cls)} - set(found.no_flags)
    nested = {
        f.name: {g.name for g in dataclasses.fields(hints[f.name])}
        for f in dataclasses.fields(cls)
        if dataclasses.is_dataclass(hints[f.name])
    }
    out: dict[str, Any] = {}
    for key, value in given.items():
        value = list(value) if isinstance(value, tuple) else value
        if key in top:  # a field, or a nested config given whole as its TOML table would be
            out[key] = value
            continue
        home = next((n for n, keys in nested.items() if key in keys), None)
        if home is None:
            known = sorted((top - set(nested)) | {k for keys in nested.values() for k in keys})
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UserError(f"{key!r} is not a config key of {cls.__name__}{hint}")
        out.setdefault(home, {})[key] = value
    return out

"""The subcommand of every registered experiment (`blocklab.experiments`), built from its manifest:
every config field a flag (`config.add_flags`), a TOML file, `--full`, and the run flags. One path
runs them all: resolve the config, open the store, run the trials, analyze them and write the
report (the report module), print it or its JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from blocklab import config as cfgmod
from blocklab import plugins
from blocklab import trackers as tracker_mod
from blocklab.cli import run_flags, timings
from blocklab.engine.executors import Resources
from blocklab.engine.progress import Progress
from blocklab.errors import UserError
from blocklab.experiments import Command, Experiment
from blocklab.formatting import wrapped
from blocklab.options import parse_pairs, unchecked
from blocklab.store import DB_NAME, Store
from blocklab.trackers import TRACKERS


def add_parser(sub, experiment: type[Experiment], command: Command) -> None:
    """`command`'s last word as a subcommand of `sub`, running `experiment`; its flags under
    headings: the experiment's design, its training, where it runs, what it writes."""
    description = f"{command.help}. {timings.defaults_took(command)}"
    p = sub.add_parser(command.words.split()[-1], help=command.help, description=description)
    design = p.add_argument_group("design", "the defaults < a --config file < these flags")
    # a nested config's flags under its own heading: its TOML table's name
    nested = {"shape": "network", "train": "training"}
    groups = {
        f.name: p.add_argument_group(nested[f.name], f"[{f.name}] in a --config file")
        for f in dataclasses.fields(experiment.Config)
        if f.name in nested
    }
    execution = p.add_argument_group("execution")
    output = p.add_argument_group("output")
    design.add_argument("--config", help="TOML file with config keys (flags override it)")
    if experiment.forms:
        group = design.add_mutually_exclusive_group()
        for form, took in experiment.forms.items():
            group.add_argument(
                f"--{form.replace('_', '-')}",
                dest=form,
                action="store_true",
                help=_form_help(
                    getattr(experiment.Config, form), timings.form_took(command, form, took)
                ),
            )
    if experiment.task_options:
        design.add_argument(
            "--task-option",
            action="append",
            metavar="KEY=VALUE",
            help="task option, repeatable (e.g. --task-option n_in=8)",
        )
    cfgmod.add_flags(design, experiment.Config, skip=experiment.no_flags, groups=groups)
    if command.form:
        _help_states_the_form(p, experiment, command)
    if experiment.pool:
        run_flags.pool_flags(execution)
    elif experiment.workers:
        run_flags.workers_flag(execution, "processes measuring the points on the CPU")
    reuse = execution.add_mutually_exclusive_group()
    reuse.add_argument(
        "--fresh",
        dest="reuse",
        action="store_const",
        const="none",
        default="current",
        help="rerun every trial stored before this command started, replacing it",
    )
    reuse.add_argument(
        "--reuse-stale",
        dest="reuse",
        action="store_const",
        const="stale",
        help="keep stored trials made by other code (by default they are rerun)",
    )
    out = command.out
    output.add_argument(
        "--out", default=out, help=f"output directory: store, report, plots ({out})"
    )
    output.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    output.add_argument(
        "--tracker",
        action="append",
        choices=sorted(TRACKERS),
        help="also log the trials and the summary to TensorBoard or MLflow files in the run "
        "directory (needs the extra of that name; repeatable)",
    )
    output.add_argument("--quiet", action="store_true", help="no progress output")
    if experiment.sized:
        output.add_argument(
            "--plan",
            action="store_true",
            help="print the run --target-resolution sizes (units, core-hours here, and its Ray, "
            "Slurm and GPU forms with their estimates) and exit without fitting",
        )
    p.set_defaults(handler=lambda args: run(experiment, args))


def _help_states_the_form(p: argparse.ArgumentParser, experiment, command: Command) -> None:
    """A command that runs a form (`blocklab demo`) states that form's values as each flag's
    default in its --help, not the quick defaults. Filled in when help is asked for, from the
    form's values unchecked: its checks build the task, which would import torch, and help
    answers at once."""
    original = p.format_help

    def format_help() -> str:
        shown = argparse.ArgumentParser(add_help=False)
        with unchecked(experiment.Config):
            runs = experiment.defaults(command.words)
        cfgmod.add_flags(shown, experiment.Config, skip=experiment.no_flags, defaults=runs)
        helps = {a.dest: a.help for a in shown._actions}
        options = getattr(runs, "task_options", None)
        if options:  # the task options the form sets, which no flag's default shows
            said = ", ".join(f"{k}={v}" for k, v in sorted(options.items()))
            helps["task_option"] = f"task option, repeatable (this command: {said})"
        for action in p._actions:
            action.help = helps.get(action.dest, action.help)
        return original()

    p.format_help = format_help


def run(experiment: type[Experiment], args: argparse.Namespace) -> int:
    # the config's plugins load before it is resolved: its names may be theirs
    imports = plugins.load([*(args.imports or ()), *cfgmod.imports(args.config)])
    cfg = resolve(experiment, args)
    pinned = getattr(args, "teachers", None) is not None or in_toml(args.config, "teachers")
    cfg, plan = sized(experiment, cfg, args.out, pinned, getattr(args, "plan", False))
    words = ["blocklab", *getattr(args, "argv", [])]
    if plan is not None:  # the experiment's report module words the plan
        words_of = importlib.import_module(experiment.report)
        if args.plan:
            as_json = json.dumps({"plan": plan.json()}, indent=2) if args.json else None
            print(as_json or wrapped("\n".join(words_of.plan_lines(plan, cfg, words))))
            return 0
        if not args.quiet:
            print(wrapped("\n".join(words_of.plan_lines(plan, cfg, words))), file=sys.stderr)
    report, payload = execute(
        experiment,
        cfg,
        args.out,
        reuse=args.reuse,
        resources=run_flags.resources(args, imports)
        if experiment.pool or experiment.workers
        else None,
        trackers=args.tracker or (),
        command=shlex.join(words),
        progress=not args.quiet,
        device=getattr(args, "device", "cpu"),
    )
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        paths = [f"\nreport: {payload['report']}", f"page: {payload['page']}"]
        print(wrapped("\n".join([*report.text, *paths, "", report.status.line])))
    # the run failed where an arm lost every trial: what finished stays stored and reported
    for line in failure_lines(payload):
        print(f"blocklab: {line}", file=sys.stderr)
    return 1 if lost_an_arm(payload) else 0


def sized(experiment: type[Experiment], cfg: Any, out, pinned: bool, plan_only: bool = False):
    """(config, plan): the config sized by its `target_resolution` (`Experiment.sized`: the
    report module's `size`), or as it was with no plan where nothing is sized."""
    resolution = getattr(cfg, "target_resolution", None)
    if plan_only and resolution is None:
        raise UserError("--plan prints the run --target-resolution sizes: give --target-resolution")
    if not experiment.sized or resolution is None:
        return cfg, None
    return importlib.import_module(experiment.report).size(cfg, out, pinned)


def in_toml(path, key: str) -> bool:
    """Whether the TOML file at `path` (None: no file) sets `key`."""
    return bool(path) and key in cfgmod.load_toml(str(path))


def failure_lines(payload: dict[str, Any]) -> list[str]:
    """A line per arm some of whose trials raised: how many, and the first error."""
    return [
        f"{a['arm']}: {a['failed']} of {a['trials']} trials failed; the first: {a['error']}"
        for a in payload.get("failed_arms", [])
    ]


def lost_an_arm(payload: dict[str, Any]) -> bool:
    """Whether every trial of some arm raised: the report compares without it."""
    return any(a["failed"] == a["trials"] for a in payload.get("failed_arms", []))


def _form_help(method, time: str | None = None) -> str:
    """A form's flag help: the first sentence of its classmethod's docstring, and its time."""
    doc = " ".join((method.__doc__ or "").split()).split(". ")[0].rstrip(".")
    name = method.__name__.replace("_", " ")
    took = f"; {time}" if time else ""
    # argparse formats help with %: a literal one (+-3%) must be doubled
    return f"the {name} form{': ' + doc if doc else ''}{took} (quick by default)".replace("%", "%%")


def execute(
    experiment: type[Experiment],
    cfg: Any,
    out: str | Path,
    *,
    reuse: str = "current",
    resources: Resources | None = None,
    trackers: tuple[str, ...] | list[str] = (),
    command: str = "",
    progress: bool = True,
    device: str = "cpu",
) -> tuple[Any, dict[str, Any]]:
    """The one run path, for the command line and `blocklab.api.run`: open the run directory,
    run the trials, write the report and the page; return the report and the JSON `--json`
    prints (the report's, with `report`, `config`, `page` and `status`, and where trials raised
    `failed_arms`: each arm some of whose trials raised, `_failed_arms`)."""
    from blocklab.formatting import config_json, plain

    names = list(dict.fromkeys(trackers))
    for name in names:
        tracker_mod.require(name)  # before anything runs or is written
    out, store = _open_run(out, reuse, device)
    try:
        report, page, failed_arms = _run_and_report(
            experiment, cfg, command, progress, out, store, resources, names
        )
    finally:
        store.close()  # the last connection to close folds the WAL back into the store file
    payload = {**report.json, "report": str(report.path), "config": config_json(cfg)}
    if failed_arms:  # only then: a run's JSON keeps its keys
        payload["failed_arms"] = failed_arms
    return report, plain({**payload, "page": str(page), "status": report.status.as_json()})


def _run_and_report(
    experiment, cfg, command: str, progress: bool, out: Path, store, resources, names
):
    """Run the trials (each logged to the trackers as it is stored), write the report and the
    page, hand the trackers the summary; return the report, the page's path and the arms some
    of whose trials raised (`_failed_arms`)."""
    from blocklab.formatting import config_json
    from blocklab.reports import html, markdown

    _write_run_file(out, experiment.name, command, config_json(cfg))
    opened = [
        tracker_mod.open_tracker(name, out, experiment.name, command, config_json(cfg))
        for name in names
    ]
    store.listeners += [t.trial for t in opened]  # each trial logged as it is stored
    bar = _Display(progress, out)  # one display for every sweep the command runs
    try:
        trials = experiment.run(cfg, store, resources=resources, progress=bar)
        # the report module analyzes the trials (summaries, tests, fits, findings) and writes;
        # the display says so, and shows what the analysis counts (`progress.current`): a
        # context, not an argument, so every report keeps `write(out_dir, cfg, trials)`
        rows = getattr(trials, "rows", None)  # `Trials`, or what the experiment's report reads
        # trials, not rows: a depth ladder's trial is a row per rung
        with bar.analysing(len({r.get("id") for r in rows}) if rows is not None else None):
            report = importlib.import_module(experiment.report).write(out, cfg, trials)
    except BaseException:
        bar.close()
        for tracker in opened:
            tracker.abort()
        raise
    _write_run_file(out, experiment.name, command, config_json(cfg), report.status)
    markdown.put_status(report.path, report.status)
    records = store.records()
    page = html.write(out, records)
    for tracker in opened:
        tracker.finish(records, report.path, report.json)
    return report, page, _failed_arms(trials, records)


class _Display(Progress):
    """The command's display, which also notes in run.json how many trials a phase not yet
    begun will plan (`Progress.expect`): an interrupted run's index counts them as planned."""

    def __init__(self, enabled: bool, out: Path):
        from blocklab.rundir import RunDir

        super().__init__(enabled=enabled)
        self.run_dir = RunDir(out)

    def expect(self, n: int) -> None:
        super().expect(n)
        self.run_dir.note_expected(self.expected)


def _failed_arms(trials, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm with trials that raised (`Trials.failed`): the arm, how many of its trials
    raised, of how many, and the first error's first line, in the order the arms first failed.
    An arm all of whose trials raised is missing from the report's tables."""
    arm_of = {r["id"]: r.get("config", {}).get("arm", {}).get("label") for r in records}
    lost: dict[str, dict[str, Any]] = {}
    # an experiment's run may return what its own report reads instead of `Trials`
    failed, rows = getattr(trials, "failed", []), getattr(trials, "rows", [])
    for f in failed:
        # a trial never stored (not run) is named by its description: task, budget, arm, ...
        words = f["trial"].split()
        arm = arm_of.get(f["id"]) or (words[2] if len(words) > 2 else f["trial"])
        entry = lost.setdefault(arm, {"arm": arm, "failed": 0, "error": ""})
        entry["failed"] += 1
        entry["error"] = entry["error"] or (f["error"].splitlines() or [""])[0]
    for entry in lost.values():
        done = {r.get("id") for r in rows if r.get("arm") == entry["arm"]}
        entry["trials"] = entry["failed"] + len(done)
    return list(lost.values())


def _write_run_file(
    out: Path, experiment: str, command: str, config: dict[str, Any], status=None
) -> None:
    """The run's record of how it was made (`rundir.RunDir.write_record`), with its status line
    once the report is written."""
    from blocklab.rundir import RunDir

    RunDir(out).write_record(experiment, command, config, status.as_json() if status else None)


def resolve(experiment: type[Experiment], args: argparse.Namespace) -> Any:
    """Defaults (the quick form, or the full form with --full) < TOML < flags."""
    cls = experiment.Config
    words = " ".join(w for w in (args.command, getattr(args, "which", None)) if w)
    form = next((f for f in experiment.forms if getattr(args, f, False)), None)
    defaults = experiment.defaults(words, form)
    flags = cfgmod.overrides(args, cls, skip=experiment.no_flags)
    if experiment.task_options and args.task_option:
        flags["task_options"] = parse_pairs(args.task_option, "task")
    return cfgmod.resolve(cls, defaults, args.config, flags, what=words)


def _open_run(out: str | Path, reuse: str, device: str) -> tuple[Path, Store]:
    """Check the run flags and the output directory, then open the store in it: a check that
    fails leaves nothing behind. --out always names a directory, whatever its name."""
    from blocklab.engine.devices import device_name
    from blocklab.rundir import RunDir

    device_name(device)  # a bad or missing device fails here
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(
            f"--out {out} is a file: --out names a run directory (store, report, plots)"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        # a probe of this process's own: two sweeps sharing a run directory start at once
        with tempfile.TemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UserError(f"output directory {out} is not writable: {exc.strerror}") from None
    store = Store(out / DB_NAME, reuse=reuse)
    # each sweep's plan noted in run.json: an interrupted run reads `incomplete: k of n planned
    # ran` in the index
    store.planners.append(RunDir(out).note_planned)
    return out, store

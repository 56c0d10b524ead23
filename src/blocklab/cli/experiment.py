"""The subcommand of every registered experiment (`blocklab.experiments`), built from its manifest:
every config field a flag (`config.add_flags`), a TOML file, `--full`, and the run flags. The
command turns its flags into the run's inputs (the resolved config, the output directory, where
the trials run) and prints what the one run path, `launch.execute`, returns: the report or its
JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import shlex
import sys
from typing import Any

from blocklab import config as cfgmod
from blocklab import launch, plugins
from blocklab.cli import run_flags, timings
from blocklab.experiments import Command, Experiment
from blocklab.formatting import wrapped
from blocklab.options import parse_pairs, unchecked
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
    pinned = getattr(args, "teachers", None) is not None or launch.in_toml(args.config, "teachers")
    cfg, plan = launch.sized(experiment, cfg, args.out, pinned, getattr(args, "plan", False))
    words = ["blocklab", *getattr(args, "argv", [])]
    if plan is not None:  # the experiment's report module words the plan
        words_of = importlib.import_module(experiment.report_module())
        if args.plan:
            as_json = json.dumps({"plan": plan.json()}, indent=2) if args.json else None
            print(as_json or wrapped("\n".join(words_of.plan_lines(plan, cfg, words))))
            return 0
        if not args.quiet:
            print(wrapped("\n".join(words_of.plan_lines(plan, cfg, words))), file=sys.stderr)
    report, payload = launch.execute(
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
    for line in launch.failure_lines(payload):
        print(f"blocklab: {line}", file=sys.stderr)
    return 1 if launch.lost_an_arm(payload) else 0


def _form_help(method, time: str | None = None) -> str:
    """A form's flag help: the first sentence of its classmethod's docstring, and its time."""
    doc = " ".join((method.__doc__ or "").split()).split(". ")[0].rstrip(".")
    name = method.__name__.replace("_", " ")
    took = f"; {time}" if time else ""
    # argparse formats help with %: a literal one (+-3%) must be doubled
    return f"the {name} form{': ' + doc if doc else ''}{took} (quick by default)".replace("%", "%%")


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

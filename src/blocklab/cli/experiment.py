"""The subcommand of every registered experiment (`blocklab.experiments`), built from its manifest:
every config field a flag (`config.add_flags`), a TOML file, `--full`, and the run flags. The
command turns its flags into the inputs of the one run path, `launch.run` (the keys given, the
form, the output directory, where the trials run), and prints what it returns: the plan, the
report or its JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from typing import Any

from blocklab import config as cfgmod
from blocklab import launch
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
    if experiment.price is not None:
        sized = (
            "; with --target-resolution, the run it sizes, its units' interval, and its Ray, "
            "Slurm and GPU forms"
            if experiment.sizing is not None
            else ""
        )
        output.add_argument(
            "--plan",
            action="store_true",
            help="print what the run would fit, keep or continue in --out and what that costs "
            f"(core time here, one GPU estimated){sized}, and exit without fitting",
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
    """Run `experiment` as the flags say (`launch.run`) and print the report, its JSON, or with
    --plan the plan alone; 1 where an arm lost every trial."""
    words = ["blocklab", *getattr(args, "argv", [])]
    ran = launch.run(
        _words(args),
        lambda found: flags(found, args),
        form=form(experiment, args),
        config_file=args.config,
        imports=args.imports or (),
        out=args.out,
        reuse=args.reuse,
        resources=lambda loaded: run_flags.resources(args, loaded),
        trackers=args.tracker or (),
        command=lambda out: shlex.join(words),
        progress=not args.quiet,
        device=getattr(args, "device", "cpu"),
        plan_only=getattr(args, "plan", False),
        planned=lambda ran: _say_plan(ran, args, words),
    )
    if ran.payload is None:  # --plan: the plan alone
        return 0
    if args.json:
        print(json.dumps(ran.payload, indent=2))
    else:
        report, payload = ran.report, ran.payload
        paths = [f"\nreport: {payload['report']}", f"page: {payload['page']}"]
        print(wrapped("\n".join([*report.text, *paths, "", report.status.line])))
    # the run failed where an arm lost every trial: what finished stays stored and reported
    for line in ran.failures:
        print(f"blocklab: {line}", file=sys.stderr)
    return 1 if ran.lost else 0


def _say_plan(ran: launch.Ran, args: argparse.Namespace, words: list[str]) -> None:
    """With --plan, the plan on stdout (its JSON with --json): the run size a target resolution
    asked for (worded by the experiment's sizing hook), what the run would fit, keep or continue
    and its cost. Without it, the run size on stderr before the run, unless --quiet."""
    plan = ran.plan
    if getattr(args, "plan", False) and args.json:
        print(json.dumps({"plan": plan.json()}, indent=2))
        return
    lines = []
    if ran.size is not None and (plan is not None or not args.quiet):
        lines = ran.experiment.sizing.plan_lines(ran.size, ran.cfg, words, plan)
    if plan is not None:
        lines += plan_lines(plan)
    if lines:
        print(wrapped("\n".join(lines)), file=sys.stdout if plan is not None else sys.stderr)


def plan_lines(plan) -> list[str]:
    """A plan (`engine.pricing.Plan`) in words: its trials, its cost, and what the experiment
    adds (`note`)."""
    import os

    lines = [f"plan: {plan.trials_said()}", f"cost: {plan.cost_said(os.cpu_count() or 1)}"]
    return lines + ([plan.note] if plan.note else [])


def _form_help(method, time: str | None = None) -> str:
    """A form's flag help: the first sentence of its classmethod's docstring, and its time."""
    doc = " ".join((method.__doc__ or "").split()).split(". ")[0].rstrip(".")
    name = method.__name__.replace("_", " ")
    took = f"; {time}" if time else ""
    # argparse formats help with %: a literal one (+-3%) must be doubled
    return f"the {name} form{': ' + doc if doc else ''}{took} (quick by default)".replace("%", "%%")


def _words(args: argparse.Namespace) -> str:
    """The command's words ("demo", "sanford match")."""
    return " ".join(w for w in (args.command, getattr(args, "which", None)) if w)


def form(experiment: type[Experiment], args: argparse.Namespace) -> str | None:
    """The form a flag asks for (`--full`, `--pilot`), or None."""
    return next((f for f in experiment.forms if getattr(args, f, False)), None)


def flags(experiment: type[Experiment], args: argparse.Namespace) -> dict[str, Any]:
    """The config keys the flags give, nested as the config nests them."""
    given = cfgmod.overrides(args, experiment.Config, skip=experiment.no_flags)
    if experiment.task_options and args.task_option:
        given["task_options"] = parse_pairs(args.task_option, "task")
    return given

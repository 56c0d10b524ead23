"""An experiment's manifest (`Experiment`, with its `Command`s and its `Sizing` hook) and what
its run returns (`Trials`): the types every experiment, a home's or a plugin's, builds on.
`Experiment` also finds an experiment's report (`report_module`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

# the package whose subpackages are the experiments' homes, each named for its experiment
EXPERIMENTS_PACKAGE = "blocklab.experiments"


@dataclass(frozen=True)
class Command:
    """How an experiment is called: its words ("collapse", "sanford qsa"), its line in the
    command line's help, and the run directory it writes by default. What its defaults took to
    run, which `--help` states, is the package's timings file (`blocklab.timings`), not here."""

    words: str
    help: str
    out: str
    form: str = ""  # the config's classmethod its defaults come from ("": the quick defaults)


@dataclass(frozen=True)
class Sizing:
    """An experiment's sizing hook (`Experiment.sizing`). `size(cfg, out_dir, pinned)` returns
    (config, plan): `cfg` with the size its `target_resolution` needs (`pinned`: the size given
    stays), and the run size, whose `json()` the plan's JSON carries; `plan_lines(size, cfg,
    words, plan)` words it for the terminal, with the command that runs it (`words`: the command
    line asked, "blocklab ..."), at the cost `plan` (`engine.pricing.Plan`, None: before a run)
    gives."""

    size: Callable[[Any, Any, bool], tuple[Any, Any]]
    plan_lines: Callable[..., list[str]]


class Experiment:
    """An experiment's manifest. The registry sets `name` (its home's name, `collapse` for a
    manifest in `blocklab.experiments.collapse.experiment`; a plugin's, its module's); the rest
    is the subclass's to set."""

    name: ClassVar[str]
    Config: ClassVar[type]
    run: ClassVar[Callable[..., Any]]  # run(cfg, store, *, resources, progress) -> Trials
    # the module whose write(out_dir, cfg, trials) -> blocklab.reports.Report analyzes and
    # reports what the run returned, where it is not the one `report_module` finds by itself: a
    # plugin's, such as "my_plugin.squares_report"
    report: ClassVar[str | None] = None
    commands: ClassVar[tuple[Command, ...]]
    # the trials train on an executor: the run takes --workers, --device, --ensemble, --executor
    pool: ClassVar[bool] = True
    # without a pool, the run measures its points in --workers processes on the CPU (no device,
    # ensemble or executor): `run` reads `resources.workers`
    workers: ClassVar[bool] = False
    # the config has a `task_options` mapping, filled by repeated --task-option KEY=VALUE
    task_options: ClassVar[bool] = False
    no_flags: ClassVar[tuple[str, ...]] = ()  # config fields the command line does not offer
    # the forms the config offers beside its quick defaults, as classmethods of `Config` (larger
    # ones, and other designs of the same experiment such as mad's width sweep), each with an
    # estimate of its wall time where one was made (the text says so), else None: a measured
    # time is the timings file's (`blocklab.timings`); the command line offers each form as a
    # flag (`--medium`, `--sweep-width`)
    forms: ClassVar[dict[str, str | None]] = {}
    # the sizing hook: how a config field `target_resolution` sizes the run from measured
    # spreads before any trial runs (`Sizing`); None: a run is the size its config gives
    sizing: ClassVar[Sizing | None] = None
    # the price hook: price(cfg, out_dir) -> `engine.pricing.Plan`, what a run of `cfg` into
    # `out_dir` would fit, keep or continue and what that costs, before anything runs (the
    # command offers --plan, which prints it and fits nothing); None: no plan is priced
    price: ClassVar[Callable[[Any, Any], Any] | None] = None

    @classmethod
    def defaults(cls, words: str = "", form: str | None = None) -> Any:
        """The config a command starts from: the named `form`, else the form of the command
        these `words` call (`Command.form`: `blocklab demo`), else the quick defaults."""
        command = next((c for c in cls.commands if c.words == words), None)
        form = form or (command.form if command else "")
        return getattr(cls.Config, form)() if form else cls.Config()

    @classmethod
    def report_module(cls) -> str:
        """The dotted name of the module that analyzes and reports this experiment's runs: the
        manifest's `report` where it names one; else, for an experiment of the package, its
        home's `report` (`blocklab.experiments.collapse.report`); else the `report` module of
        the package the manifest's module lies in (`my_plugin.experiment` ->
        `my_plugin.report`), and a manifest in a top-level module (a one-file plugin) is its own
        report module, its `write` beside it."""
        if cls.report:
            return cls.report
        from blocklab.experiments import EXPERIMENTS  # its `name_of`: the one home-name rule

        module = cls.__module__
        if module.startswith(EXPERIMENTS_PACKAGE + "."):
            return f"{EXPERIMENTS_PACKAGE}.{EXPERIMENTS.name_of(module)}.report"
        package, dot, _ = module.rpartition(".")
        return f"{package}.report" if dot else module


@dataclass
class Trials:
    """What an experiment's run returns: one flat row per finished trial (done or diverged) and
    the trials that raised (id, description, error). An experiment that measures more than its
    rows adds fields in a subclass."""

    rows: list[dict[str, Any]]
    failed: list[dict[str, Any]]

"""Experiments, one file each: a frozen config in, stored trials out.

An experiment module declares its config (a frozen dataclass whose defaults are the quick form,
with classmethods `medium()` and `full()` where there are larger forms), a `run(cfg, store, *,
resources=None, progress=True)` that plans its trials, runs and stores them and returns what they
measured (`progress` is a flag, or the command's one display, `engine.progress.Progress`, that
every sweep of the run adds its trials to), and a manifest: a subclass of `Experiment`,
decorated with `@EXPERIMENTS.register`, naming the config, the run, the report module and the
command words. The command line builds a subcommand from each manifest, every config field a
flag. Private modules (`_trials`, `_seprank`) hold what several experiments share.

An experiment gathers; it does not conclude. `run` returns `Trials`: one flat row per finished
trial, the trials that raised, and (in a subclass) facts the run measured or computed that are
not statistics of the rows, such as the chosen learning rates or the corpus. Everything computed
from the rows (summaries over seeds, tests, fits, findings) is the report module's
`analyze(cfg, trials)`, built on `blocklab.analysis`, which sits above the experiments; its
`write(out_dir, cfg, trials)` analyzes and writes.

An experiment module imports what needs torch or numpy inside the functions that run, so the
command line reads every config without them and `blocklab --help` answers at once (a test holds
every experiment to it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from blocklab.registry import Registry, import_submodules


@dataclass(frozen=True)
class Command:
    """How an experiment is called: its words ("collapse", "sanford qsa"), its line in the
    command line's help, and the run directory it writes by default. What its defaults took to
    run, which `--help` states, is the package's timings file (`blocklab.timings`), not here."""

    words: str
    help: str
    out: str
    form: str = ""  # the config's classmethod its defaults come from ("": the quick defaults)


class Experiment:
    """An experiment's manifest. The registry sets `name` (the module's name); the rest is the
    subclass's to set."""

    name: ClassVar[str]
    Config: ClassVar[type]
    run: ClassVar[Callable[..., Any]]  # run(cfg, store, *, resources, progress) -> Trials
    # the module whose write(out_dir, cfg, trials) -> blocklab.reports.Report analyzes and
    # reports what the run returned
    report: ClassVar[str]
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
    # a config field `target_resolution` sizes the run from measured spreads: the report
    # module's size(cfg, out_dir, pinned) -> (cfg, degree_sweep.analysis.pilot.Sizing) and
    # plan_lines(plan, cfg, words) (the command offers --plan, which prints the plan and fits
    # nothing)
    sized: ClassVar[bool] = False

    @classmethod
    def defaults(cls, words: str = "", form: str | None = None) -> Any:
        """The config a command starts from: the named `form`, else the form of the command
        these `words` call (`Command.form`: `blocklab demo`), else the quick defaults."""
        command = next((c for c in cls.commands if c.words == words), None)
        form = form or (command.form if command else "")
        return getattr(cls.Config, form)() if form else cls.Config()


@dataclass
class Trials:
    """What an experiment's run returns: one flat row per finished trial (done or diverged) and
    the trials that raised (id, description, error). An experiment that measures more than its
    rows adds fields in a subclass."""

    rows: list[dict[str, Any]]
    failed: list[dict[str, Any]]


EXPERIMENTS: Registry[type[Experiment]] = Registry("experiment")
import_submodules(__name__)

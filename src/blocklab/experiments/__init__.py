"""Experiments, one file each: a frozen config in, stored trials and a report out.

An experiment module declares its config (a frozen dataclass whose defaults are the quick form,
with a classmethod `full()` where there is a full form), a `run(cfg, store, *, resources=None,
progress=True)` that stores its trials and returns a result, and a manifest: a subclass of
`Experiment`, decorated with `@EXPERIMENTS.register`, naming the config, the run, the report
module and the command words. The command line builds a subcommand from each manifest, every
config field a flag. Private modules (`_trials`, `_seprank`) hold what several experiments share.

An experiment module imports what needs torch or numpy inside the functions that run, so the
command line reads every config without them and `blocklab --help` answers at once (a test holds
every experiment to it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from blocklab.registry import Registry, import_submodules


@dataclass(frozen=True)
class Command:
    """How an experiment is called: its words ("collapse", "sanford qsa"), its line in the
    command line's help, and the run directory it writes by default."""

    words: str
    help: str
    out: str


class Experiment:
    """An experiment's manifest. The registry sets `name` (the module's name); the rest is the
    subclass's to set."""

    name: ClassVar[str]
    Config: ClassVar[type]
    run: ClassVar[Callable[..., Any]]  # run(cfg, store, *, resources, progress) -> result
    # the module whose write(out_dir, cfg, result) -> blocklab.reports.Report reports a result
    report: ClassVar[str]
    commands: ClassVar[tuple[Command, ...]]
    # the trials train on an executor: the run takes --workers, --device, --ensemble, --executor
    pool: ClassVar[bool] = True
    # the config has a `task_options` mapping, filled by repeated --task-option KEY=VALUE
    task_options: ClassVar[bool] = False
    no_flags: ClassVar[tuple[str, ...]] = ()  # config fields the command line does not offer


@dataclass
class Findings:
    """What an experiment that tests predictions returns: its rows, their summaries over seeds,
    one finding per prediction (what the seed predicts beside what was measured), and the trials
    that raised."""

    rows: list[dict[str, Any]]
    summaries: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    failed: list[dict[str, Any]] = field(default_factory=list)


EXPERIMENTS: Registry[type[Experiment]] = Registry("experiment")
import_submodules(__name__)

"""Seed 000's experiment: networks of degree-d layers at equal parameter budgets, over seeds.

It measures capacity: what a network of each degree can fit at each budget. Every arm and seed
fits the same target (teacher 0; `teachers` K repeats the whole comparison on K independent
targets), seeds vary initialization and batches, and generative tasks draw fresh examples every
step, so a test loss is approximation plus optimization error and arms pair on one problem. The
negative control (`control`) is a second d=3 arm fitting the same teachers from seeds of its own,
paired with d=3 by the seed it stands beside: it must come out equal to d=3.

For every (budget, arm) a learning rate is chosen from a grid on the validation split with the
first seed and teacher (one fixed rate across degrees would favour whichever degree it suits);
when the best rate lies at an edge of the grid the grid is extended past it and searched again,
up to `lr_extend` times. Then every (teacher, seed) trains at that rate and is scored on the test
split. A second-order fit (the default) searches no rate: it fits every cell, or climbs each
arm's depth ladder, to a certified convergence. The report (`report/`, this package's) turns
the rows into summaries, paired tests, and with its analysis (`analysis/`: `capacity`) design
checks, scaling fits and a verdict; the experiment's modules import neither.

The package: `config` (the config and its forms), `plan` (what a run fits, planned from that
config, and the checks before any fit), `preflight` (those checks on one network per cell),
`exact` (the counts and exact measures beside the trained
ones); `run`, one path through them, and the manifest here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from blocklab.experiments import EXPERIMENTS, Command, Experiment, Sizing, Trials, _trials
from blocklab.experiments.degree_sweep import exact, plan, preflight, sizing
from blocklab.experiments.degree_sweep.config import SHAPE, DegreeSweepConfig
from blocklab.store import Store

if TYPE_CHECKING:
    from blocklab.engine.executors import Resources

__all__ = ["SHAPE", "DegreeSweep", "DegreeSweepConfig", "DegreeSweepTrials", "run"]

EXPERIMENT = "degree-sweep"


@dataclass
class DegreeSweepTrials(Trials):
    # rows: one per final trial (done or diverged); failed: the final trials that raised.
    # "budget/arm" -> the chosen lr, the rates tried with their validation scores, and whether
    # the choice still lies at an edge of what was tried (empty for second-order fits)
    lr_choice: dict[str, dict[str, Any]]
    # second-order fits: each cell's first trial fitted by the other optimizer (`referee`)
    referee: list[dict[str, Any]] = field(default_factory=list)
    # arm -> the rank of its input Jacobian before any fit, the task's input dimension and the
    # most its design lets through (`input_ranks`); empty for token tasks
    input_rank: dict[str, dict[str, Any]] = field(default_factory=dict)
    # arm -> its exact per-parameter measures at the run's width (`exact`)
    exact: dict[str, dict[str, Any]] = field(default_factory=dict)


def run(
    cfg: DegreeSweepConfig,
    store: Store,
    *,
    resources: Resources | None = None,
    progress: bool = True,
) -> DegreeSweepTrials:
    """Plan every cell, check the design before any fit, choose the rates (searched under Adam),
    fit what is left, and return the rows with each cell's functional count beside them."""
    from blocklab.engine.progress import display
    from blocklab.fingerprint import once
    from blocklab.tasks import make_task

    task = make_task(cfg.task, **cfg.task_options)
    cells = plan.shapes(cfg, task)
    bar, own = display(progress)
    try:
        # each set of modules hashed once in the run: its trials costed, then run
        with once():
            # the design checks and counts before any fit, on one network per cell, each said as
            # it begins: a direction lost inside is refused, and a block its ladder cannot continue
            checked = preflight.check(cfg, cells, bar.stage)
            if (met := preflight.meeting_words(cfg, cells)) is not None:
                bar.stage(met)
            bar.stage("exact measures of each degree (ranks over a prime field)")
            measured = exact.exact_measures(cfg, cfg.arms())
            if not cfg.train.second_order:
                bar.stage("choosing each cell's learning rate")
            lr, lr_choice = plan.rates(
                cfg, cells, store, EXPERIMENT, resources, bar, task.higher_is_better
            )
            bar.stage("planning the fits: timing an iteration of the largest networks")
            planned = plan.optimizers(
                plan.trials(cfg, cells, lr), store, resources, bar if progress else False
            )
            label = "fits" if cfg.train.second_order else "seeds"
            trials = _trials.run_planned(
                planned, store, EXPERIMENT, resources=resources, progress=bar, label=label
            )
    finally:
        if own:
            bar.close()
    rows = exact.with_counts(checked.counts, [r for r in trials.rows if not r.get("referee")])
    referee = [r for r in trials.rows if r.get("referee")]
    return DegreeSweepTrials(rows, trials.failed, lr_choice, referee, checked.input_rank, measured)


# the demo's cost of one (teacher, seed) unit at 2 chains, in core-seconds (its recorded run,
# `sizing.DEMO_SPREADS`): what the pilot form's estimate reads
DEMO_CORE_SECONDS = sizing.DEMO_SPREADS["core_seconds_per_unit"]


def pilot_time() -> str:
    """The pilot form's estimated time, for `--help`: 4 times the demo's chains on 8 units."""
    from blocklab.engine.devices import GPU_OVER_CORE

    core_seconds = DEMO_CORE_SECONDS * 4 * 8
    hours, gpu_minutes = core_seconds / 2 / 3600, core_seconds / GPU_OVER_CORE / 60
    return (
        f"estimated, not measured: about {hours:.1f} h on 2 CPU cores (the demo's "
        f"{DEMO_CORE_SECONDS:.0f} core-seconds per (teacher, seed) unit at 2 chains, times 4 for "
        f"8 chains, times 8 units) and about {gpu_minutes:.0f} min on one H100 or H200 (a ladder "
        f"trial ran {GPU_OVER_CORE:g}x faster on an H200 than on one CPU core)"
    )


PILOT_TIME = pilot_time()


@EXPERIMENTS.register
class DegreeSweep(Experiment):
    Config = DegreeSweepConfig
    run = staticmethod(run)
    forms = {"pilot": PILOT_TIME}
    # --target-resolution sizes a run by the spreads `sizing` reads (the module's functions)
    sizing = Sizing(sizing.size, sizing.plan_lines)
    commands = (
        Command(
            "demo",
            "the main job: seed 000's degree experiment, in minutes",
            "runs/demo",
            form="demo",
        ),
        Command(
            "degree-sweep",
            "degree-d networks at equal parameter budgets",
            "runs/degree-sweep",
        ),
    )
    task_options = True
    # one learning rate is chosen per arm from lr_grid, so a single --lr would say nothing; arms
    # compare at equal block budgets, which a flattened network is not counted by
    no_flags = ("lr", "flatten")

"""The degree sweep's run and manifest: `run`, one path from the config to the rows (the plan,
the checks before any fit, the rates searched through the store, each fit's optimizer chosen
from its timed cost, the fits), what it returns (`DegreeSweepTrials`), the pilot form's
estimated time (`pilot_time`) and the manifest the command line reads (`DegreeSweep`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from blocklab.experiments import EXPERIMENTS, Command, Experiment, Sizing, Trials, _trials
from blocklab.experiments.degree_sweep import exact, plan, preflight, pricing, sizing
from blocklab.experiments.degree_sweep.config import DegreeSweepConfig
from blocklab.store import Store

if TYPE_CHECKING:
    from blocklab.engine.executors import Resources
    from blocklab.engine.progress import Progress

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
    # most its design lets through (`preflight.input_ranks`); empty for token tasks
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
    from blocklab.fitting import built
    from blocklab.tasks import make_task

    task = make_task(cfg.task, **cfg.task_options)
    cells = plan.shapes(cfg, task)
    bar, own = display(progress)
    try:
        # each set of modules hashed once in the run: its trials costed, then run; and each
        # network the checks, the fits' cost and timing and the build check read built once
        with once(), built.once():
            # the design checks and counts before any fit, on one network per cell, each said as
            # it begins: a direction lost inside is refused, and a block its ladder cannot continue
            checked = preflight.check(cfg, cells, bar.stage)
            if (met := preflight.meeting_words(cfg, cells)) is not None:
                bar.stage(met)
            bar.stage("exact measures of each degree (ranks over a prime field)")
            measured = exact.exact_measures(cfg, cfg.arms())
            if not cfg.train.second_order:
                bar.stage("choosing each cell's learning rate")
            lr, lr_choice = rates(
                cfg, cells, store, EXPERIMENT, resources, bar, task.higher_is_better
            )
            bar.stage("planning the fits: timing an iteration of the largest networks")
            planned = optimizers(
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


def rates(
    cfg: DegreeSweepConfig,
    cells: plan.Cells,
    store: Store,
    experiment: str,
    resources: Resources | None,
    bar: Progress,
    higher: bool,
) -> tuple[dict[tuple[int, str], float], dict[str, dict[str, Any]]]:
    """Each cell's rate and the search's record under "budget/arm": under Adam the best of
    lr_grid on validation with seed 0 and teacher 0 (`_trials.choose_rates`: trials run and
    stored in `store`); a fit reads the config's (its warm start's), with nothing searched."""
    if cfg.train.second_order:
        return {key: cfg.train.lr for key in cells}, {}
    at = {key: functools.partial(plan.spec, cfg, *cells[key], seed=0) for key in cells}
    every = len(plan.trials(cfg, cells, {key: cfg.lr_grid[0] for key in cells}))
    return _trials.choose_rates(cfg, at, every, store, experiment, resources, bar, higher)


def optimizers(planned: plan.Planned, store: Store, resources: Resources | None, progress):
    """The planned fits with each one's optimizer chosen from its estimated cost where the
    sweep's workers run (`engine.sweep.choose_for`), the largest first, said on stderr when
    `progress` and something is left to fit (a rerun that re-analyses fits none); Adam trials
    as they are. `progress`, a flag or the command's display (`engine.progress.Progress`),
    which then weighs each fit left by its estimated cost for its ETA."""
    from blocklab.engine.sweep import choose_for, work_left

    specs = [s for _, s in planned]
    if not any(s.train.second_order for s in specs):
        return planned
    left = work_left(specs, store) if progress else None  # costed for the line alone
    costs: dict[str, float] = {}
    picked = choose_for(specs, resources, bool(left), left, costs)
    if costs and hasattr(progress, "weigh"):  # the command's display: its ETA reads them
        progress.weigh(costs, (resources.workers if resources else None) or 1)
    chosen = [(keys, s) for (keys, _), s in zip(planned, picked, strict=True)]
    # a referee refits a cell by the other optimizer: where the cell's own fit moved to
    # L-BFGS as well, it would compare L-BFGS with itself, and is dropped
    mains = {(s.arm.label, s.budget): s.train.optimizer for k, s in chosen if not k.get("referee")}
    kept = [
        (keys, spec)
        for keys, spec in chosen
        if not keys.get("referee")
        or mains.get((spec.arm.label, spec.budget)) != spec.train.optimizer
    ]
    # a fit's cost grows as N P^2 = O(P^3), so two workers that start on the dearest fits
    # finish together instead of one waiting on a late large fit
    return sorted(kept, key=lambda keyed: -keyed[1].budget)


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
    # --target-resolution sizes a run by the spreads `sizing` reads (the module's functions)
    sizing = Sizing(sizing.size, sizing.plan_lines)
    # --plan: what a run would fit, keep or continue in --out, and its cost
    price = staticmethod(pricing.price)
    forms = {"pilot": PILOT_TIME}
    sized = True
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

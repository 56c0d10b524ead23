"""What the degree sweep plans from its config (and the task built from it) before it fits, and
nothing else: every (budget, arm) shape (`shapes`), a cell's trial (`spec`), the trials a run
fits (`trials`: each arm's depth ladder (`ladders`), or every cell's at its rate, under each
rounding (`rounded`)) and the referees of a fit's cells (`referees`). The negative control's
trials (`theory.CONTROL_LABEL`) draw seeds of their own (`trial_seed`) and its rows keep the seed
they stand beside (`row_keys`). What reads the store or times networks (the rates, each fit's
optimizer) is the run's (`experiment`), and the checks on the planned networks `preflight`'s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from blocklab.errors import UserError
from blocklab.experiments.degree_sweep.config import CONTROL_LABEL as CONTROL
from blocklab.experiments.degree_sweep.config import CONTROL_SEED_OFFSET, DegreeSweepConfig
from blocklab.specs import TrialSpec

if TYPE_CHECKING:
    from blocklab.budget import Shape
    from blocklab.specs import Arm
    from blocklab.tasks import Task

Cells = dict[tuple[int, str], tuple["Arm", "Shape"]]  # (budget, arm label) -> (arm, shape)
Planned = list[tuple[dict[str, Any], TrialSpec]]  # (row keys, trial)


def trial_seed(arm: Arm, seed: int) -> int:
    """The seed a trial of `arm` draws its initialization and training from for the run's seed
    `seed`: the control's its own (CONTROL_SEED_OFFSET + seed), so its ids and draws are not
    d=3's; every other arm's `seed` itself."""
    return CONTROL_SEED_OFFSET + seed if arm.label == CONTROL else seed


def row_keys(arm: Arm, seed: int) -> dict[str, Any]:
    """The keys a trial of `arm` at the run's seed `seed` puts over its rows: the control's rows
    name `seed`, not the trial's own (`trial_seed`), since the analysis pairs arms by
    (teacher, seed) and the control stands beside d=3's trial of that seed."""
    return {"seed": seed} if arm.label == CONTROL else {}


def spec(
    cfg: DegreeSweepConfig, arm: Arm, shape: Shape, lr: float, seed: int, teacher: int = 0
) -> TrialSpec:
    """A cell's trial: the config's shape at the cell's depth and width, its fit at rate `lr`,
    initialized by the run's seed `seed` (the control's by its own, `trial_seed`), fitting
    target `teacher`."""
    return TrialSpec(
        task=cfg.task,
        task_options=dict(cfg.task_options),
        arm=arm,
        budget=shape.budget,
        shape=replace(
            cfg.shape,
            depth=shape.depth,
            width=shape.width,
            bias=cfg.bias(arm),
            scaled_residual=cfg.shape.scaled_residual and cfg.shape.residual,
        ),
        train=replace(cfg.train, lr=lr),
        seed=trial_seed(arm, seed),
        data_seed=teacher,
    )


def trials(cfg: DegreeSweepConfig, cells: Cells, lr: dict[tuple[int, str], float]) -> Planned:
    """What a run fits: each arm's depth ladder per (teacher, seed) when staged (`ladders`),
    else every cell per (teacher, seed) at its rate, and the referees of a fit's cells."""
    if cfg.staged:
        return rounded(cfg, ladders(cfg, cells))
    planned = [
        (row_keys(arm, seed), spec(cfg, arm, shape, lr[key], seed, teacher))
        for key, (arm, shape) in cells.items()
        for teacher in range(cfg.teachers)
        for seed in range(cfg.seeds)
    ]
    refits = [({"referee": True, **row_keys(s.arm, 0)}, s) for s in referees(cfg, cells)]
    return rounded(cfg, planned) + refits


def rounded(cfg: DegreeSweepConfig, planned: Planned) -> Planned:
    """The run's trials (rounding 0, as before roundings existed) and, with `roundings` K, each
    again under roundings 1 to K-1 (`TrialSpec.rounding`), their rows tagged with it."""
    return planned + [
        ({**keys, "rounding": r}, replace(s, rounding=r))
        for r in range(1, cfg.roundings)
        for keys, s in planned
    ]


def ladders(cfg: DegreeSweepConfig, cells: Cells) -> Planned:
    """One trial per (arm, teacher, seed): the arm's depths over the budgets, climbed in turn
    (`ladder.fit_ladder`), each depth's row under its nominal budget. Every rung keeps the
    width, which continuation needs."""
    by_arm: dict[str, list[tuple[int, Arm, Shape]]] = {}
    for (budget, label), (arm, shape) in cells.items():
        by_arm.setdefault(label, []).append((budget, arm, shape))
    planned = []
    for label, rungs in by_arm.items():
        rungs.sort(key=lambda r: r[2].depth)
        depths = [shape.depth for _, _, shape in rungs]
        widths = {shape.width for _, _, shape in rungs}
        if len(set(depths)) < len(depths) or len(widths) > 1:
            listed = ", ".join(f"{b}: depth {s.depth}, width {s.width}" for b, _, s in rungs)
            raise UserError(
                f"a depth ladder needs one width and a different depth per budget; {label} "
                f"gets {listed}: choose --budgets further apart (or --ladder off)"
            )
        budgets = {shape.depth: budget for budget, _, shape in rungs}
        _, arm, top = rungs[-1]
        for teacher in range(cfg.teachers):
            for seed in range(cfg.seeds):
                trial = spec(cfg, arm, top, cfg.train.lr, seed, teacher)
                keys = {"rungs": budgets, **row_keys(arm, seed)}
                planned.append((keys, replace(trial, ladder=tuple(depths))))
    return planned


def shapes(cfg: DegreeSweepConfig, task: Task | None = None) -> Cells:
    """Solve every (budget, arm) shape up front, so that a bad budget fails before any training.
    `task`: the config's task where the caller has built it already."""
    from blocklab import budget as budgets
    from blocklab.models import block_params, mixes_tokens
    from blocklab.tasks import make_task

    cells: Cells = {}
    arms = cfg.arms()
    seq_len = (task or make_task(cfg.task, **cfg.task_options)).seq_len
    for arm in arms:
        if mixes_tokens(arm) and seq_len is None:
            raise UserError(f"{arm.label} mixes positions; task {cfg.task!r} has no sequence")
    if not cfg.budgets:  # every arm at its depths (`depths_by_arm`); a rung's budget is its cost
        depths = cfg.depths_by_arm()
        for arm in arms:
            for depth in depths[arm.label]:
                count = block_params(
                    arm, depth, cfg.shape.width, cfg.bias(arm), cfg.shape.ff, seq_len
                )
                cells[(count, arm.label)] = (
                    arm,
                    budgets.Shape(depth, cfg.shape.width, count, count),
                )
        return cells
    for b in cfg.budgets:
        for arm in arms:
            shape = budgets.solve(
                arm,
                b,
                mode=cfg.mode,
                width=cfg.shape.width,
                depth=cfg.shape.depth,
                bias=cfg.bias(arm),
                ff=cfg.shape.ff,
                seq_len=seq_len,
                tol=cfg.budget_tol,
                hint=f"widen --budget-tol or choose other --budgets or another --{cfg.mode}",
            )
            cells[(b, arm.label)] = (arm, shape)
    return cells


def referees(cfg: DegreeSweepConfig, cells: Cells) -> list[TrialSpec]:
    """Per cell, the first trial (teacher 0, seed 0) fitted by the other second-order optimizer
    from the same initialization (one restart, which is the trial's first) and training set, with
    the same iteration limit: each stops at its first doubling that gains less than the
    tolerance. The same limit, not a larger one: on deep narrow stacks an L-BFGS iteration, with
    its line search, costs a large share of an LM one, and single referees that never certified
    at four times the limit ran for minutes each (the results log)."""
    if not (cfg.referee and cfg.train.second_order):
        return []
    other = "lbfgs" if cfg.train.optimizer == "lm" else "lm"
    train = replace(cfg.train, optimizer=other, restarts=1)
    firsts = [spec(cfg, arm, shape, cfg.train.lr, 0) for arm, shape in cells.values()]
    return [replace(s, train=train) for s in firsts]

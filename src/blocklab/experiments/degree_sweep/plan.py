"""What the degree sweep plans from its config before it fits: every (budget, arm) shape
(`shapes`), a cell's trial (`spec`), the trials a run fits (`trials`: a depth ladder's, or every
cell's at its rate with the referees'), the rates (`rates`: searched for Adam, the config's for a
fit), the rank of every arm's input Jacobian (`input_ranks`) against what its design lets through
(`design_bound`), whether every arm's ladder continues (`check_ladders`) and each fit's
optimizer from its cost (`optimizers`). The negative control's trials (`theory.CONTROL_LABEL`)
draw seeds of their own (`trial_seed`) and its rows keep the seed they stand beside
(`row_keys`)."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from blocklab.errors import UserError
from blocklab.experiments import _trials
from blocklab.experiments.degree_sweep.config import CONTROL_LABEL as CONTROL
from blocklab.experiments.degree_sweep.config import CONTROL_SEED_OFFSET, DegreeSweepConfig
from blocklab.specs import TrialSpec

if TYPE_CHECKING:
    from blocklab.budget import Shape
    from blocklab.engine.executors import Resources
    from blocklab.engine.progress import Progress
    from blocklab.specs import Arm
    from blocklab.store import Store
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


def rates(
    cfg: DegreeSweepConfig,
    cells: Cells,
    store: Store,
    experiment: str,
    resources: Resources | None,
    bar: Progress,
    higher: bool,
) -> tuple[dict[tuple[int, str], float], dict[str, dict[str, Any]]]:
    """Each cell's rate and the search's record under "budget/arm": under Adam the best of
    lr_grid on validation with seed 0 and teacher 0 (`_trials.choose_rates`); a fit reads the
    config's (its warm start's), with nothing searched."""
    if cfg.train.second_order:
        return {key: cfg.train.lr for key in cells}, {}
    at = {key: functools.partial(spec, cfg, *cells[key], seed=0) for key in cells}
    every = len(trials(cfg, cells, {key: cfg.lr_grid[0] for key in cells}))
    return _trials.choose_rates(cfg, at, every, store, experiment, resources, bar, higher)


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


class Networks:
    """Each cell's network at initialization (seed 0) on teacher 0's data, built on first use
    and kept, by arm, depth and width: `cell` returns it, `copied` a copy for a check that
    changes it (None where the run has no such cell)."""

    def __init__(self, cfg: DegreeSweepConfig, cells: Cells):
        from blocklab.fitting.network import task_data

        self.data = task_data(cfg.task, cfg.task_options, 0)
        self.specs: dict[tuple[str, int, int], TrialSpec] = {
            (arm.label, shape.depth, shape.width): spec(cfg, arm, shape, cfg.train.lr, 0)
            for arm, shape in cells.values()
        }
        self.built: dict[tuple[str, int, int], Any] = {}

    def cell(self, arm: Arm, depth: int, width: int):
        from blocklab.fitting.network import init_model

        key = (arm.label, depth, width)
        if key not in self.built:
            self.built[key] = init_model(self.specs[key], self.data, "cpu", 0)
        return self.built[key]

    def copied(self, arm: Arm, depth: int, width: int):
        import copy

        if (arm.label, depth, width) not in self.specs:
            return None
        return copy.deepcopy(self.cell(arm, depth, width))


def design_bound(model, seen) -> tuple[int, str | None]:
    """The most input directions `model`'s design lets through, and why where that is fewer than
    its inputs (None: every input). Its linear embedding of f features into width w, at each of
    inputs / f positions, passes positions * min(f, w); where the network is affine in its
    inputs (`seen.affine`: every example's gradients the same, as logistic regression's), its
    readout passes at most its outputs per example. Both are the design's choice, shared by every
    arm at a width; a rank below them is a direction lost inside the network."""
    from torch import nn

    bounds: list[tuple[int, str | None]] = [(seen.inputs, None)]
    embed = getattr(model, "embed", None)
    if isinstance(embed, nn.Linear):
        f, w = embed.in_features, embed.out_features
        positions = seen.inputs // f
        where = f" at each of {positions} positions" if positions > 1 else ""
        bounds.append((positions * min(f, w), f"embedding of width {w}{where}"))
    if seen.affine:
        outputs = f"{seen.outputs} output" + ("s" if seen.outputs != 1 else "")
        why = f"readout of {outputs} on a network linear in its inputs"
        bounds.append((seen.outputs, why))
    return min(bounds, key=lambda b: b[0])  # the first of equal ones: the inputs themselves


def input_ranks(
    cfg: DegreeSweepConfig, cells: Cells, nets: Networks | None = None
) -> dict[str, dict[str, Any]]:
    """Per arm, the rank of its input Jacobian at initialization (seed 0, teacher 0) over the
    first test inputs, and the most its design lets through (`design_bound`: `bound`, with
    `bound_reason` where that is fewer than the inputs); the cell that loses a direction, else
    the lowest rank over its depths (`measures._jacobian`). A UserError before any fit when an
    arm sees fewer directions than its design lets through (a direction lost inside the network,
    such as LayerNorm over the inputs' width or fewer), naming the fix; a bound the design chose
    is stated in the report, not refused. `nets`: the cells' networks (`Networks`), read on a
    copy."""
    from blocklab.measures._jacobian import input_rank

    nets = nets or Networks(cfg, cells)
    data = nets.data
    if data.vocab is not None:  # token ids have no input gradient
        return {}
    sample = data.test.x[: max(256, 4 * data.test.x[0].numel())]
    out: dict[str, dict[str, Any]] = {}
    features: dict[str, int] = {}  # arm -> the features its embedding reads at one position
    for arm, shape in cells.values():
        model = nets.copied(arm, shape.depth, shape.width)  # input_rank makes it float64
        seen = input_rank(model, sample)
        if not seen.rows:  # its outputs overflowed at initialization: nothing to read
            continue
        bound, reason = design_bound(model, seen)
        r = {
            "rank": seen.rank,
            "inputs": seen.inputs,
            "depth": shape.depth,
            "width": shape.width,
            "singular_values": list(seen.singular_values),
            "bound": bound,
            "bound_reason": reason,
        }
        # the cell that loses a direction first, else the lowest rank
        if arm.label not in out or _order(r) < _order(out[arm.label]):
            out[arm.label] = r
            embed = getattr(model, "embed", None)
            features[arm.label] = getattr(embed, "in_features", seen.inputs)
    lost = {a: r for a, r in out.items() if r["rank"] < r["bound"]}
    if lost:
        arm, r = next(iter(lost.items()))
        low = ", ".join(f"{v:.2g}" for v in r["singular_values"])
        allowed = (
            f", of the {r['bound']} its {r['bound_reason']} lets through"
            if r["bound_reason"]
            else ""
        )
        need = features[arm] + 1  # LayerNorm at a width above the features keeps them all
        if cfg.shape.norm == "layer":
            wider = f"a width of {need} or more, or " if need > r["width"] else ""
            fix = f"{wider}--norm rms"
        else:
            fix = "another block or --norm: a layer drops a direction its embedding passes"
        raise UserError(
            f"NO VERDICT: design check input_rank failed before any fit: {arm} at width "
            f"{r['width']} with {cfg.shape.norm} norm sees {r['rank']} of the task's {r['inputs']} "
            f"input directions{allowed} (input Jacobian singular values {low}), so a direction "
            f"is lost inside the network and every fit would measure that floor; use {fix}"
        )
    return out


def _order(r: dict[str, Any]) -> tuple[bool, int]:
    return r["rank"] >= r["bound"], r["rank"]


def check_ladders(cfg: DegreeSweepConfig, cells: Cells, nets: Networks | None = None) -> None:
    """Before any fit of a staged run: every arm continues as its depth ladder will continue it
    (`checks.blocks.check_ladder`, the contract check `blocklab check` runs on every per-token
    block), at the run's width, norm and residual scaling, on the first test inputs; else a
    UserError naming the arm and --ladder off. `nets`: the cells' networks (`Networks`): a
    copy of the arm's cell at depth 1 where the run has one stands for the ladder's first rung."""
    if not cfg.staged:
        return
    from blocklab.checks.blocks import check_ladder
    from blocklab.fitting.network import init_model

    nets = nets or Networks(cfg, cells)
    data = nets.data
    sample = data.test.x[:256]
    arms = {arm.label: (arm, shape) for arm, shape in cells.values()}
    for label, (arm, shape) in arms.items():
        one = spec(cfg, arm, shape, cfg.train.lr, 0)

        def make(depth: int, seed: int, one=one, arm=arm, width=shape.width):
            built = nets.copied(arm, depth, width) if seed == 0 else None
            if built is None:  # no cell of the run is this rung at this seed
                built = init_model(one.at_depth(depth), data, "cpu", seed)
            return built

        check_ladder(make, sample, label if arm.degrees else f"block {label}")


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


def optimizers(planned: Planned, store: Store, resources: Resources | None, progress):
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

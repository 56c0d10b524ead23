"""What the training experiments share: trial specs, the learning-rate search, running the
trials, and the one flat row per finished trial that every report reads.

The degree sweep solves shapes from budgets; the attention experiments (sanford, needle) fix the
shapes themselves and equalize parameters by construction; all of them run here. A row names the
budgeted count (blocks and feed-forward sublayers) `block_params` and the network's whole count
`total_params`. Like the experiments, this module imports what needs torch or numpy where it runs
(see `blocklab.experiments`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

from blocklab import frames
from blocklab.engine.progress import Progress, display
from blocklab.experiments import Trials
from blocklab.options import meta
from blocklab.specs import NetShape, TrainConfig, TrialSpec
from blocklab.store import FINISHED, Store

if TYPE_CHECKING:
    from blocklab.engine.executors import Resources
    from blocklab.specs import Arm


def spec(
    task: str,
    task_options: dict[str, Any],
    arm: Arm,
    shape: NetShape,
    train: TrainConfig,
    seed: int,
    measures: tuple[str, ...] = (),
) -> TrialSpec:
    from blocklab.models import block_params
    from blocklab.tasks import make_task

    seq_len = make_task(task, **task_options).seq_len
    budget = 0  # a flattened baseline is compared by its total count, not a budget
    if not shape.flatten:
        budget = block_params(arm, shape.depth, shape.width, False, shape.ff, seq_len)
    return TrialSpec(
        task=task,
        task_options=dict(task_options),
        arm=arm,
        budget=budget,
        shape=shape,
        train=train,
        seed=seed,
        measures=tuple(measures),
    )


def total_params(task: str, task_options: dict[str, Any], arm: Arm, shape: NetShape) -> int:
    """Every parameter of the network, embedding and readout included."""
    from blocklab.fitting import network

    one = spec(task, task_options, arm, shape, TrainConfig(), seed=0)
    data = network.task_data(task, task_options, 0)
    return network.build_model(one, data).param_counts()["total"]


def width_for_params(
    task: str, task_options: dict[str, Any], arm: Arm, shape: NetShape, target: int
) -> int:
    """The width whose total count is nearest `target` (counts grow with width)."""

    def count(w: int) -> int:
        return total_params(task, task_options, arm, replace(shape, width=w))

    lo, hi = 1, 2
    while count(hi) < target:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if count(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return min((w for w in (lo - 1, lo) if w >= 1), key=lambda w: abs(count(w) - target))


def run_planned(
    planned: list[tuple[dict[str, Any], TrialSpec]],
    store: Store,
    experiment: str,
    *,
    resources: Resources | None,
    progress: bool | Progress,
    label: str | None = None,
) -> Trials:
    """Run (keys, spec) pairs: the finished rows (`row`), each tagged with its keys, and the
    trials that raised or were not run."""
    from blocklab.engine import sweep

    specs = [s for _, s in planned]
    records = sweep.run(
        specs,
        store,
        experiment,
        resources=resources,
        label=label or experiment,
        progress=progress,
    )
    failed = [
        {"id": s.id, "trial": s.describe(), "error": records.get(s.id, {}).get("error", "not run")}
        for s in specs
        if records.get(s.id, {}).get("status") not in FINISHED
    ]
    rows = [
        r
        for k, s in planned
        if records.get(s.id, {}).get("status") in FINISHED
        for r in (rung_rows(s, records[s.id], **k) if s.ladder else [row(s, records[s.id], **k)])
    ]
    return Trials(rows, failed)


def rung_rows(
    spec: TrialSpec, rec: dict[str, Any], rungs: dict[int, int], **keys: Any
) -> list[dict[str, Any]]:
    """A depth ladder's trial as one row per rung (`fitting.ladder.fit_ladder`), under the
    nominal budget `rungs[depth]` the rung was planned for; every row keeps the trial's id."""
    out = []
    for step in frames.rung_records(rec):  # the one split of a ladder into rungs
        depth = step["depth"]
        at = spec.at_depth(depth, budget=rungs[depth], ladder=())
        r = row(at, step, ladder=True, exact_start=step["exact_start"], **keys)
        out.append({**r, "id": spec.id})
    return out


def choose_rates(
    cfg: Any,
    at: dict[tuple[Hashable, ...], Callable[[float], TrialSpec]],
    expected: int,
    store: Store,
    experiment: str,
    resources: Resources | None,
    bar: Progress,
    higher: bool,
) -> tuple[dict[tuple[Hashable, ...], float], dict[str, dict[str, Any]]]:
    """Per key of `at` the best rate of the config's `lr_grid` on validation, extended up to its
    `lr_extend` times (`search_lr`), and each key's choice under "part/part/..." (the name
    reports and JSON give it). The `expected` trials that will run at the chosen rates are in the
    display's ETA from the first search trial on: their count does not hang on the rates."""
    bar.expect(expected)
    choice = search_lr(at, cfg.lr_grid, cfg.lr_extend, store, experiment, resources, bar, higher)
    bar.expect(-expected)
    named = {"/".join(map(str, key)): c for key, c in choice.items()}
    return {key: c["lr"] for key, c in choice.items()}, named


def run_searched(
    cfg: Any,
    at: dict[tuple[Hashable, ...], Callable[[float], TrialSpec]],
    finals: Callable[[dict[tuple[Hashable, ...], float]], list[tuple[dict[str, Any], TrialSpec]]],
    store: Store,
    experiment: str,
    *,
    resources: Resources | None,
    progress: bool | Progress,
    higher: bool,
) -> tuple[Trials, dict[str, dict[str, Any]]]:
    """Search (`choose_rates`), then run the (keys, spec) pairs `finals` plans from
    {key: rate} (`run_planned`). Returns the trials and each key's choice."""
    bar, own = display(progress)
    try:
        expected = len(finals({key: cfg.lr_grid[0] for key in at}))
        rates, choice = choose_rates(cfg, at, expected, store, experiment, resources, bar, higher)
        trials = run_planned(
            finals(rates), store, experiment, resources=resources, progress=bar, label="seeds"
        )
    finally:
        if own:
            bar.close()
    return trials, choice


def row(spec: TrialSpec, rec: dict[str, Any], **keys: Any) -> dict[str, Any]:
    """One finished trial as the flat row every report reads; `keys` (what the experiment
    compared) come last, so a key of the same name, like depth-width's `budget`, wins."""
    m, curves = rec["metrics"], rec.get("curves") or {}
    counts = m.get("params", {})  # `Net.param_counts()` as the trial stored it
    chains = m.get("restarts") or []
    # where the refit rule refitted a ladder's rung (`ladder.Climb.refit`), each chain holds the
    # first attempt's chain it replaced; rows of older stores lack the fields
    firsts = [c["first_attempt"] for c in chains if c.get("first_attempt")]
    other = counts["embed"] + counts["readout"] if "embed" in counts else None
    return {
        "id": spec.id,
        "task": spec.task,
        # the options the task was made with: what a report reads the task's chance from
        "task_options": dict(spec.task_options),
        "budget": spec.budget,
        "arm": spec.arm.label,
        "degree": spec.arm.degree,
        "layer_degrees": list(spec.arm.degrees),
        "seed": spec.seed,
        # the target's data seed where the experiment fixes one (None: the data follow the seed)
        "teacher": spec.data_seed,
        "status": rec["status"],
        "metric": m.get("metric"),
        "higher_is_better": m.get("higher_is_better"),
        "test_metric": m.get("test_metric"),
        "test_loss": m.get("test_loss"),
        # the budgeted part (blocks and feed-forward sublayers), and every parameter
        "block_params": frames.column(rec, "block_params"),
        "total_params": frames.column(rec, "total_params"),
        # the embedding and readout, the same for every arm at a width, reported beside a budget
        "other_params": other,
        "depth": spec.shape.depth,
        "width": spec.shape.width,
        "lr": spec.train.lr,
        "schedule": spec.train.schedule,
        "max_steps": spec.train.steps,
        "steps_to_threshold": m.get("steps_to_threshold"),
        "threshold": m.get("threshold"),
        "seconds": m.get("seconds"),
        "diverged_step": m.get("diverged_step"),
        # what more training would have gained, for a plateau criterion
        # (`monitor.TrialMonitor.plateau`)
        "plateau_improvement": m.get("plateau_improvement"),
        # how the trial was fitted, and a second-order fit's fields (`fitting.converge`), None
        # for an Adam trial
        "optimizer": m.get("optimizer", "adam"),
        "train_loss": m.get("train_loss"),
        "converged": m.get("converged"),
        "examples": m.get("examples"),
        "restart_train_losses": [r["train_loss"] for r in chains],
        # each chain's final validation and test MSE (None: diverged; validation: an older store)
        "restart_val_losses": [r.get("val_loss") for r in chains],
        "restart_test_losses": [r.get("test_loss") for r in chains],
        # each chain at half its iterations (`converge._half`: None where it has no such check)
        "restart_half_train_losses": [(r.get("half") or {}).get("train_loss") for r in chains],
        "restart_half_val_losses": [(r.get("half") or {}).get("val_loss") for r in chains],
        "restart_half_test_losses": [(r.get("half") or {}).get("test_loss") for r in chains],
        # each chain's iterations and certificate: what a larger budget continues
        "restart_iterations": [r.get("iterations") for r in chains],
        "restart_converged": [r.get("converged") for r in chains],
        "restart_spread": m.get("restart_spread"),
        # whether the refit rule refitted the rung, and its first attempt's chains (empty: not)
        "refit": any(bool(r.get("refit")) for r in chains),
        "first_attempt_val_losses": [f.get("val_loss") for f in firsts],
        "first_attempt_test_losses": [f.get("test_loss") for f in firsts],
        # {measure: {"init": summary, "trained": summary}} when the spec asked for measures
        "measures": m.get("measures", {}),
        "curve_step": curves.get("step", []),
        "curve_val_loss": curves.get("val_loss", []),
        "curve_train_loss": curves.get("train_loss", []),
        **keys,
    }


# the config fields of an experiment that searches learning rates (`search_lr`) and reads a
# plateau criterion (`analysis.plateau.plateaued`)


def lr_grid_field(default: tuple[float, ...], per: str) -> Any:
    return field(
        default=default, metadata=meta(f"learning rates tried per {per} on validation", gt=0)
    )


def lr_extend_field(default: int) -> Any:
    help = "times the grid is extended past an edge where the best rate lies"
    return field(default=default, metadata=meta(help, ge=0))


def plateau_tol_field(more: str) -> Any:
    help = f"a trial plateaued when more training gained less than this share of its final {more}"
    return field(default=0.03, metadata=meta(help, gt=0, lt=1))


def lr_unused(grid: tuple[float, ...], extend: int) -> dict[str, str]:
    """The keys a config that searches learning rates does not read (its `unused()`)."""
    out = {"train.lr": "the learning rates come from lr_grid (one rate there fixes it)"}
    if len(grid) == 1 and extend:
        out["lr_extend"] = "a grid of one rate is a fixed rate, never extended"
    return out


def val_score(record: dict[str, Any] | None, higher_is_better: bool) -> float:
    """A search trial's validation metric, higher better; -inf where it did not finish done."""
    value = (record or {}).get("metrics", {}).get("val_metric")
    if (record or {}).get("status") != "done" or value is None:
        return -math.inf
    return value if higher_is_better else -value


def _beyond(grid: list[float], low: bool) -> float:
    """The next rate past the grid's low or high edge, at the grid's own ratio there."""
    return grid[0] ** 2 / grid[1] if low else grid[-1] ** 2 / grid[-2]


def next_rate(rates: list[float], scores: list[float], more: bool) -> tuple[int, bool, bool]:
    """One key's step of the search (`search_lr`, and a plan's reading of a stored search): of
    `rates` (ascending) scored `scores` (`val_score`), the best one's index, whether it lies at
    an edge, and whether the search goes on. Ties (accuracy 1 at several rates) go to the rate
    nearest the grid's middle: an edge tied with a rate inside it is no reason to search past it.
    Where `more` extensions are left and the best at an edge scored, the rate past that edge is
    added to `rates` in place, and the search goes on there."""
    top, mid = max(scores), (len(rates) - 1) / 2
    ties = [i for i, sc in enumerate(scores) if sc == top]
    best = min(ties, key=lambda i: (abs(i - mid), rates[i]))
    edge = len(rates) == 1 or best in (0, len(rates) - 1)
    if edge and more and math.isfinite(scores[best]):
        low = best == 0
        rates.insert(0 if low else len(rates), _beyond(rates, low=low))
        return best, edge, True
    return best, edge, False


def search_lr(
    at: dict[Hashable, Callable[[float], TrialSpec]],
    grid: tuple[float, ...],
    extend: int,
    store: Store,
    experiment: str,
    resources: Resources | None,
    progress: bool | Progress,
    higher: bool,
) -> dict[Hashable, dict[str, Any]]:
    """Per key, the rate of `grid` whose trial `at[key](lr)` scores best on validation (ties: the
    one nearest the middle of the grid). A best rate at an edge is pushed past it up to `extend`
    times; a choice still at an edge says so. A grid of one rate is the user's fixed rate: never
    extended, and at its own edge.

    Returns per key {"lr", "tried", "at_edge", "val_metric": {rate: score or None},
    "seconds": {rate: training seconds or None}}."""
    from blocklab.engine import sweep

    grids = {key: sorted(grid) for key in at}
    extend = extend if len(grid) > 1 else 0
    choice: dict[Hashable, dict[str, Any]] = {}
    seconds: dict[tuple[Hashable, float], float | None] = {}
    pending, round_ = list(at), 0
    while pending:
        search = {key: [at[key](lr) for lr in grids[key]] for key in pending}
        label = "lr search" if round_ == 0 else f"lr search, extended ({round_})"
        specs = [s for group in search.values() for s in group]
        records = sweep.run(
            specs, store, experiment, resources=resources, label=label, progress=progress
        )
        again = []
        for key in pending:
            rates = grids[key]
            scores = [val_score(records.get(s.id), higher) for s in search[key]]
            for lr, s in zip(rates, search[key], strict=True):
                seconds[key, lr] = (records.get(s.id) or {}).get("metrics", {}).get("seconds")
            best, edge, extended = next_rate(rates, scores, round_ < extend)
            if extended:
                again.append(key)
                continue
            choice[key] = {
                "lr": rates[best],
                "tried": list(rates),
                "at_edge": edge,
                "val_metric": {
                    f"{lr:g}": (None if math.isinf(sc) else abs(sc))
                    for lr, sc in zip(rates, scores, strict=True)
                },
                # each rate's training time, so a report can say what the search cost
                "seconds": {f"{lr:g}": seconds.get((key, lr)) for lr in rates},
            }
        pending, round_ = again, round_ + 1
    return choice

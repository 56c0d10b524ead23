"""Seed 000's experiment: networks of degree-d layers at equal parameter budgets, over seeds.

For every (budget, arm) a learning rate is chosen from a small grid on the validation split with
the first seed (one fixed rate across degrees would favour whichever degree it happens to suit);
then every seed trains at that rate and is scored on the test split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from blocklab import budget as budgets
from blocklab import sweep
from blocklab.errors import UserError
from blocklab.models import ACTIVATIONS, FEED_FORWARD, NORMS, Arm, parse_arm
from blocklab.store import Store
from blocklab.tasks import make_task
from blocklab.train import TrainConfig

EXPERIMENT = "degree-sweep"


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True)
class DegreeSweepConfig:
    task: str = field(default="teacher", metadata=_help("registered task name"))
    task_options: dict[str, Any] = field(default_factory=dict)
    degrees: tuple[str, ...] = field(
        default=("2", "e", "3", "4"),
        metadata=_help("degrees to compare: integers, decimals, 'e', or per-layer lists '[3,2,3]'"),
    )
    baselines: tuple[str, ...] = field(
        default=("mlp",),
        metadata=_help(
            "other blocks compared at the same budgets, with options in parentheses: "
            "'mlp', 'softmax_attention(heads=2)', 'poly_attention(n=2)'"
        ),
    )
    budgets: tuple[int, ...] = field(
        default=(12288, 24576), metadata=_help("parameter budgets of the blocks")
    )
    seeds: int = field(default=5, metadata=_help("seeds per configuration (0, 1, ...)"))
    data_seed: int | None = field(
        default=None, metadata=_help("fixed seed for the task's data; None: the trial seed")
    )
    mode: str = field(
        default="width", metadata=_help("'width': fixed width, depth solved; 'depth'")
    )
    width: int = field(default=32, metadata=_help("layer width in width mode"))
    depth: int = field(default=4, metadata=_help("depth in depth mode"))
    bias: bool = field(default=False, metadata=_help("biases inside the polynomial factors"))
    norm: str = field(default="layer", metadata=_help(f"normalization: {', '.join(NORMS)}"))
    activation: str = field(
        default="none", metadata=_help(f"activation after each block: {', '.join(ACTIVATIONS)}")
    )
    residual: bool = field(default=True, metadata=_help("residual connection around each layer"))
    ff: str = field(
        default="none",
        metadata=_help(
            f"feed-forward sublayer per layer, counted in the budget: {', '.join(FEED_FORWARD)}"
        ),
    )
    lr_grid: tuple[float, ...] = field(
        default=(3e-3, 1e-2, 3e-2), metadata=_help("learning rates tried per arm on validation")
    )
    alpha: float = field(default=0.05, metadata=_help("significance level of the paired tests"))
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self):
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        if not self.degrees and not self.baselines:
            raise ValueError("nothing to compare: give degrees or baselines")
        if not self.budgets:
            raise ValueError("give at least one budget")
        if not self.lr_grid or any(not (lr > 0 and math.isfinite(lr)) for lr in self.lr_grid):
            raise ValueError(f"learning rates must be positive, got {self.lr_grid}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {self.norm!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}"
            )
        if self.ff not in FEED_FORWARD:
            raise ValueError(f"ff must be one of {', '.join(FEED_FORWARD)}, got {self.ff!r}")
        if self.mode not in ("width", "depth"):
            raise ValueError(f"mode must be 'width' or 'depth', got {self.mode!r}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")

    def arms(self) -> list[Arm]:
        arms = [parse_arm(d) for d in self.degrees] + [parse_arm(b) for b in self.baselines]
        for b, arm in zip(self.baselines, arms[len(self.degrees) :], strict=True):
            if arm.degrees:
                raise UserError(f"baseline {b!r} is a degree; put it in degrees")
        labels = [a.label for a in arms]
        if len(set(labels)) != len(labels):
            raise UserError(f"an arm is listed twice: {', '.join(labels)}")
        return arms


def plan(cfg: DegreeSweepConfig) -> dict[tuple[int, str], tuple[Arm, budgets.Shape]]:
    """Solve every (budget, arm) shape up front, so that a bad budget fails before any training."""
    shapes, arms = {}, cfg.arms()
    seq_len = make_task(cfg.task, **cfg.task_options).seq_len
    for arm in arms:
        if arm.mixes_tokens and seq_len is None:
            raise UserError(f"{arm.label} mixes positions; task {cfg.task!r} has no sequence")
    for b in cfg.budgets:
        for arm in arms:
            # other blocks keep their own bias options; the polynomial family follows cfg.bias
            bias = cfg.bias if arm.degrees else False
            shape = budgets.solve(
                arm,
                b,
                mode=cfg.mode,
                width=cfg.width,
                depth=cfg.depth,
                bias=bias,
                ff=cfg.ff,
                seq_len=seq_len,
            )
            shapes[(b, arm.label)] = (arm, shape)
    return shapes


def _spec(cfg: DegreeSweepConfig, arm: Arm, shape: budgets.Shape, lr: float, seed: int):
    return sweep.TrialSpec(
        task=cfg.task,
        task_options=dict(cfg.task_options),
        arm=arm,
        budget=shape.budget,
        depth=shape.depth,
        width=shape.width,
        bias=cfg.bias if arm.degrees else False,
        norm=cfg.norm,
        activation=cfg.activation,
        residual=cfg.residual,
        train=replace(cfg.train, lr=lr),
        seed=seed,
        data_seed=cfg.data_seed,
        ff=cfg.ff,
    )


def _score(record: dict[str, Any] | None, higher_is_better: bool) -> float:
    value = (record or {}).get("metrics", {}).get("val_metric")
    if (record or {}).get("status") != "done" or value is None:
        return -math.inf
    return value if higher_is_better else -value


@dataclass
class SweepResult:
    rows: list[dict[str, Any]]  # one per final trial (done or diverged), for analysis
    lr_choice: dict[str, dict[str, Any]]  # "budget/arm" -> chosen lr and the grid's val scores
    failed: list[dict[str, Any]]  # trials that raised: id, description, error


def run(
    cfg: DegreeSweepConfig,
    store: Store,
    *,
    resources: sweep.Resources | None = None,
    progress: bool = True,
) -> SweepResult:
    task = make_task(
        cfg.task, **cfg.task_options
    )  # unknown task or option fails here, not in a worker
    shapes = plan(cfg)
    first = 0

    chosen: dict[tuple[int, str], float] = {}
    lr_choice: dict[str, dict[str, Any]] = {}
    if len(cfg.lr_grid) > 1:
        search = {
            key: [_spec(cfg, arm, shape, lr, first) for lr in cfg.lr_grid]
            for key, (arm, shape) in shapes.items()
        }
        records = sweep.run(
            [s for specs in search.values() for s in specs],
            store,
            EXPERIMENT,
            resources=resources,
            label="lr search",
            progress=progress,
        )
        for key, specs in search.items():
            scores = [_score(records.get(s.id), task.higher_is_better) for s in specs]
            best = max(range(len(specs)), key=lambda i: (scores[i], -cfg.lr_grid[i]))
            chosen[key] = cfg.lr_grid[best]
            lr_choice[f"{key[0]}/{key[1]}"] = {
                "lr": chosen[key],
                "val_metric": {
                    f"{lr:g}": (None if math.isinf(s) else abs(s))
                    for lr, s in zip(cfg.lr_grid, scores, strict=True)
                },
            }
    else:
        chosen = {key: cfg.lr_grid[0] for key in shapes}

    finals = [
        _spec(cfg, arm, shape, chosen[key], first + i)
        for key, (arm, shape) in shapes.items()
        for i in range(cfg.seeds)
    ]
    records = sweep.run(
        finals, store, EXPERIMENT, resources=resources, label="seeds", progress=progress
    )
    rows, failed = [], []
    for spec in finals:
        rec = records.get(spec.id)
        if rec is None or rec["status"] == "failed":
            failed.append(
                {
                    "id": spec.id,
                    "trial": spec.describe(),
                    "error": (rec or {}).get("error", "not run"),
                }
            )
        else:
            rows.append(row(spec, rec, task.metric, task.higher_is_better))
    return SweepResult(rows, lr_choice, failed)


def row(spec: sweep.TrialSpec, rec: dict[str, Any], metric: str, higher: bool) -> dict[str, Any]:
    """The flat per-trial row that analysis, plots and reports read."""
    m, c = rec["metrics"], rec["curves"]
    return {
        "id": spec.id,
        "task": spec.task,
        "budget": spec.budget,
        "arm": spec.arm.label,
        "degree": spec.arm.degree,
        "layer_degrees": list(spec.arm.degrees),
        "seed": spec.seed,
        "status": rec["status"],
        "metric": metric,
        "higher_is_better": higher,
        "test_metric": m.get("test_metric"),
        "steps_to_threshold": m.get("steps_to_threshold"),
        "threshold": m.get("threshold"),
        "max_steps": spec.train.steps,
        "curve_step": c.get("step", []),
        "curve_val_loss": c.get("val_loss", []),
        "block_params": m["params"]["blocks"],
        "other_params": m["params"]["embed"] + m["params"]["readout"],
        "depth": spec.depth,
        "width": spec.width,
        "lr": spec.train.lr,
        "seconds": m.get("seconds"),
        "diverged_step": m.get("diverged_step"),
    }

"""Seed 002's Match2 / Match3 separation (Sanford, Hsu, Telgarsky 2023), constructed and trained.

Constructed: the seed's explicit weights (`blocklab.constructions`), standard attention for Match2
and tensor attention for Match3, scored on fresh data. Trained: one layer of standard vs
third-order (tensor) attention at equal parameters, per sequence length N and width. Both
networks have the same width, embedding, feed-forward and readout; the tensor block's attention
dimension is 2/3 of the width so that its five projections cost what the standard block's three
and an output map cost (6 W a = 4 W^2). Each (task, N, width, block) gets its own learning rate,
the best of `lr_grid` on validation (seed 0; pushed past an edge of the grid up to `lr_extend`
times), then trains over seeds at that rate. Under the wsd schedule each trial also measures what
twice its steps would have gained, which is the plateau criterion the report applies.

The seed predicts: standard attention solves Match2 with O(1) dimension but needs
m H = Omega(N / log N) for Match3; tensor attention solves Match3 at O(1).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

from blocklab.errors import UserError
from blocklab.experiments import EXPERIMENTS, Command, Experiment, Trials, _pricing, _trials
from blocklab.options import meta, validate
from blocklab.specs import NetShape, TrainConfig
from blocklab.store import Store

EXPERIMENT = "sanford-match"


def _train(steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=64, lr=3e-3, eval_points=20, schedule="wsd")


@dataclass(frozen=True)
class MatchConfig:
    tasks: tuple[str, ...] = field(
        default=("match2", "match3"), metadata=meta("match2, match3", choices=("match2", "match3"))
    )
    seq_len: tuple[int, ...] = field(
        default=(6,),
        metadata=meta("sequence lengths N, a width sweep each (M chosen to balance)", ge=3),
    )
    widths: tuple[int, ...] = field(
        default=(6, 12, 24, 48),
        metadata=meta("model widths, multiples of 3 (equal parameters)", ge=3),
    )
    n_train: int = field(default=16384, metadata=meta("training examples", ge=1))
    # 8 seeds: the fewest whose paired test finds `planned_effect` on Match3 with power >= 0.9
    # at alpha / (number of widths), Holm's first step (`blocklab.analysis.power`)
    seeds: int = field(default=8, metadata=meta("seeds per configuration", ge=1))
    solved: float = field(
        default=0.95, metadata=meta("test accuracy that counts as solved", gt=0, le=1)
    )
    alpha: float = field(default=0.05, metadata=meta("level of the paired tests", gt=0, lt=1))
    # the 3-seed run of 2026-11-23: tensor ahead by 0.025-0.099 on Match3 (mean 0.078), paired
    # differences with std 0.012-0.066 (pooled 0.043)
    planned_effect: float = field(
        default=0.08,
        metadata=meta("accuracy gap the paired test must find (power calculation)", gt=0, lt=1),
    )
    planned_sd: float = field(
        default=0.043,
        metadata=meta("std of the per-seed gap, tensor minus standard (power calculation)", gt=0),
    )
    lr_grid: tuple[float, ...] = _trials.lr_grid_field(
        (1e-3, 3e-3, 1e-2), "(task, N, width, block)"
    )
    lr_extend: int = _trials.lr_extend_field(1)
    plateau_tol: float = _trials.plateau_tol_field("validation loss (twice the steps, under wsd)")
    n_test: int = field(default=2048, metadata=meta("fresh test sequences per construction", ge=1))
    train: TrainConfig = field(default_factory=lambda: _train(2000))

    def __post_init__(self):
        from blocklab.tasks import make_task

        validate(self)
        if any(w % 3 for w in self.widths):
            raise ValueError(f"widths must be multiples of 3, got {self.widths}")
        for task in self.tasks:  # the task checks the sequence length it can balance
            for n in self.seq_len:
                make_task(task, seq_len=n, n_train=self.n_train)

    def unused(self) -> dict[str, str]:
        return _trials.lr_unused(self.lr_grid, self.lr_extend)

    @classmethod
    def full(cls) -> MatchConfig:
        """Two sequence lengths, widths 6-96 and 6000 steps: the width where standard attention
        starts to solve Match3, against the N / log N of the seed's bound."""
        return cls(
            seq_len=(6, 10),
            widths=(6, 12, 24, 48, 96),
            n_train=65536,
            train=_train(6000),
        )


MATCH_SHAPE = NetShape(depth=1, norm="layer", residual=True, ff="relu4x")


def match_arms(width: int):
    """Standard and tensor attention of equal cost at one width (see the module docstring)."""
    from blocklab.models import parse_arm

    return [
        ("standard", parse_arm(f"softmax_attention(head_dim={width})")),
        ("tensor", parse_arm(f"tensor_attention(head_dim={2 * width // 3})")),
    ]


def task_options(cfg: MatchConfig, seq_len: int) -> dict[str, Any]:
    return {"seq_len": seq_len, "n_train": cfg.n_train}


def plan(cfg: MatchConfig) -> dict[tuple[str, int, int, str], tuple[Any, Any]]:
    """(task, N, width, model) -> (arm, shape), the arms of each width checked equal in size."""
    out = {}
    for task in cfg.tasks:
        for n in cfg.seq_len:
            opts = task_options(cfg, n)
            for width in cfg.widths:
                shape = replace(MATCH_SHAPE, width=width)
                arms = match_arms(width)
                counts = {m: _trials.total_params(task, opts, arm, shape) for m, arm in arms}
                if len(set(counts.values())) != 1:
                    raise UserError(f"arms differ in size at width {width}: {counts}")
                for model, arm in arms:
                    out[(task, n, width, model)] = (arm, shape)
    return out


def _spec(cfg: MatchConfig, key: tuple[str, int, int, str], arm, shape, lr: float, seed: int):
    task, n = key[:2]
    return _trials.spec(task, task_options(cfg, n), arm, shape, replace(cfg.train, lr=lr), seed)


@dataclass
class MatchTrials(Trials):
    # "task/N/width/model" -> the chosen rate, the rates tried with their validation accuracy,
    # and whether the choice lies at an edge of what was tried
    lr_choice: dict[str, dict[str, Any]]
    # one per construction evaluated: {"task", "block", "width", "seq_len", "modulus",
    # "accuracy", "n_test"}, the accuracy measured on fresh data
    constructions: list[dict[str, Any]]


def constructed(cfg: MatchConfig) -> list[dict[str, Any]]:
    """Every construction of the config's tasks, at every sequence length, on fresh data."""
    from blocklab import constructions

    return [
        constructions.evaluate(task, block, n, n_test=cfg.n_test, seed=1000 + n)
        for task, block in sorted(constructions.CONSTRUCTIONS)
        if task in cfg.tasks
        for n in cfg.seq_len
    ]


def searched(cfg: MatchConfig):
    """What a run searches and fits (`_trials.run_searched`): per (task, N, width, model) the
    search's trial at a rate (seed 0), and the finals, every seed of each at its chosen rate."""
    shapes = plan(cfg)
    at = {key: functools.partial(_spec, cfg, key, *shapes[key], seed=0) for key in shapes}

    def finals(rates):
        return [
            (
                {"seq_len": key[1], "width": key[2], "model": key[3]},
                _spec(cfg, key, *shapes[key], rates[key], seed),
            )
            for key in shapes
            for seed in range(cfg.seeds)
        ]

    return at, finals


def run(cfg: MatchConfig, store: Store, *, resources=None, progress=True) -> MatchTrials:
    at, finals = searched(cfg)
    trials, lr_choice = _trials.run_searched(
        cfg, at, finals, store, EXPERIMENT, resources=resources, progress=progress, higher=True
    )
    return MatchTrials(trials.rows, trials.failed, lr_choice, constructed(cfg))


def price(cfg: MatchConfig, out_dir) -> Any:
    """--plan: the search's trials and the finals (`searched`) as far as the store in `out_dir`
    decides the search, priced (`_pricing.price_searched`); the constructions, scored on fresh
    data without training, are not in it."""
    at, finals = searched(cfg)
    return _pricing.price_searched(cfg, at, finals, out_dir, ("sanford match",),
                                   extra={"seeds": cfg.seeds})  # fmt: skip


@EXPERIMENTS.register
class SanfordMatch(Experiment):
    Config = MatchConfig
    run = staticmethod(run)
    price = staticmethod(price)
    forms = {"full": None}
    commands = (
        Command(
            "sanford match",
            "standard vs tensor attention on Match2 and Match3, constructed and trained",
            "runs/sanford-match",
        ),
    )

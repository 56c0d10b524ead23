"""The token-manipulation suite: every sequence block at one parameter budget on the tasks of
mad-lab (Poli et al. 2024: in-context recall, fuzzy and noisy recall, selective copying,
compression, memorization) and zoology's multi-query associative recall (Arora et al. 2023), each
over a ladder of difficulty levels, over seeds.

Each block runs causal (the labels are next-token style: a block that saw later positions would
read the answers) in one backbone: token embedding and learned positions, `depth` layers of
(norm, block, residual, ReLU 4x feed-forward), a norm and a per-position readout. Its width is the
one whose layers (blocks and feed-forwards) come nearest the budget, per task level, since a token
map's size can depend on the sequence length. Each (block, task) gets its own learning rate: the
best of `lr_grid` on validation accuracy at the task's first level (seed 0), pushed past an edge
of the grid up to `lr_extend` times; every level and seed of that pair trains at it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

from blocklab.errors import UserError
from blocklab.experiments import EXPERIMENTS, Command, Experiment, Trials, _arms, _pricing, _trials
from blocklab.experiments.mad import width_sweep
from blocklab.options import meta, validate
from blocklab.specs import NetShape, TrainConfig
from blocklab.store import Store

EXPERIMENT = "mad"
MODES = ("suite", "width-sweep")

TASKS = ("icr", "fuzzy_icr", "noisy_icr", "selective_copy", "compression", "memorization", "mqar")

# the difficulty ladder of each task, easiest first: options over the task's defaults. The quick
# form climbs the first rungs (`levels`), every one of them at 16 tokens or fewer (a trial at 32
# costs about twice one at 16, tensor attention's (T, T, T) scores far more); the full form climbs
# all of them. One axis per task, the one the papers vary: sequence length and vocabulary
# (recall), noise share, tokens to copy, the length to compress, the size of the map to memorize,
# key-value pairs (MQAR)
LADDERS: dict[str, list[dict[str, Any]]] = {
    "icr": [{"seq_len": 16, "vocab": 16}, {"seq_len": 16, "vocab": 32}]
    + [{"seq_len": 32, "vocab": 64}, {"seq_len": 64, "vocab": 128}],
    "fuzzy_icr": [{"seq_len": 16, "vocab": 8}, {"seq_len": 16, "vocab": 12}]
    + [{"seq_len": 32, "vocab": 16}, {"seq_len": 64, "vocab": 32}, {"seq_len": 128, "vocab": 64}],
    "noisy_icr": [{"seq_len": 16, "frac_noise": 0.2}, {"seq_len": 16, "frac_noise": 0.4}]
    + [{"seq_len": 32, "frac_noise": 0.6}, {"seq_len": 64, "frac_noise": 0.8}],
    "selective_copy": [{"seq_len": 16, "n_copy": 2}, {"seq_len": 16, "n_copy": 4}]
    + [{"seq_len": 32, "n_copy": 8}, {"seq_len": 64, "n_copy": 16}],
    "compression": [{"seq_len": 8}, {"seq_len": 12}, {"seq_len": 16}, {"seq_len": 32}],
    "memorization": [{"vocab": 32}, {"vocab": 64}, {"vocab": 128}, {"vocab": 256}],
    "mqar": [{"seq_len": 16, "num_kv_pairs": 2}, {"seq_len": 16, "num_kv_pairs": 4}]
    + [{"seq_len": 32, "num_kv_pairs": 8}, {"seq_len": 64, "num_kv_pairs": 16}]
    + [{"seq_len": 128, "num_kv_pairs": 32}],
}


def _train(steps: int, batch_size: int = 64) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=batch_size, lr=3e-3, eval_points=5)


@dataclass(frozen=True)
class MadConfig:
    blocks: tuple[str, ...] = field(
        default=(),
        metadata=meta(
            "sequence blocks as arms, e.g. 'softmax_attention(heads=2)'; none: every registered "
            "token-mixing block that takes causal=true and needs no other option",
            min_len=0,
        ),
    )
    tasks: tuple[str, ...] = field(default=TASKS, metadata=meta("registered token tasks"))
    levels: int = field(
        default=2, metadata=meta("rungs of each task's difficulty ladder, easiest first", ge=1)
    )
    budget: int = field(
        default=20000, metadata=meta("parameters of the layers (blocks and feed-forwards)", ge=1)
    )
    depth: int = field(default=2, metadata=meta("layers", ge=1))
    n_train: int = field(default=4096, metadata=meta("training sequences per task level", ge=1))
    seeds: int = field(default=3, metadata=meta("seeds per (block, task, level)", ge=1))
    alpha: float = field(default=0.05, metadata=meta("level of the tests", gt=0, lt=1))
    solved: float = field(
        default=0.9, metadata=meta("test accuracy that counts as solved", gt=0, le=1)
    )
    # the best rate runs from 1e-3 (attention on recall) to past 3e-2 (compression): the grid
    # spans the middle and extends twice past an edge
    lr_grid: tuple[float, ...] = _trials.lr_grid_field((3e-3, 1e-2, 3e-2), "(block, task)")
    lr_extend: int = _trials.lr_extend_field(2)
    plateau_tol: float = _trials.plateau_tol_field("validation loss (twice the steps, under wsd)")
    # 500 steps of 16: a step of 16 costs well under one of 64, and recall learned about as much
    # from it as from fewer steps of 32 at the same cost; 600 steps ran too near the quick
    # form's time target to count on (docs/results/token-suite.md)
    train: TrainConfig = field(default_factory=lambda: _train(500, batch_size=16))
    mode: str = field(
        default="suite",
        metadata=meta(
            "suite: every block on every task at the budget; width-sweep: MQAR accuracy against "
            "width per setting of pairs and sequence length (zoology's figure)",
            choices=MODES,
        ),
    )
    widths: tuple[int, ...] = field(
        default=(16, 32, 64), metadata=meta("model widths of the width sweep", ge=1)
    )
    sweep_pairs: tuple[int, ...] = field(
        default=(4, 8), metadata=meta("MQAR key-value pairs of the width sweep", ge=1)
    )
    sweep_seq_lens: tuple[int, ...] = field(
        default=(32,), metadata=meta("MQAR sequence lengths of the width sweep", ge=4)
    )

    def __post_init__(self):
        validate(self)
        for task in self.tasks:
            check_task(task)
        for text in self.blocks:
            causal_arm(text)

    def unused(self) -> dict[str, str]:
        out = _trials.lr_unused(self.lr_grid, self.lr_extend)
        if self.mode == "width-sweep":
            why = "the width sweep trains MQAR at its widths, not the suite at a budget"
            out |= {"tasks": why, "levels": why, "budget": why}
        else:
            why = "read by the width sweep only (--sweep-width)"
            out |= {"widths": why, "sweep_pairs": why, "sweep_seq_lens": why}
        return out

    @classmethod
    def sweep_width(cls) -> MadConfig:
        """Zoology's MQAR width sweep: accuracy against width 16-64 at 4 and 8 key-value pairs
        of 32 tokens, 2000 steps, the rate grid extended once; the gated convolutions, attention,
        linear attention and a polynomial mixer."""
        return cls(mode="width-sweep", lr_grid=(1e-3, 3e-3, 1e-2), lr_extend=1, train=_train(2000))

    @classmethod
    def full(cls) -> MadConfig:
        """Every rung of the ladders (sequences to 128 tokens), 5 seeds, 3000 steps of 64 and a
        budget of 1e5: hours on a CPU."""
        return cls(levels=5, seeds=5, budget=100000, n_train=16384, train=_train(3000))


def check_task(name: str) -> None:
    from blocklab.tasks import TASKS as REGISTRY

    cls = REGISTRY.get(name)
    if not (cls.sequence and cls.kind == "classification"):
        raise UserError(f"task {name!r} is not a sequence classification task")


def ladder(task: str, levels: int) -> list[dict[str, Any]]:
    """The task's first `levels` rungs (a task without a ladder: its defaults, one level)."""
    return LADDERS.get(task, [{}])[:levels]


def causal_arm(text: str):
    """The arm of a block written as an arm, made causal; a block that is not a token mixer or
    cannot be made causal is refused."""
    from blocklab.blocks import BLOCKS
    from blocklab.models import mixes_tokens, parse_arm

    arm = _arms.arm(text)  # an option the block does not take fails with the nearest name
    if not mixes_tokens(arm):
        raise UserError(f"{arm.label} does not mix positions: the suite compares sequence blocks")
    if not _builds_causal(BLOCKS.get(arm.block), arm.kwargs):
        raise UserError(f"{arm.block} takes no causal option: it would see the answers")
    if arm.kwargs.get("causal", True) is not True:
        raise UserError(f"{arm.label}: the suite runs every block causal")
    opts = [f"{k}={v}" for k, v in arm.kwargs.items() if k != "causal"] + ["causal=true"]
    return parse_arm(f"{arm.block}({','.join(opts)})")


def default_blocks() -> list[str]:
    """Every registered token mixer (plugins included) that takes `causal` and builds with no
    other option; a block that needs one (such as mixing_module's factory) must be named."""
    from blocklab.blocks import BLOCKS

    return [
        name
        for name in BLOCKS.names()
        if BLOCKS.get(name).mixes_tokens and _builds_causal(BLOCKS.get(name), {})
    ]


def _builds_causal(cls, kwargs: dict[str, Any]) -> bool:
    """Whether the block builds, causal, from these options alone (a small probe)."""
    extra = {"seq_len": 4} if cls.needs_seq_len else {}
    try:
        cls(4, 4, **{**kwargs, "causal": True}, **extra)
    except (TypeError, UserError):
        return False
    return True


# the width sweep's blocks by default, those registered: attention, linear attention, the gated
# convolutions and a polynomial mixer, the lines of zoology's figure
SWEEP_BLOCKS = ("softmax_attention", "linear_attention", "hyena", "h3", "quadratic_mixing")


def blocks(cfg: MadConfig) -> list[str]:
    if cfg.blocks:
        return list(cfg.blocks)
    if cfg.mode == "width-sweep":
        return [name for name in SWEEP_BLOCKS if name in default_blocks()]
    return default_blocks()


SHAPE = NetShape(depth=2, norm="layer", residual=True, ff="relu4x")


def nominal_degree(arm, seq_len: int) -> float | None:
    """The degree of the block as seed 000 counts it (`Block.nominal_degree`)."""
    from blocklab.models import checked_block, layer_blocks

    (name, kwargs), *_ = layer_blocks(arm, 1, False, seq_len)
    return checked_block(name, 4, **kwargs).nominal_degree


# the layers of every (block, task, level) come within this share of the budget; one step of
# width moves a 2-layer network of width ~30 by ~7%, so half a step must fit
BUDGET_TOL = 0.05


def _width(arm, depth: int, seq_len: int, budget: int) -> int:
    """The width at which `depth` layers of the arm cost nearest the budget (`budget.solve`)."""
    from blocklab.budget import solve

    shape = solve(arm, budget, mode="depth", depth=depth, ff=SHAPE.ff, seq_len=seq_len,
                  tol=BUDGET_TOL, hint="choose another --budget or --depth")  # fmt: skip
    return shape.width


def _seq_len(task: str, opts: dict[str, Any]) -> int:
    from blocklab.tasks import make_task

    return make_task(task, **opts).seq_len


def plan(cfg: MadConfig) -> dict[tuple[str, str, int], tuple[Any, Any, dict[str, Any]]]:
    """(block, task, level) -> (arm, shape, task options), the block as the user wrote it: each
    arm, made causal, at the width whose layers come nearest the budget at that level's sequence
    length."""
    out = {}
    for text in blocks(cfg):
        arm = causal_arm(text)
        for task in cfg.tasks:
            for level, rung in enumerate(ladder(task, cfg.levels)):
                opts = {**rung, "n_train": cfg.n_train}
                seq_len = _seq_len(task, opts)
                width = _width(arm, cfg.depth, seq_len, cfg.budget)
                shape = replace(SHAPE, depth=cfg.depth, width=width)
                out[(text, task, level)] = (arm, shape, opts)
    return out


def _spec(cfg: MadConfig, key, arm, shape, opts, lr: float, seed: int):
    return _trials.spec(key[1], opts, arm, shape, replace(cfg.train, lr=lr), seed)


@dataclass
class MadTrials(Trials):
    # "block/task" -> the chosen rate, the rates tried with their validation accuracy, and
    # whether the choice lies at an edge of what was tried
    lr_choice: dict[str, dict[str, Any]]
    # block -> its nominal degree (None: no degree); the rows hold the width per (task, level)
    degrees: dict[str, float | None]


def searched(cfg: MadConfig):
    """What a run searches and fits (`_trials.run_searched`), in either mode: the suite's search
    trial per (block, task) at a rate (its first level, seed 0) and its finals, every level and
    seed at the chosen rate; or the width sweep's (`width_sweep.searched`)."""
    if cfg.mode == "width-sweep":
        return width_sweep.searched(cfg, blocks(cfg), causal_arm, SHAPE)
    shapes = plan(cfg)
    firsts = {key: shapes[key] for key in shapes if key[2] == 0}
    at = {key[:2]: functools.partial(_spec, cfg, key, *firsts[key], seed=0) for key in firsts}

    def finals(rates):  # every level of a (block, task) trains at the rate of its first
        return [
            (
                {"block": key[0], "level": key[2], "options": shapes[key][2]},
                _spec(cfg, key, *shapes[key], rates[key[:2]], seed),
            )
            for key in shapes
            for seed in range(cfg.seeds)
        ]

    return at, finals


def run(cfg: MadConfig, store: Store, *, resources=None, progress=True) -> MadTrials:
    at, finals = searched(cfg)
    trials, lr_choice = _trials.run_searched(
        cfg, at, finals, store, EXPERIMENT, resources=resources, progress=progress, higher=True
    )
    if cfg.mode == "width-sweep":
        degrees = {text: nominal_degree(causal_arm(text), 8) for text in blocks(cfg)}
        return MadTrials(trials.rows, trials.failed, lr_choice, degrees)
    degrees = {}
    for (label, task, _), (arm, _, opts) in plan(cfg).items():
        if label not in degrees:  # a block's degree is the same at every task and level
            degrees[label] = nominal_degree(arm, _seq_len(task, opts))
    return MadTrials(trials.rows, trials.failed, lr_choice, degrees)


def price(cfg: MadConfig, out_dir) -> Any:
    """--plan, in either mode: the search's trials and the finals (`searched`) as far as the
    store in `out_dir` decides the search, priced (`_pricing.price_searched`)."""
    at, finals = searched(cfg)
    return _pricing.price_searched(cfg, at, finals, out_dir, ("mad",), extra={"seeds": cfg.seeds})


@EXPERIMENTS.register
class Mad(Experiment):
    Config = MadConfig
    run = staticmethod(run)
    price = staticmethod(price)
    forms = {"full": None, "sweep_width": None}
    commands = (
        Command(
            "mad",
            "every sequence block on the MAD and MQAR token tasks at one parameter budget",
            "runs/mad",
        ),
    )

"""Seed 003: rank collapse through depth, after Dong et al. 2021, "Attention is not all you need:
pure attention loses rank doubly exponentially with depth".

A stack of token-mixing layers (softmax attention by default) in several variants, one switch at
a time: "pure" (the block alone), "skip" (a residual connection), "mlp" (a ReLU 4x feed-forward
sublayer), "norm" (pre-layer normalization), and "+" combinations. For every (variant, seed) one
trial is trained on a sequence task, and the `collapse` measure reads the per-layer ratio
||res(X_l)|| / ||res(X_0)|| (seed 003 Definition 2.1; the median over the task's test sequences)
at initialization and after training.

Predictions (Dong et al.; seed 003): pure attention's ratio falls with depth, doubly exponentially
(Theorem 2.2 bounds it by (4 beta res0^2 / sqrt(d_qk))^((3^L - 1)/2)); skip connections keep it up,
since a depth-L network with skips is a sum over (H+1)^L paths that include the short ones
(Theorem 2.1 with skips as dummy heads); an MLP slows the collapse; layer norm does not stop it.
The statistics and tests of the measured curves are the home's `analysis`, which its `report`
applies to the rows this run returns.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from typing import Any

from blocklab import theory
from blocklab.experiments import EXPERIMENTS, Command, Experiment, Trials, _pricing, _trials
from blocklab.options import meta, validate
from blocklab.specs import NetShape, TrainConfig
from blocklab.store import Store

# the switch each variant part turns on; "pure" turns on nothing
PARTS = {"skip": {"residual": True}, "mlp": {"ff": "relu4x"}, "norm": {"norm": "layer"}}
PURE = NetShape(norm="none", residual=False, ff="none")


def _train(steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=64, lr=1e-2, eval_points=5)


def variant_shape(variant: str, depth: int = 1, width: int = 32) -> NetShape:
    """'pure' | 'skip' | 'mlp' | 'norm' | 'skip+mlp+norm' ... -> the network's switches."""
    parts = [p.strip() for p in variant.split("+")]
    if parts == ["pure"]:
        return replace(PURE, depth=depth, width=width)
    if "pure" in parts:
        raise ValueError(f"variant {variant!r}: 'pure' means no switch and stands alone")
    for p in parts:
        if p not in PARTS:
            close = difflib.get_close_matches(p, [*PARTS, "pure"], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"unknown variant part {p!r} in {variant!r}{hint} (known: pure, or "
                f"{', '.join(PARTS)} joined by '+')"
            )
    if len(set(parts)) != len(parts):
        raise ValueError(f"variant {variant!r} repeats a part")
    switches = {k: v for p in parts for k, v in PARTS[p].items()}
    return replace(PURE, depth=depth, width=width, **switches)


@dataclass(frozen=True)
class CollapseConfig:
    block: str = field(
        default="softmax_attention", metadata=meta("token-mixing block of every layer")
    )
    depth: int = field(default=6, metadata=meta("layers L", ge=1))
    width: int = field(default=32, metadata=meta("model width D", ge=1))
    heads: int = field(default=1, metadata=meta("attention heads H per layer", ge=1))
    seq_len: int = field(default=16, metadata=meta("sequence length T of the task", ge=1))
    variants: tuple[str, ...] = field(
        default=("pure", "skip", "mlp", "norm", "skip+mlp+norm"),
        metadata=meta("pure, or skip / mlp / norm joined by '+'"),
    )
    task: str = field(
        default="qsa", metadata=meta("sequence task: gives the inputs and the training signal")
    )
    n_train: int = field(default=4096, metadata=meta("training examples of the task", ge=1))
    seeds: int = field(
        default=3, metadata=meta("seeds per variant (same seeds in every variant)", ge=1)
    )
    alpha: float = field(
        default=0.05, metadata=meta("level of the tests (Holm-corrected)", gt=0, lt=1)
    )
    train: TrainConfig = field(default_factory=lambda: _train(300))

    def __post_init__(self):
        from blocklab.blocks import BLOCKS
        from blocklab.models import parse_arm
        from blocklab.tasks import TASKS, make_task

        validate(self)
        if not BLOCKS.get(self.block).mixes_tokens:  # unknown names fail with "did you mean"
            mixing = [n for n in BLOCKS.names() if BLOCKS.get(n).mixes_tokens]
            raise ValueError(
                f"block {self.block!r} acts on each token alone, so its tokens cannot collapse; "
                f"give a token-mixing block ({', '.join(mixing)})"
            )
        parse_arm(self.arm)  # options the block does not take fail here
        shapes = [variant_shape(v) for v in self.variants]
        if len(set(shapes)) != len(shapes):
            raise ValueError(f"two variants are the same network: {self.variants}")
        if not TASKS.get(self.task).sequence:
            raise ValueError(f"task {self.task!r} is not a sequence task: there are no tokens")
        make_task(self.task, **self.task_options)  # the task checks seq_len itself

    @property
    def arm(self) -> str:
        return self.block if self.heads == 1 else f"{self.block}(heads={self.heads})"

    @property
    def task_options(self) -> dict[str, Any]:
        return {"seq_len": self.seq_len, "n_train": self.n_train}

    @classmethod
    def full(cls) -> CollapseConfig:
        return cls(depth=12, seeds=5, n_train=16384, train=_train(2000))


def plan(cfg: CollapseConfig) -> list[tuple[dict[str, Any], Any]]:
    """One trial per (variant, seed), each measured at init and after training. A seed gives
    every variant the same embedding and blocks at init (the extra sublayers are drawn after
    them), so the pairing across variants isolates the switch."""
    from blocklab.models import parse_arm

    arm = parse_arm(cfg.arm)
    return [
        (
            {"variant": v},
            _trials.spec(
                cfg.task,
                cfg.task_options,
                arm,
                variant_shape(v, cfg.depth, cfg.width),
                cfg.train,
                seed,
                measures=("collapse",),
            ),
        )
        for v in cfg.variants
        for seed in range(cfg.seeds)
    ]


@dataclass
class CollapseTrials(Trials):
    # rows: one per finished trial, with its measures at init and after training
    paths: dict[str, Any]  # seed 003 Theorem 2.1: path shares by length


def run(cfg: CollapseConfig, store: Store, *, resources=None, progress=True) -> CollapseTrials:
    trials = _trials.run_planned(
        plan(cfg), store, "collapse", resources=resources, progress=progress
    )
    return CollapseTrials(trials.rows, trials.failed, path_shares(cfg))


def price(cfg: CollapseConfig, out_dir) -> Any:
    """--plan: the trials `plan` gives, met with the store in `out_dir` and priced
    (`_pricing.price_planned`)."""
    specs = [s for _, s in plan(cfg)]
    return _pricing.price_planned(specs, cfg, out_dir, ("collapse",), extra={"seeds": cfg.seeds})


def path_shares(cfg: CollapseConfig) -> dict[str, Any]:
    """Seed 003 Theorem 2.1 with the skip as a dummy head: of the (H+1)^L paths, the share that
    passes through k attention layers is C(L, k) H^k / (H+1)^L."""
    shares = theory.path_shares(cfg.depth, cfg.heads)
    mean = sum(k * s for k, s in enumerate(shares))
    return {"depth": cfg.depth, "heads": cfg.heads, "shares": shares, "mean_length": mean}


@EXPERIMENTS.register
class Collapse(Experiment):
    Config = CollapseConfig
    run = staticmethod(run)
    price = staticmethod(price)
    forms = {"full": None}
    commands = (
        Command(
            "collapse",
            "seed 003: rank collapse through depth (Dong et al.)",
            "runs/collapse",
        ),
    )

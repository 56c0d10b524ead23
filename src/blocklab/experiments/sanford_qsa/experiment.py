"""Seed 002's qSA separation (Sanford, Hsu, Telgarsky 2023), trained and measured.

One softmax attention layer of embedding dimension m (the query, key and value dimension) on
q-sparse averaging, for several q, beside a fully connected network of equal parameters that
sees the whole flattened sequence. The seed predicts success iff m is about q or more
(m >= q / log N is necessary; m = O(d + q log N) suffices), and failure of the fully connected
network below width ~ N d.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from blocklab.experiments import EXPERIMENTS, Command, Experiment, Trials, _pricing, _trials
from blocklab.options import meta, validate
from blocklab.specs import NetShape, TrainConfig
from blocklab.store import Store


def _train(steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=64, lr=3e-3, eval_points=20)


@dataclass(frozen=True)
class QsaConfig:
    qs: tuple[int, ...] = field(default=(1, 2, 4), metadata=meta("sparsities q to test", ge=1))
    dims: tuple[int, ...] = field(
        default=(2, 4, 8, 16), metadata=meta("embedding dimensions m of the attention layer", ge=1)
    )
    seq_len: int = field(default=16, metadata=meta("sequence length N", ge=2))
    dim: int = field(default=2, metadata=meta("dimension d of the averaged vectors z", ge=1))
    width: int = field(default=64, metadata=meta("model width around the attention layer", ge=1))
    n_train: int = field(default=16384, metadata=meta("training examples", ge=1))
    mlp: bool = field(default=True, metadata=meta("train the equal-parameter fully connected net"))
    seeds: int = field(default=3, metadata=meta("seeds per configuration", ge=1))
    solved: float = field(
        default=0.9, metadata=meta("test accuracy that counts as success", gt=0, le=1)
    )
    train: TrainConfig = field(default_factory=lambda: _train(2000))

    def __post_init__(self):
        validate(self)
        if any(q >= self.seq_len for q in self.qs):
            raise ValueError(f"every q must be in 1..seq_len-1 = {self.seq_len - 1}, got {self.qs}")

    @classmethod
    def full(cls) -> QsaConfig:
        return cls(
            qs=(1, 2, 4, 8),
            dims=(1, 2, 4, 8, 16, 32),
            seq_len=32,
            seeds=5,
            n_train=65536,
            train=_train(6000),
        )


ATTENTION_SHAPE = NetShape(depth=1, norm="none", residual=True)
FLAT_SHAPE = NetShape(depth=1, norm="none", residual=False, activation="relu", flatten=True)


def plan(cfg: QsaConfig) -> list[tuple[dict[str, Any], Any]]:
    """(keys, spec) for every trial; the fully connected width matches the attention net's total."""
    from blocklab.models import parse_arm

    out = []
    shape = replace(ATTENTION_SHAPE, width=cfg.width)
    for q in cfg.qs:
        opts = {"seq_len": cfg.seq_len, "q": q, "dim": cfg.dim, "n_train": cfg.n_train}
        for m in cfg.dims:
            arm = parse_arm(f"softmax_attention(head_dim={m})")
            arms = [("attention", arm, shape)]
            if cfg.mlp:
                target = _trials.total_params("qsa", opts, arm, shape)
                mlp = parse_arm("mlp")
                width = _trials.width_for_params("qsa", opts, mlp, FLAT_SHAPE, target)
                arms.append(("fully connected", mlp, replace(FLAT_SHAPE, width=width)))
            for model, a, s in arms:
                for seed in range(cfg.seeds):
                    spec = _trials.spec("qsa", opts, a, s, cfg.train, seed)
                    out.append(({"q": q, "m": m, "model": model}, spec))
    return out


def run(cfg: QsaConfig, store: Store, *, resources=None, progress=True) -> Trials:
    return _trials.run_planned(
        plan(cfg), store, "sanford-qsa", resources=resources, progress=progress
    )


def price(cfg: QsaConfig, out_dir) -> Any:
    """--plan: the trials `plan` gives, met with the store in `out_dir` and priced
    (`_pricing.price_planned`)."""
    specs = [s for _, s in plan(cfg)]
    return _pricing.price_planned(specs, cfg, out_dir, ("sanford qsa",), extra={"seeds": cfg.seeds})


@EXPERIMENTS.register
class SanfordQsa(Experiment):
    Config = QsaConfig
    run = staticmethod(run)
    price = staticmethod(price)
    forms = {"full": None}
    commands = (
        Command(
            "sanford qsa",
            "one attention layer vs embedding dimension, several q",
            "runs/sanford-qsa",
        ),
    )

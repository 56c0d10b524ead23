"""Seed 002's Match2 / Match3 separation (Sanford, Hsu, Telgarsky 2023), trained and measured.

One layer of standard vs third-order (tensor) attention on Match2 and Match3 at equal
parameters. Both networks have the same width, embedding, feed-forward and readout; the tensor
block's attention dimension is 2/3 of the width so that its five projections cost what the
standard block's three and an output map cost (6 W a = 4 W^2). The seed predicts: standard
attention solves Match2 with O(1) dimension but needs m H = Omega(N / log N) for Match3; tensor
attention solves Match3.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from blocklab.errors import UserError
from blocklab.experiments import EXPERIMENTS, Command, Experiment, Trials, _trials
from blocklab.options import meta, validate
from blocklab.specs import TrainConfig
from blocklab.store import Store


def _train(steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=64, lr=3e-3, eval_points=20)


@dataclass(frozen=True)
class MatchConfig:
    tasks: tuple[str, ...] = field(
        default=("match2", "match3"), metadata=meta("match2, match3", choices=("match2", "match3"))
    )
    seq_len: int = field(
        default=6, metadata=meta("sequence length N (modulus M chosen to balance)", ge=1)
    )
    widths: tuple[int, ...] = field(
        default=(6, 12), metadata=meta("model widths, multiples of 3 (equal parameters)", ge=3)
    )
    n_train: int = field(default=16384, metadata=meta("training examples", ge=1))
    seeds: int = field(default=3, metadata=meta("seeds per configuration", ge=1))
    solved: float = field(
        default=0.95, metadata=meta("test accuracy that counts as solved", gt=0, le=1)
    )
    alpha: float = field(default=0.05, metadata=meta("level of the paired tests", gt=0, lt=1))
    train: TrainConfig = field(default_factory=lambda: _train(2000))

    def __post_init__(self):
        from blocklab.tasks import make_task

        validate(self)
        if any(w % 3 for w in self.widths):
            raise ValueError(f"widths must be multiples of 3, got {self.widths}")
        for task in self.tasks:  # the task checks the sequence length it can balance
            make_task(task, seq_len=self.seq_len, n_train=self.n_train)

    @classmethod
    def full(cls) -> MatchConfig:
        return cls(widths=(6, 12, 24, 48), seq_len=8, seeds=5, n_train=65536, train=_train(6000))


MATCH_SHAPE = _trials.NetShape(depth=1, norm="layer", residual=True, ff="relu4x")


def match_arms(width: int):
    """Standard and tensor attention of equal cost at one width (see the module docstring)."""
    from blocklab.models import parse_arm

    return [
        ("standard", parse_arm(f"softmax_attention(head_dim={width})")),
        ("tensor", parse_arm(f"tensor_attention(head_dim={2 * width // 3})")),
    ]


def plan(cfg: MatchConfig) -> list[tuple[dict[str, Any], Any]]:
    out = []
    for task in cfg.tasks:
        opts = {"seq_len": cfg.seq_len, "n_train": cfg.n_train}
        for width in cfg.widths:
            shape = replace(MATCH_SHAPE, width=width)
            counts = {
                model: _trials.total_params(task, opts, arm, shape)
                for model, arm in match_arms(width)
            }
            if len(set(counts.values())) != 1:
                raise UserError(f"arms differ in size at width {width}: {counts}")
            for model, arm in match_arms(width):
                for seed in range(cfg.seeds):
                    spec = _trials.spec(task, opts, arm, shape, cfg.train, seed)
                    out.append(({"width": width, "model": model}, spec))
    return out


def run(cfg: MatchConfig, store: Store, *, resources=None, progress=True) -> Trials:
    return _trials.run_planned(
        plan(cfg), store, "sanford-match", resources=resources, progress=progress
    )


@EXPERIMENTS.register
class SanfordMatch(Experiment):
    Config = MatchConfig
    run = staticmethod(run)
    report = "blocklab.reports.sanford_match"
    commands = (
        Command(
            "sanford match",
            "standard vs tensor attention on Match2 and Match3",
            "runs/sanford-match",
        ),
    )

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
from blocklab.specs import TrainConfig
from blocklab.store import Store


def _help(text: str) -> dict[str, str]:
    return {"help": text}


def _train(steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=64, lr=3e-3, eval_points=20)


@dataclass(frozen=True)
class MatchConfig:
    tasks: tuple[str, ...] = field(default=("match2", "match3"), metadata=_help("match2, match3"))
    seq_len: int = field(
        default=6, metadata=_help("sequence length N (modulus M chosen to balance)")
    )
    widths: tuple[int, ...] = field(
        default=(6, 12), metadata=_help("model widths, multiples of 3 (equal parameters)")
    )
    n_train: int = field(default=16384, metadata=_help("training examples"))
    seeds: int = field(default=3, metadata=_help("seeds per configuration"))
    solved: float = field(default=0.95, metadata=_help("test accuracy that counts as solved"))
    alpha: float = field(default=0.05, metadata=_help("level of the paired tests"))
    train: TrainConfig = field(default_factory=lambda: _train(2000))

    def __post_init__(self):
        _trials.check_positive(self, ("seeds", "seq_len", "n_train"))
        if not self.tasks or any(t not in ("match2", "match3") for t in self.tasks):
            raise ValueError(f"tasks must be among match2, match3, got {self.tasks}")
        if not self.widths or any(w < 3 or w % 3 for w in self.widths):
            raise ValueError(f"widths must be positive multiples of 3, got {self.widths}")
        if not 0 < self.alpha < 1 or not 0 < self.solved <= 1:
            raise ValueError("alpha must be in (0, 1) and solved in (0, 1]")

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

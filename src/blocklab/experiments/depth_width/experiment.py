"""Seed 001's depth-to-width experiment (Levine et al. 2020, section 5 and appendix D).

The common transformer (eq. 1-2: causal softmax attention with 2 heads, layer norm, residual,
feed-forward relu4x; 12 L dx^2 parameters per network besides the embedding) trains as a language
model on the `text` task at every depth of a grid and at a series of non-embedding budgets
N = 12 L dx^2, dx rounded to a multiple of the heads. Repeats (seeds) give each point's test-loss
std, as appendix D's repeats do. Between adjacent depths the transition width is found as in
section 5.2.2 and the transitions are fitted to log dx = a + b L: the report does both from the
rows this run returns (the home's `report`, with `blocklab.analysis.depth_width`).

The seed's prediction: below a width the deeper network is no better for its size (or worse),
above it the deeper network wins, and that transition width grows exponentially with depth
(b > 0). The quick form is a miniature built to find one transition, L = 1 to L = 2, at p < 0.01
on a 2-core machine (its measured time is the timings file's, in `--help`): 4 seeds at budgets 1e5
and 4e5 after 2000 steps.
At 1e5 the shallower net is clearly better; at 4e5 the deeper one is ahead by about 0.09 nats
with a seed std of at most 0.017, which 4 seeds detect at level 0.01 with power 0.9993
(`planned_effect`, `planned_sd`; the calculation is `blocklab.analysis.power`, reported with
every run). 2e5, where the gap is about 2 seed stds, narrows the transition's bracket and costs
a third more time. `medium()` adds depths 3 and 4 and the budgets 3e4 and 2e5, for transitions
of more pairs and a fit of its own.
At this scale a and b are not the paper's: the test is whether transitions exist and the sign of b.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from blocklab.experiments import EXPERIMENTS, Command, Experiment, Trials, _pricing, _trials
from blocklab.options import meta, validate
from blocklab.specs import NetShape, TrainConfig, TrialSpec
from blocklab.store import Store

# a run's transition fit, beside its report, for `blocklab advise --fit`
FIT_FILE = "fit.json"


def _train(steps: int, batch_size: int = 32, lr: float = 6e-3) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=batch_size, lr=lr, eval_points=8)


@dataclass(frozen=True)
class DepthWidthConfig:
    depths: tuple[int, ...] = field(
        default=(1, 2), metadata=meta("network depths L", ge=1, min_len=2)
    )
    budgets: tuple[int, ...] = field(
        default=(100000, 400000),
        metadata=meta("non-embedding parameter budgets N = 12 L dx^2", ge=1),
    )
    heads: int = field(default=2, metadata=meta("attention heads per layer (the paper's 2)", ge=1))
    seeds: int = field(default=4, metadata=meta("repeats per point, for the loss std", ge=1))
    alpha: float = field(
        default=0.01, metadata=meta("level of the 'shallower is worse' test", gt=0, lt=1)
    )
    # the design's weakest planned comparison, two adjacent depths at the largest budget: the
    # quick form's L = 1 minus L = 2 at 4e5 measured 0.0895 nats, seed stds 0.0065 and 0.0167
    planned_effect: float = field(
        default=0.09,
        metadata=meta("loss difference the design must detect (power calculation)", gt=0),
    )
    planned_sd: float = field(
        default=0.017, metadata=meta("seed std of a point's loss (power calculation)", gt=0)
    )
    vocab: int = field(default=512, metadata=meta("BPE vocabulary size (the paper's 2000)", ge=257))
    seq_len: int = field(default=64, metadata=meta("tokens per training sequence", ge=1))
    path: str = field(default="", metadata=meta("a text file to model ('' = the stdlib corpus)"))
    max_chars: int = field(default=0, metadata=meta("corpus characters to use (0 = all)", ge=0))
    n_train: int = field(default=16384, metadata=meta("training sequences drawn per seed", ge=1))
    train: TrainConfig = field(default_factory=lambda: _train(2000))

    def __post_init__(self):
        from blocklab.tasks import make_task

        validate(self)
        if len(set(self.depths)) < 2:
            raise ValueError(f"give at least two distinct depths, got {self.depths}")
        make_task("text", **self.task_options())  # the text task checks the rest (the path)

    @classmethod
    def medium(cls) -> DepthWidthConfig:
        """Depths 1-4 at budgets 3e4-4e5 and 2000 steps, so that transitions of more than one pair
        of depths (and then a fit) can fall inside the range."""
        return cls(depths=(1, 2, 3, 4), budgets=(30000, 100000, 200000, 400000))

    @classmethod
    def full(cls) -> DepthWidthConfig:
        """Depths 2-8 at budgets 1e4-3e6 with the paper's vocabulary and 8000 steps: days on 2 CPU
        cores (a trial at N = 3e6 takes hours), hours on a GPU (`--device cuda`)."""
        return cls(
            depths=(2, 4, 6, 8),
            budgets=(10000, 30000, 100000, 300000, 1000000, 3000000),
            vocab=2000,
            seq_len=64,
            n_train=65536,
            train=_train(8000, 64, 3e-3),
        )

    def task_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"vocab": self.vocab, "seq_len": self.seq_len}
        opts["n_train"] = self.n_train
        if self.path:
            opts["path"] = self.path
        if self.max_chars:
            opts["max_chars"] = self.max_chars
        return opts


def width_for(budget: float, depth: int, heads: int) -> int:
    """dx = sqrt(N / (12 L)) to the nearest multiple of the heads (at least one per head)."""
    return max(heads, heads * round(math.sqrt(budget / (12 * depth)) / heads))


def shape(depth: int, width: int) -> NetShape:
    """Seed 001's common transformer layer: pre-norm, residual, a ReLU feed-forward of 4 dx."""
    return NetShape(depth=depth, width=width, norm="layer", residual=True, ff="relu4x")


def plan(cfg: DepthWidthConfig) -> list[tuple[dict[str, Any], TrialSpec]]:
    """(keys, spec) per depth, width and seed, the largest first; budgets that round to one
    width run once."""
    from blocklab.models import parse_arm

    arm = parse_arm(f"softmax_attention(heads={cfg.heads},causal=true)")
    opts = cfg.task_options()
    out = []
    for depth in sorted(set(cfg.depths)):
        widths: dict[int, int] = {}  # width -> the first (smallest) budget that asks for it
        for n in sorted(cfg.budgets):
            widths.setdefault(width_for(n, depth, cfg.heads), n)
        for width, nominal in widths.items():
            for seed in range(cfg.seeds):
                s = _trials.spec("text", opts, arm, shape(depth, width), cfg.train, seed)
                out.append(({"budget": 12 * depth * width * width, "nominal": nominal}, s))
    # the largest first, so that two workers finish together instead of one waiting on a late
    # large trial (the units, and so the numbers, do not depend on the order)
    return sorted(out, key=lambda keyed: -keyed[1].budget)


@dataclass
class DepthWidthTrials(Trials):
    corpus: dict[str, Any]  # the text task's facts (files, tokens, vocabulary)


def run(cfg: DepthWidthConfig, store: Store, *, resources=None, progress=True) -> DepthWidthTrials:
    from blocklab.fitting import network

    opts = cfg.task_options()
    # the tokenizer is trained (and cached) here once, not by every worker at the same time
    corpus = network.task_data("text", opts, 0).info
    trials = _trials.run_planned(
        plan(cfg), store, "depth-width", resources=resources, progress=progress
    )
    return DepthWidthTrials(trials.rows, trials.failed, corpus)


def price(cfg: DepthWidthConfig, out_dir) -> Any:
    """--plan: the trials `plan` gives, met with the store in `out_dir` and priced
    (`_pricing.price_planned`); the text task's tokenizer, trained once and cached, is not in it."""
    specs = [s for _, s in plan(cfg)]
    return _pricing.price_planned(specs, cfg, out_dir, ("depth-width",), extra={"seeds": cfg.seeds})


@EXPERIMENTS.register
class DepthWidth(Experiment):
    Config = DepthWidthConfig
    run = staticmethod(run)
    price = staticmethod(price)
    forms = {
        "medium": "estimated, not measured: about 270 core-minutes on a CPU (4 seeds), minutes "
        "on a GPU (`--device cuda`)",
        "full": None,
    }
    commands = (
        Command(
            "depth-width",
            "seed 001: transformer LMs over depths and budgets, transitions and their fit",
            "runs/depth-width",
        ),
    )

"""Seed 004: softmax attention separates a needle that linear attention averages away.

Random weights (the seed's Section 7 experiments): the attention scores are aimed at the
dataset's direction w (the seed defines its datasets relative to the attention parameter), so
token t gets the score s_t = <w, x_t>; the randomness is over the layers after it, a ReLU layer
and a readout with Rademacher entries (the seed's Definition 3.7):

    f(X) = a^T ReLU(W sum_t alpha_t x_t) / sqrt(m)

with attention weights alpha from one of three kernels of z = beta s:
- softmax: exp(z), normalized;
- linear: elu(z) + 1, normalized (Katharopoulos et al.; the `linear_attention` block);
- linearized: z / T, the seed's "lin" (exp replaced by the identity; the `linearized_attention`
  block, seed 001 eq. 3).
A draw separates D0 from D1 when one threshold on f classifies at least `accuracy` of a fresh,
balanced evaluation set. Prediction: exp keeps the needle's weight near one while
tau1 - tau0 exceeds about log(T) / beta; the identity gives it weight tau1 / T, averaged away
as T grows. elu + 1 is linear for positive scores but exponential for negative ones, so it sits
between the two: the measurement says where.

Trained: one layer of each block (no feed-forward, no residual: the attention is the network's
only nonlinearity), mean-pooled, trained on the `needle` task.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from blocklab.experiments import EXPERIMENTS, Command, Experiment, Trials, _pricing, _trials
from blocklab.options import meta, validate
from blocklab.specs import NetShape, TrainConfig
from blocklab.store import Store

if TYPE_CHECKING:
    import torch


def kernels() -> dict[str, Any]:
    """The attention weights of each kernel from the aimed scores z = beta s: (n, T) -> (n, T)."""
    import torch
    import torch.nn.functional as F

    def normalized(kernel):
        def weights(z: torch.Tensor) -> torch.Tensor:
            k = kernel(z)  # (n, T)
            return k / k.sum(-1, keepdim=True)

        return weights

    return {
        "softmax": normalized(torch.exp),
        "linear": normalized(lambda z: F.elu(z) + 1),
        "linearized": lambda z: z / z.shape[-1],
    }


# the registered block that each kernel's trained network uses
BLOCKS = {
    "softmax": "softmax_attention",
    "linear": "linear_attention",
    "linearized": "linearized_attention",
}


@dataclass(frozen=True)
class NeedleConfig:
    seq_lens: tuple[int, ...] = field(
        default=(4, 16, 64, 256), metadata=meta("sequence lengths T (random weights)", ge=1)
    )
    tau1s: tuple[float, ...] = field(
        default=(2.0, 3.0, 4.0), metadata=meta("needle scores tau1 (random weights)", gt=0)
    )
    tau0: float = field(default=1.0, metadata=meta("largest background score tau0", ge=0))
    dim: int = field(default=8, metadata=meta("token dimension D", ge=1))
    sigma: float = field(
        default=0.25, metadata=meta("scale of the token components orthogonal to w", ge=0)
    )
    beta: float = field(default=1.0, metadata=meta("inverse temperature of the aimed scores", gt=0))
    hidden: int = field(default=16, metadata=meta("ReLU units m of the random networks", ge=1))
    draws: int = field(default=100, metadata=meta("random networks per setting", ge=1))
    samples: int = field(
        default=100, metadata=meta("evaluation sequences per class per draw", ge=1)
    )
    accuracy: float = field(
        default=0.9,
        metadata=meta("threshold accuracy at which a draw separates D0 from D1", gt=0.5, le=1),
    )
    trained_seq_lens: tuple[int, ...] = field(
        default=(16, 128),
        metadata=meta(
            "sequence lengths of the trained comparison (none: no training)", ge=1, min_len=0
        ),
    )
    width: int = field(default=16, metadata=meta("width of the trained networks", ge=1))
    seeds: int = field(default=3, metadata=meta("seeds of the trained comparison", ge=1))
    alpha: float = field(default=0.05, metadata=meta("level of the tests", gt=0, lt=1))
    seed: int = field(default=0, metadata=meta("seed of the random-weight draws", ge=0))
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(steps=1000, batch_size=64, lr=1e-2, eval_points=10)
    )

    def __post_init__(self):
        validate(self)
        if any(t1 <= self.tau0 for t1 in self.tau1s):
            raise ValueError(f"every tau1 must exceed tau0 = {self.tau0}, got {self.tau1s}")

    @classmethod
    def full(cls) -> NeedleConfig:
        return cls(
            seq_lens=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
            tau1s=(1.5, 2.0, 3.0, 4.0, 6.0),
            trained_seq_lens=(8, 16, 32, 64, 128, 256),
            seeds=5,
            train=TrainConfig(steps=4000, batch_size=64, lr=1e-2, eval_points=20),
        )


def task_options(cfg: NeedleConfig, seq_len: int, tau1: float) -> dict[str, Any]:
    return {"seq_len": seq_len, "dim": cfg.dim, "tau0": cfg.tau0, "tau1": tau1, "sigma": cfg.sigma}


# --- random weights ----------------------------------------------------------------------------


def best_threshold_accuracy(f: torch.Tensor, y: torch.Tensor) -> float:
    """The accuracy of the best single threshold on f, in either orientation."""
    import torch

    order = torch.argsort(f)
    f, y = f[order], y[order].double()
    n, pos = len(y), y.sum()
    # predict 1 above the cut: correct = negatives below + positives above
    below_neg = torch.cat([torch.zeros(1, dtype=y.dtype), torch.cumsum(1 - y, 0)])
    below_pos = torch.cat([torch.zeros(1, dtype=y.dtype), torch.cumsum(y, 0)])
    up = below_neg + (pos - below_pos)  # (n + 1,): cut before position 0..n
    # a threshold cannot split equal values: cut only at the ends or between distinct ones
    cuttable = torch.cat([torch.tensor([True]), f[1:] > f[:-1], torch.tensor([True])])
    up = up[cuttable]
    return float(torch.maximum(up, n - up).max() / n)


def random_setting(cfg: NeedleConfig, seq_len: int, tau1: float) -> dict[str, Any]:
    """Successes of `draws` random networks per kernel, each on its own fresh evaluation set."""
    import torch
    import torch.nn.functional as F

    from blocklab.tasks import make_task

    weight_of = kernels()
    task = make_task("needle", **task_options(cfg, seq_len, tau1))
    key = json.dumps([cfg.seed, seq_len, tau1], sort_keys=True).encode()
    g = torch.Generator().manual_seed(int(hashlib.sha256(key).hexdigest()[:12], 16))
    w = task.direction(cfg.seed)  # (D,)
    successes = {k: 0 for k in weight_of}
    for _ in range(cfg.draws):
        x, y = task.sample(2 * cfg.samples, w, g)  # (2n, T, D), (2n,): n per class
        x = x.double()
        W = torch.randint(0, 2, (cfg.hidden, cfg.dim), generator=g).double() * 2 - 1  # (m, D)
        a = torch.randint(0, 2, (cfg.hidden,), generator=g).double() * 2 - 1  # (m,)
        s = x @ w  # (2n, T)
        for name, kernel in weight_of.items():
            weights = kernel(cfg.beta * s)  # (2n, T)
            pooled = torch.einsum("nt,ntd->nd", weights, x)  # (2n, D)
            f = F.relu(pooled @ W.T) @ a / math.sqrt(cfg.hidden)  # (2n,)
            successes[name] += best_threshold_accuracy(f, y) >= cfg.accuracy
    return successes


# --- trained -----------------------------------------------------------------------------------

TRAINED_SHAPE = NetShape(depth=1, norm="none", residual=False)


def plan_trained(cfg: NeedleConfig):
    from blocklab.models import parse_arm

    tau1 = sorted(cfg.tau1s)[len(cfg.tau1s) // 2]
    out = []
    for seq_len in cfg.trained_seq_lens:
        opts = task_options(cfg, seq_len, tau1)
        for kernel, arm in BLOCKS.items():
            shape = replace(TRAINED_SHAPE, width=cfg.width)
            for seed in range(cfg.seeds):
                spec = _trials.spec("needle", opts, parse_arm(arm), shape, cfg.train, seed)
                out.append(({"seq_len": seq_len, "tau1": tau1, "model": kernel}, spec))
    return out


@dataclass
class NeedleTrials(Trials):
    # per (kernel, seq_len, tau1): how many of the random draws separate
    random: list[dict[str, Any]]


def _random_id(cfg: NeedleConfig, seq_len: int, tau1: float) -> str:
    keys = ("tau0", "dim", "sigma", "beta", "hidden", "draws", "samples", "accuracy", "seed")
    config = {k: asdict(cfg)[k] for k in keys} | {"seq_len": seq_len, "tau1": tau1}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16], config


# the modules whose code makes a random-weight setting's point (`engine.points.stored_point`)
RANDOM_MODULES = [__name__, "blocklab.tasks.needle"]


def plan_random(cfg: NeedleConfig) -> list[tuple[int, float, str, dict[str, Any]]]:
    """(T, tau1, the point's id, its config) of each random-weight setting the run measures."""
    return [(s, t, *_random_id(cfg, s, t)) for s in cfg.seq_lens for t in cfg.tau1s]


def run(cfg: NeedleConfig, store: Store, *, resources=None, progress=True) -> NeedleTrials:
    from blocklab.engine.points import stored_point

    trained, settings = plan_trained(cfg), plan_random(cfg)
    # every draw and trial planned before the first runs: a stopped run's index counts them all
    store.expect([rid for *_, rid, _ in settings] + [spec.id for _, spec in trained])
    random_rows = []
    for seq_len, tau1, rid, config in settings:
        record = {"id": rid, "experiment": "needle-random", "seed": cfg.seed, "config": config}

        def draw(seq_len=seq_len, tau1=tau1):
            return {"successes": random_setting(cfg, seq_len, tau1), "draws": cfg.draws}

        rec, _ = stored_point(store, record, RANDOM_MODULES, draw)
        for kernel, k in rec["metrics"]["successes"].items():
            row = {"model": kernel, "seq_len": seq_len, "tau1": tau1, "successes": k}
            random_rows.append({**row, "draws": cfg.draws})
    trained = _trials.run_planned(
        trained, store, "needle-trained", resources=resources, progress=progress
    )
    return NeedleTrials(trained.rows, trained.failed, random_rows)


def price(cfg: NeedleConfig, out_dir) -> Any:
    """--plan: the trained trials (`plan_trained`) met with the store in `out_dir` and priced
    (`_pricing.price`), and the random-weight settings (`plan_random`) the store does not hold,
    each timed here at a few of its draws (`_drawn`)."""
    from blocklab.fingerprint import code

    specs = [s for _, s in plan_trained(cfg)]
    settings = plan_random(cfg)
    with _pricing.stored(out_dir) as store:
        held: set[str] = set()
        if store is not None:
            fingerprint = code(RANDOM_MODULES)["fingerprint"]
            held, _ = store.reusable({rid: fingerprint for *_, rid, _ in settings})
        left = [(s, t) for s, t, rid, _ in settings if rid not in held]
        points = _pricing.Points("random-weight settings", "random_settings", len(settings),
                                 len(settings) - len(left), lambda: _drawn(cfg, left))  # fmt: skip
        return _pricing.price(specs, cfg, store, ("needle",), extra={"seeds": cfg.seeds},
                              points=points)  # fmt: skip


def _drawn(cfg: NeedleConfig, settings: list[tuple[int, float]], few: int = 4) -> float:
    """Core-seconds of the random-weight `settings` at the config's draws: `few` draws of each
    timed on this machine, on one thread as the run draws them."""
    import time

    from blocklab.engine.executors import worker_threads

    some = replace(cfg, draws=min(few, cfg.draws))
    total = 0.0
    with worker_threads(1):
        for seq_len, tau1 in settings:
            start = time.perf_counter()
            random_setting(some, seq_len, tau1)
            total += (time.perf_counter() - start) * cfg.draws / some.draws
    return total


@EXPERIMENTS.register
class Needle(Experiment):
    Config = NeedleConfig
    run = staticmethod(run)
    price = staticmethod(price)
    forms = {"full": None}
    commands = (
        Command(
            "needle",
            "seed 004: softmax vs linear attention on the needle task",
            "runs/needle",
        ),
    )

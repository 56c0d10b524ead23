"""Seed 002's qSA separation (Sanford, Hsu, Telgarsky 2023), trained and measured.

One softmax attention layer of embedding dimension m (the query, key and value dimension) on
q-sparse averaging, for several q, beside a fully connected network of equal parameters that
sees the whole flattened sequence. The seed predicts success iff m is about q or more
(m >= q / log N is necessary; m = O(d + q log N) suffices), and failure of the fully connected
network below width ~ N d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from blocklab.experiments import EXPERIMENTS, Command, Experiment, Findings, _trials
from blocklab.specs import TrainConfig
from blocklab.store import Store


def _help(text: str) -> dict[str, str]:
    return {"help": text}


def _train(steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=64, lr=3e-3, eval_points=20)


@dataclass(frozen=True)
class QsaConfig:
    qs: tuple[int, ...] = field(default=(1, 2, 4), metadata=_help("sparsities q to test"))
    dims: tuple[int, ...] = field(
        default=(2, 4, 8, 16), metadata=_help("embedding dimensions m of the attention layer")
    )
    seq_len: int = field(default=16, metadata=_help("sequence length N"))
    dim: int = field(default=2, metadata=_help("dimension d of the averaged vectors z"))
    width: int = field(default=64, metadata=_help("model width around the attention layer"))
    n_train: int = field(default=16384, metadata=_help("training examples"))
    mlp: bool = field(default=True, metadata=_help("train the equal-parameter fully connected net"))
    seeds: int = field(default=3, metadata=_help("seeds per configuration"))
    solved: float = field(default=0.9, metadata=_help("test accuracy that counts as success"))
    train: TrainConfig = field(default_factory=lambda: _train(2000))

    def __post_init__(self):
        _trials.check_positive(self, ("seeds", "seq_len", "dim", "width", "n_train"))
        if not self.qs or not self.dims:
            raise ValueError("give at least one q and one m")
        if any(not 1 <= q < self.seq_len for q in self.qs):
            raise ValueError(f"every q must be in 1..seq_len-1 = {self.seq_len - 1}, got {self.qs}")
        if any(m < 1 for m in self.dims):
            raise ValueError(f"embedding dimensions must be >= 1, got {self.dims}")
        if not 0 < self.solved <= 1:
            raise ValueError(f"solved must be in (0, 1], got {self.solved}")

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


ATTENTION_SHAPE = _trials.NetShape(depth=1, norm="none", residual=True)
FLAT_SHAPE = _trials.NetShape(depth=1, norm="none", residual=False, activation="relu", flatten=True)


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


def run(cfg: QsaConfig, store: Store, *, resources=None, progress=True) -> Findings:
    rows, summaries, failed = _trials.run_planned(
        plan(cfg),
        store,
        "sanford-qsa",
        ("q", "m", "model"),
        resources=resources,
        progress=progress,
    )
    return Findings(rows, summaries, findings(cfg, summaries), failed)


def findings(cfg: QsaConfig, summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per q: the smallest m whose mean test accuracy reaches `solved`, beside the seed's range."""
    findings = []
    log_n = math.log2(cfg.seq_len)
    for q in cfg.qs:
        att = sorted(
            (s for s in summaries if s["q"] == q and s["model"] == "attention"),
            key=lambda s: s["m"],
        )
        solved = [s["m"] for s in att if s["n"] and s["mean"] >= cfg.solved]
        first = solved[0] if solved else None
        monotone = all(s["m"] in solved for s in att if first is not None and s["m"] >= first)
        below_bound = [m for m in solved if m < q / log_n]
        mlp = [s for s in summaries if s["q"] == q and s["model"] == "fully connected"]
        best_mlp = max((s["mean"] for s in mlp if s["n"]), default=None)
        findings.append(
            {
                "q": q,
                "predicted": f"success iff m >~ q = {q} (necessary: m >= q/log2 N = "
                f"{q / log_n:.2f}; sufficient: m = O(d + q log N))",
                "measured": (
                    f"first m reaching {cfg.solved:.0%}: {first}"
                    + ("" if monotone else " (not every larger m reaches it)")
                    if first is not None
                    else f"no m up to {max(cfg.dims)} reaches {cfg.solved:.0%}"
                ),
                "first_m": first,
                "consistent_with_lower_bound": not below_bound,
                "fully_connected_best": best_mlp,
            }
        )
    firsts = [f["first_m"] for f in findings]
    known = [m for m in firsts if m is not None]
    grows = all(a <= b for a, b in zip(known, known[1:], strict=False))
    findings.append(
        {
            "q": "all",
            "predicted": "the m needed grows with q",
            "measured": "first m per q: "
            + ", ".join(f"q={q}: {m}" for q, m in zip(cfg.qs, firsts, strict=True))
            + ("; non-decreasing in q" if grows else "; NOT non-decreasing in q"),
            "first_m": None,
            "consistent_with_lower_bound": all(f["consistent_with_lower_bound"] for f in findings),
            "fully_connected_best": None,
        }
    )
    return findings


@EXPERIMENTS.register
class SanfordQsa(Experiment):
    Config = QsaConfig
    run = staticmethod(run)
    report = "blocklab.reports.sanford_qsa"
    commands = (
        Command(
            "sanford qsa",
            "one attention layer vs embedding dimension, several q",
            "runs/sanford-qsa",
        ),
    )

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

Ratios span decades and pure attention in float32 reaches exactly identical tokens (ratio 0), so
every statistic is taken on log10 of the ratio clipped at float32 machine epsilon (`FLOOR`): the
networks compute in float32, so a smaller relative residual is rounding, not signal. Clipping
only shrinks the measured slopes and differences.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from blocklab import theory
from blocklab.analysis.stats import holm, interval, paired_p
from blocklab.blocks import BLOCKS
from blocklab.experiments import _trials
from blocklab.models import parse_arm
from blocklab.store import Store
from blocklab.tasks import TASKS, make_task
from blocklab.train import TrainConfig

# the switch each variant part turns on; "pure" turns on nothing
PARTS = {"skip": {"residual": True}, "mlp": {"ff": "relu4x"}, "norm": {"norm": "layer"}}
PURE = _trials.NetShape(norm="none", residual=False, ff="none")
STAGES = ("init", "trained")
NORMS = ("composite", "frobenius")
FLOOR = float(np.finfo(np.float32).eps)  # 2^-23: the smallest ratio float32 states resolve
LOG_FLOOR = math.log10(FLOOR)


def _help(text: str) -> dict[str, str]:
    return {"help": text}


def _train(steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=64, lr=1e-2, eval_points=5)


def variant_shape(variant: str, depth: int = 1, width: int = 32) -> _trials.NetShape:
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
        default="softmax_attention", metadata=_help("token-mixing block of every layer")
    )
    depth: int = field(default=6, metadata=_help("layers L"))
    width: int = field(default=32, metadata=_help("model width D"))
    heads: int = field(default=1, metadata=_help("attention heads H per layer"))
    seq_len: int = field(default=16, metadata=_help("sequence length T of the task"))
    variants: tuple[str, ...] = field(
        default=("pure", "skip", "mlp", "norm", "skip+mlp+norm"),
        metadata=_help("pure, or skip / mlp / norm joined by '+'"),
    )
    task: str = field(
        default="qsa", metadata=_help("sequence task: gives the inputs and the training signal")
    )
    n_train: int = field(default=4096, metadata=_help("training examples of the task"))
    seeds: int = field(default=3, metadata=_help("seeds per variant (same seeds in every variant)"))
    alpha: float = field(default=0.05, metadata=_help("level of the tests (Holm-corrected)"))
    train: TrainConfig = field(default_factory=lambda: _train(300))

    def __post_init__(self):
        _trials.check_positive(self, ("depth", "width", "heads", "seq_len", "n_train", "seeds"))
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if not BLOCKS.get(self.block).mixes_tokens:  # unknown names fail with "did you mean"
            mixing = [n for n in BLOCKS.names() if BLOCKS.get(n).mixes_tokens]
            raise ValueError(
                f"block {self.block!r} acts on each token alone, so its tokens cannot collapse; "
                f"give a token-mixing block ({', '.join(mixing)})"
            )
        parse_arm(self.arm)  # options the block does not take fail here
        if not self.variants:
            raise ValueError("give at least one variant")
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
class Result:
    rows: list[dict[str, Any]]  # one per finished trial, with its measures
    summaries: list[dict[str, Any]]  # log10 ratio over seeds per (variant, stage, norm, layer)
    accuracy: list[dict[str, Any]]  # test metric over seeds per variant
    paths: dict[str, Any]  # seed 003 Theorem 2.1: path shares by length
    bound: dict[str, Any]  # seed 003 Theorem 2.2 for pure single-head softmax attention
    findings: list[dict[str, Any]]
    failed: list[dict[str, Any]]


def run(cfg: CollapseConfig, store: Store, *, resources=None, progress=True) -> Result:
    rows, accuracy, failed = _trials.run_planned(
        plan(cfg),
        store,
        "collapse",
        ("variant",),
        resources=resources,
        progress=progress,
    )
    logs = curves(rows)
    bound = bound_check(rows, cfg.depth)
    return Result(
        rows=rows,
        summaries=summarize_curves(logs),
        accuracy=accuracy,
        paths=path_shares(cfg),
        bound=bound,
        findings=findings(cfg, logs, bound),
        failed=failed,
    )


# --- per-trial curves ------------------------------------------------------------------------


def log_ratio(median: list[float]) -> np.ndarray:
    """log10 of the per-layer median ratios, clipped at FLOOR; (L + 1,)."""
    return np.log10(np.maximum(np.asarray(median, dtype=float), FLOOR))


def _stages(row: dict[str, Any]) -> tuple[str, ...]:
    # a diverged network's weights are not a trained network: only its init counts
    return STAGES if row["status"] == "done" else ("init",)


def curves(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[int, np.ndarray]]:
    """{(variant, stage, norm): {seed: log10 ratio per layer (L + 1,)}}."""
    out: dict[tuple[str, str, str], dict[int, np.ndarray]] = {}
    for r in rows:
        for stage in _stages(r):
            summary = r["measures"]["collapse"][stage]
            for norm in NORMS:
                key = (r["variant"], stage, norm)
                out.setdefault(key, {})[r["seed"]] = log_ratio(summary[norm]["median"])
    return out


def slope(logs: np.ndarray) -> float:
    """Least-squares slope of log10 ratio against the layer, decades per layer."""
    return float(np.polyfit(np.arange(len(logs)), logs, 1)[0])


def depth_mean(logs: np.ndarray) -> float:
    """Mean log10 ratio over layers 1..L: higher means the collapse is slower."""
    return float(np.mean(logs[1:]))


def _stats(values) -> dict[str, Any]:
    mean, std, lo, hi, n = interval(values)
    return {"mean": mean, "std": std, "lo": lo, "hi": hi, "n": n}


def summarize_curves(logs) -> list[dict[str, Any]]:
    """Mean, std and 95% t-interval over seeds of log10 ratio per (variant, stage, norm, layer),
    with the number of seeds at the floor."""
    out = []
    for (variant, stage, norm), by_seed in logs.items():
        stacked = np.stack([by_seed[s] for s in sorted(by_seed)])  # (seeds, L + 1)
        for layer in range(stacked.shape[1]):
            col = stacked[:, layer]
            out.append(
                {
                    "variant": variant,
                    "stage": stage,
                    "norm": norm,
                    "layer": layer,
                    **_stats(col),
                    "at_floor": int((col <= LOG_FLOOR).sum()),
                    "seeds": sorted(by_seed),
                }
            )
    return out


# --- theory beside the measurement ----------------------------------------------------------


def path_shares(cfg: CollapseConfig) -> dict[str, Any]:
    """Seed 003 Theorem 2.1 with the skip as a dummy head: of the (H+1)^L paths, the share that
    passes through k attention layers is C(L, k) H^k / (H+1)^L."""
    shares = theory.path_shares(cfg.depth, cfg.heads)
    mean = sum(k * s for k, s in enumerate(shares))
    return {"depth": cfg.depth, "heads": cfg.heads, "shares": shares, "mean_length": mean}


def bound_check(rows: list[dict[str, Any]], depth: int) -> dict[str, Any]:
    """Per stage: seed 003 Theorem 2.2's bound (log10, median over sequences, mean over seeds) and
    whether the measured median ratio stays below it in every seed and layer. If the bound holds
    for every sequence it holds for the medians (order statistics keep the order)."""
    out: dict[str, Any] = {}
    for stage in STAGES:
        bounds, violations = [], []
        for r in rows:
            summary = r["measures"]["collapse"].get(stage) if stage in _stages(r) else None
            c = summary["composite"] if summary else {}
            if "bound_log10_median" not in c:
                continue
            b = np.asarray(c["bound_log10_median"], dtype=float)  # (L,) layers 1..L
            with np.errstate(divide="ignore"):
                measured = np.log10(np.asarray(c["median"][1:], dtype=float))  # 0 -> -inf
            bad = np.nonzero(measured > b + 1e-9)[0]
            violations += [{"seed": r["seed"], "layer": int(i) + 1} for i in bad]
            bounds.append(b)
        if not bounds:
            continue
        mean = np.mean(bounds, axis=0)
        out[stage] = {
            "log10_bound": mean.tolist(),
            "seeds": len(bounds),
            "violations": violations,
            "vacuous_layers": [i + 1 for i in range(depth) if mean[i] >= 0],
        }
    return out


# --- findings --------------------------------------------------------------------------------

WHY = {
    "skip": "the skip keeps short paths (seed 003 Thm 2.1: (H+1)^L paths, most of them short)",
    "mlp": "the MLP slows the collapse (Dong et al.)",
}


def expectation(variant: str) -> tuple[str, str]:
    """(expected direction vs pure, why), after Dong et al. and seed 003."""
    parts = set(variant.split("+"))
    if "skip" in parts:
        return "above", WHY["skip"]
    if "mlp" in parts:
        return "above", WHY["mlp"]
    return "not above", "layer norm does not stop the collapse (Dong et al.)"


def trend_prediction(variant: str) -> str:
    if variant == "pure":
        return "falls with depth: pure attention loses rank doubly exponentially (seed 003 Thm 2.2)"
    if "mlp" in variant.split("+"):
        return "falls with depth: an MLP slows the collapse, without skips it does not stop it"
    return "falls with depth: layer norm does not stop the collapse (Dong et al.)"


def _values(logs, key, stat) -> dict[int, float]:
    return {s: stat(v) for s, v in logs.get(key, {}).items()}


def _mean_text(values: dict[int, float]) -> str:
    mean, std, _, _, n = interval(list(values.values()))
    return f"{mean:.2f}" + (f" ± {std:.2f}" if n > 1 else "")


def findings(cfg: CollapseConfig, logs, bound: dict[str, Any]) -> list[dict[str, Any]]:
    """(a) every variant without skips falls with depth: two-sided one-sample t-test across
    seeds of the slope of log10 ratio against the layer; (b, c) every variant against pure:
    paired two-sided t-test across seeds of the mean log10 ratio over layers 1..L; both at init
    and (d) after training; Holm over all of them. (e) the bound of seed 003 Thm 2.2: a check."""
    out = []
    for stage in STAGES:
        for v in cfg.variants:
            if "skip" in v.split("+"):
                continue
            slopes = _values(logs, (v, stage, "composite"), slope)
            last = _values(logs, (v, stage, "composite"), lambda x: float(x[-1]))
            if not slopes:
                continue
            seeds = sorted(slopes)
            out.append(
                {
                    "part": stage,
                    "setting": f"{v}: trend with depth",
                    "variant": v,
                    "test": "slope",
                    "predicted": trend_prediction(v),
                    "expect": "falls",
                    "measured": f"slope {_mean_text(slopes)} decades/layer; log10 ratio at layer "
                    f"{cfg.depth}: {_mean_text(last)}",
                    "statistic": float(np.mean(list(slopes.values()))),
                    "n": len(seeds),
                    "_p": _p([slopes[s] for s in seeds], [0.0] * len(seeds)),
                }
            )
        if "pure" not in cfg.variants:
            continue
        pure = _values(logs, ("pure", stage, "composite"), depth_mean)
        for v in cfg.variants:
            other = _values(logs, (v, stage, "composite"), depth_mean)
            seeds = sorted(set(pure) & set(other))
            if v == "pure" or not seeds:
                continue
            expect, why = expectation(v)
            diff = [other[s] - pure[s] for s in seeds]
            out.append(
                {
                    "part": stage,
                    "setting": f"{v} vs pure",
                    "variant": v,
                    "test": "paired",
                    "predicted": f"{expect} pure: {why}",
                    "expect": expect,
                    "measured": f"mean log10 ratio over layers: {v} "
                    f"{_mean_text({s: other[s] for s in seeds})}, pure "
                    f"{_mean_text({s: pure[s] for s in seeds})}",
                    "statistic": float(np.mean(diff)),
                    "n": len(seeds),
                    "_p": _p([other[s] for s in seeds], [pure[s] for s in seeds]),
                }
            )
    _verdicts(out, cfg.alpha)
    return out + bound_findings(bound)


def _p(a: list[float], b: list[float]) -> float:
    """Two-sided paired t-test (one-sample when b is zeros); nan below 2 seeds."""
    return paired_p(np.asarray(a), np.asarray(b)) if len(a) >= 2 else float("nan")


def _verdicts(out: list[dict[str, Any]], alpha: float) -> None:
    pvals = [f.pop("_p") for f in out]
    finite = [i for i, p in enumerate(pvals) if not math.isnan(p)]
    adjusted = dict(zip(finite, holm([pvals[i] for i in finite]), strict=True)) if finite else {}
    for i, f in enumerate(out):
        f["p"], f["p_holm"] = pvals[i], float(adjusted.get(i, float("nan")))
        f["verdict"], f["agrees"] = _verdict(f, alpha)


def _verdict(f: dict[str, Any], alpha: float) -> tuple[str, str]:
    if math.isnan(f["p_holm"]):
        return "untestable (fewer than 2 seeds)", "not tested"
    sign = np.sign(f["statistic"]) if f["p_holm"] < alpha else 0
    if f["test"] == "slope":
        verdict = {-1: "falls with depth", 1: "rises with depth", 0: "no significant trend"}[sign]
        return verdict, {-1: "yes", 1: "no", 0: "not shown"}[sign]
    verdict = {1: "above pure", -1: "below pure", 0: "no significant difference"}[sign]
    if f["expect"] == "above":
        return verdict, {1: "yes", -1: "no", 0: "not shown"}[sign]
    return verdict, {1: "no", -1: "yes", 0: "consistent"}[sign]


def bound_findings(bound: dict[str, Any]) -> list[dict[str, Any]]:
    """(e) seed 003 Thm 2.2 as a check: the measured curve must lie below the bound."""
    out = []
    for stage, b in bound.items():
        logs = b["log10_bound"]
        holds = not b["violations"]
        vacuous = len(b["vacuous_layers"]) == len(logs)
        verdict = "holds" if holds else f"VIOLATED at {b['violations'][:3]}"
        if vacuous:
            verdict += "; vacuous (bound >= 1) at every layer"
        elif b["vacuous_layers"]:
            verdict += f"; vacuous at layers {b['vacuous_layers']}"
        out.append(
            {
                "part": stage,
                "setting": "pure: seed 003 bound",
                "variant": "pure",
                "test": "check",
                "predicted": "ratio <= (4 beta res0^2 / sqrt(d_qk))^((3^L - 1)/2) at every layer "
                "(Thm 2.2); it shrinks only if 4 beta res0^2 / sqrt(d_qk) < 1",
                "expect": "below bound",
                "measured": f"log10 bound from {logs[0]:.3g} (layer 1) to {logs[-1]:.3g} (layer "
                f"{len(logs)}); measured below it in {b['seeds']} seeds x {len(logs)} layers"
                if holds
                else f"{len(b['violations'])} (seed, layer) pairs above the bound",
                "statistic": None,
                "n": b["seeds"],
                "p": None,
                "p_holm": None,
                "verdict": verdict,
                "agrees": "yes" if holds else "no",
                "vacuous": vacuous,
            }
        )
    return out

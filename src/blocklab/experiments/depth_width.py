"""Seed 001's depth-to-width experiment (Levine et al. 2020, section 5 and appendix D).

The common transformer (eq. 1-2: causal softmax attention with 2 heads, layer norm, residual,
feed-forward relu4x; 12 L dx^2 parameters per network besides the embedding) trains as a language
model on the `text` task at every depth of a grid and at a series of non-embedding budgets
N = 12 L dx^2, dx rounded to a multiple of the heads. Repeats (seeds) give each point's test-loss
std, as appendix D's repeats do. Between adjacent depths the transition width is found as in
section 5.2.2 and the transitions are fitted to log dx = a + b L (analysis/depth_width.py).

The seed's prediction: below a width the deeper network is no better for its size (or worse),
above it the deeper network wins, and that transition width grows exponentially with depth
(b > 0). The quick form is a miniature (depths 1-4, widths ~8-130, minutes of training), so its
a and b are not the paper's: the test is the sign of b, and whether transitions exist at all.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from blocklab.errors import UserError
from blocklab.experiments import EXPERIMENTS, Command, Experiment, _trials
from blocklab.specs import TrainConfig, TrialSpec
from blocklab.store import Store

if TYPE_CHECKING:
    from blocklab.analysis import depth_width as dw

# a run's transition fit, beside its report, for `blocklab advise --fit`
FIT_FILE = "fit.json"


def _help(text: str) -> dict[str, str]:
    return {"help": text}


def _train(steps: int, batch_size: int = 32, lr: float = 6e-3) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=batch_size, lr=lr, eval_points=8)


@dataclass(frozen=True)
class DepthWidthConfig:
    depths: tuple[int, ...] = field(default=(1, 2, 3, 4), metadata=_help("network depths L"))
    budgets: tuple[int, ...] = field(
        default=(3000, 10000, 30000, 100000),
        metadata=_help("non-embedding parameter budgets N = 12 L dx^2"),
    )
    heads: int = field(default=2, metadata=_help("attention heads per layer (the paper's 2)"))
    seeds: int = field(default=3, metadata=_help("repeats per point, for the loss std"))
    alpha: float = field(default=0.05, metadata=_help("level of the 'shallower is worse' test"))
    vocab: int = field(default=512, metadata=_help("BPE vocabulary size (the paper's 2000)"))
    seq_len: int = field(default=64, metadata=_help("tokens per training sequence"))
    path: str = field(default="", metadata=_help("a text file to model ('' = the stdlib corpus)"))
    max_chars: int = field(default=0, metadata=_help("corpus characters to use (0 = all)"))
    n_train: int = field(default=16384, metadata=_help("training sequences drawn per seed"))
    train: TrainConfig = field(default_factory=lambda: _train(1000))

    def __post_init__(self):
        _trials.check_positive(self, ("heads", "seeds", "vocab", "seq_len", "n_train"))
        if len(set(self.depths)) < 2 or any(d < 1 for d in self.depths):
            raise ValueError(f"give at least two distinct depths >= 1, got {self.depths}")
        if not self.budgets or any(b < 1 for b in self.budgets):
            raise ValueError(f"budgets must be positive, got {self.budgets}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.max_chars < 0:
            raise ValueError(f"max_chars must be >= 0, got {self.max_chars}")

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


def shape(depth: int, width: int) -> _trials.NetShape:
    """Seed 001's common transformer layer: pre-norm, residual, a ReLU feed-forward of 4 dx."""
    return _trials.NetShape(depth=depth, width=width, norm="layer", residual=True, ff="relu4x")


def plan(cfg: DepthWidthConfig) -> list[tuple[dict[str, Any], TrialSpec]]:
    """(keys, spec) per depth, width and seed; budgets that round to one width run once."""
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
    return out


@dataclass
class Result:
    rows: list[dict[str, Any]]
    summaries: list[dict[str, Any]]  # per (depth, width): test loss over seeds
    searches: list[Any]  # dw.TransitionSearch per adjacent pair of depths
    fit: dw.Fit | None
    fit_error: str | None  # why there is no fit
    best: list[dict[str, Any]]  # per budget: the depth of least mean test loss
    findings: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    corpus: dict[str, Any]  # the text task's facts (files, tokens, vocabulary)


def run(cfg: DepthWidthConfig, store: Store, *, resources=None, progress=True) -> Result:
    from blocklab import sweep
    from blocklab.analysis import depth_width as dw

    opts = cfg.task_options()
    # the tokenizer is trained (and cached) here once, not by every worker at the same time
    corpus = sweep.task_data("text", json.dumps(opts, sort_keys=True), 0).info
    rows, summaries, failed = _trials.run_planned(
        plan(cfg),
        store,
        "depth-width",
        ("depth", "width", "nominal"),
        resources=resources,
        progress=progress,
        value="test_loss",
    )
    summaries = with_sizes(summaries, rows)
    points = {
        depth: [dw.Point(s["budget"], s["width"], s["mean"], s["std"], s["n"]) for s in group]
        for depth, group in _by_depth(summaries).items()
    }
    searches = dw.transitions(points, alpha=cfg.alpha)
    fit, fit_error = fit_found(searches)
    best = best_depths(summaries)
    return Result(
        rows,
        summaries,
        searches,
        fit,
        fit_error,
        best,
        findings(cfg, searches, fit, best),
        failed,
        corpus,
    )


def with_sizes(summaries: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The test-loss summaries per (depth, width), with the size 12 L dx^2 and mean accuracy."""
    out = [dict(s) for s in summaries]
    for s in out:
        s["budget"] = 12 * s["depth"] * s["width"] ** 2
        shape = (s["depth"], s["width"])
        done = [r for r in rows if r["status"] == "done" and (r["depth"], r["width"]) == shape]
        s["accuracy"] = sum(r["test_metric"] for r in done) / len(done) if done else math.nan
    return sorted(out, key=lambda s: (s["depth"], s["width"]))


def _by_depth(summaries: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for s in summaries:
        if s["n"] >= 1:
            out.setdefault(s["depth"], []).append(s)
    return {d: sorted(g, key=lambda s: s["budget"]) for d, g in sorted(out.items())}


def fit_found(searches: list[Any]) -> tuple[dw.Fit | None, str | None]:
    """The weighted fit over the transitions found; it needs two depths (three for chi2_red)."""
    from blocklab.analysis import depth_width as dw

    found = [s.transition for s in searches if s.transition is not None]
    if len({t.depth_shallow for t in found}) < 2:
        return None, f"{len(found)} transition(s) found; a fit needs two depths or more"
    try:
        fit = dw.fit_transitions(
            [t.depth_shallow for t in found], [t.width for t in found], [t.error for t in found]
        )
    except UserError as exc:
        return None, str(exc)
    return fit, None


def best_depths(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per budget asked for: the depth of least mean test loss, as figure 3(c) colours each
    range of sizes by its best depth (the realized sizes 12 L dx^2 differ a little by depth)."""
    by_budget: dict[int, list[dict[str, Any]]] = {}
    for s in summaries:
        if s["n"] >= 1:
            by_budget.setdefault(s["nominal"], []).append(s)
    out = []
    for budget, group in sorted(by_budget.items()):
        if len({s["depth"] for s in group}) < 2:
            continue
        best = min(group, key=lambda s: s["mean"])
        out.append({"budget": budget, "depth": best["depth"], "loss": best["mean"]})
    return out


def findings(cfg, searches, fit, best) -> list[dict[str, Any]]:
    from blocklab.analysis import depth_width as dw

    sizes = [12 * d * width_for(n, d, cfg.heads) ** 2 for d in cfg.depths for n in cfg.budgets]
    lo, hi = min(sizes), max(sizes)
    out = []
    for s in searches:
        t = s.transition
        measured = (
            f"transition at dx = {t.width:g} +- {t.error:g} (N ~ {t.n_params:.3g})"
            if t is not None
            else f"no transition: {s.reason}"
        )
        # the paper's fit, extrapolated when L is outside its depths 6-30
        n, dn = dw.n_transition(s.depth_shallow)
        inside = lo <= n + dn and n - dn <= hi
        out.append(
            {
                "part": "transition",
                "setting": f"L = {s.depth_shallow} vs {s.depth_deep}",
                "predicted": f"deeper no better below a size, better above; eq. 10-11 put it at "
                f"N = {n:.2g} +- {dn:.1g}, "
                + ("inside" if inside else "outside")
                + f" the measured sizes {lo:.2g}-{hi:.2g}",
                "measured": measured,
                "verdict": "as the paper's fit places it"
                if (t is not None) == inside
                else "unlike the paper's fit",
            }
        )
    if fit is not None:
        z = fit.b / fit.sigma_b if fit.sigma_b > 0 else float("inf")
        out.append(
            {
                "part": "fit",
                "setting": f"{fit.n_points} transitions",
                "predicted": "log dx = a + b L with b > 0 (paper: a = 5.039, b = 0.0555)",
                "measured": f"a = {fit.a:.3f} +- {fit.sigma_a:.3f}, b = {fit.b:.4f} +- "
                f"{fit.sigma_b:.4f}, chi2_red = {fit.chi2_red:.3g}, R^2 = {fit.r2:.3f}",
                "verdict": "b > 0 (one-sided z test, 5%)"
                if z > 1.6449
                else "b not significantly above 0",
            }
        )
    if best:
        order = [b["depth"] for b in best]
        grows = all(x <= y for x, y in zip(order, order[1:], strict=False))
        out.append(
            {
                "part": "best depth",
                "setting": "per budget",
                "predicted": "the best depth grows with the budget (figure 3(c))",
                "measured": ", ".join(f"N~{b['budget']:.2g}: L={b['depth']}" for b in best),
                "verdict": "non-decreasing" if grows else "not monotone",
            }
        )
    return out


@EXPERIMENTS.register
class DepthWidth(Experiment):
    Config = DepthWidthConfig
    run = staticmethod(run)
    report = "blocklab.reports.depth_width"
    commands = (
        Command(
            "depth-width",
            "seed 001: transformer LMs over depths and budgets, transitions and their fit",
            "runs/depth-width",
        ),
    )

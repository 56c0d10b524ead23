"""The degree sweep's design checks before any fit, on one network per cell (`Networks`: each
cell's arm at its depth, seed 0, teacher 0, built once): a direction lost inside a network is
refused (`input_ranks`, against what the design lets through, `design_bound`), then a block its
depth ladder cannot continue (`check_ladders`), and each cell's functional count taken
(`exact.functional_counts`), all on those networks (`check`); and where the pairs the answer
compares meet, said before any fit (`meeting_words`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blocklab.errors import UserError
from blocklab.experiments.degree_sweep import exact, plan
from blocklab.experiments.degree_sweep.config import DegreeSweepConfig
from blocklab.experiments.degree_sweep.networks import Networks
from blocklab.experiments.degree_sweep.plan import Cells, spec
from blocklab.theory import ANSWER_PAIRS, CONTROL_LABEL


@dataclass(frozen=True)
class Preflight:
    """What the checks before any fit found: per arm its input rank (`input_ranks`), per
    cell its functional count (`exact.functional_counts`)."""

    input_rank: dict[str, dict[str, Any]]
    counts: dict[tuple[int, str], dict[str, Any]]


def check(cfg: DegreeSweepConfig, cells: Cells, stage=None) -> Preflight:
    """Build every cell's network once and check the design on it: a direction lost inside a
    network is refused, then (staged runs) a block its ladder cannot continue; then each cell's
    functional count. `stage(line)`, where given, is told as each check begins."""
    say = stage or (lambda line: None)
    nets = Networks(cfg, cells)
    say(f"checking that every input reaches the output in {len(cells)} cells")
    seen = input_ranks(cfg, cells, nets)
    if cfg.staged:
        say("checking that each block's ladder can continue its fits")
    check_ladders(cfg, cells, nets)
    say(f"counting the functional dimension of {len(cells)} cells' networks")
    counts = exact.functional_counts(cfg, cells, nets)
    return Preflight(seen, counts)


def meeting_words(cfg: DegreeSweepConfig, cells: Cells | None = None) -> str | None:
    """Where each pair the answer compares meets, said before any fit: the counts both reach,
    those where the second arm is read between its rungs (*), and "never" for a pair whose
    ladders do not overlap (no matched contrast); None where no such pair ran."""
    cells = cells if cells is not None else plan.shapes(cfg)
    counts = {a.label: sorted({b for b, label in cells if label == a.label}) for a in cfg.arms()}
    said = []
    for a, b in (*ANSWER_PAIRS, (CONTROL_LABEL, "d=3")):
        if a not in counts or b not in counts:
            continue
        inside = [p for p in counts[a] if counts[b][0] <= p <= counts[b][-1]]
        at = ", ".join(f"{p}{'' if p in counts[b] else '*'}" for p in inside)
        said.append(f"{a}/{b} at {at}" if at else f"{a}/{b} never (no matched contrast)")
    if not said:
        return None
    return "where the arms meet (* read between the second arm's rungs): " + "; ".join(said)


def design_bound(model, seen) -> tuple[int, str | None]:
    """The most input directions `model`'s design lets through, and why where that is fewer than
    its inputs (None: every input). Its linear embedding of f features into width w, at each of
    inputs / f positions, passes positions * min(f, w); where the network is affine in its
    inputs (`seen.affine`: every example's gradients the same, as logistic regression's), its
    readout passes at most its outputs per example. Both are the design's choice, shared by every
    arm at a width; a rank below them is a direction lost inside the network."""
    from torch import nn

    bounds: list[tuple[int, str | None]] = [(seen.inputs, None)]
    embed = getattr(model, "embed", None)
    if isinstance(embed, nn.Linear):
        f, w = embed.in_features, embed.out_features
        positions = seen.inputs // f
        where = f" at each of {positions} positions" if positions > 1 else ""
        bounds.append((positions * min(f, w), f"embedding of width {w}{where}"))
    if seen.affine:
        outputs = f"{seen.outputs} output" + ("s" if seen.outputs != 1 else "")
        why = f"readout of {outputs} on a network linear in its inputs"
        bounds.append((seen.outputs, why))
    return min(bounds, key=lambda b: b[0])  # the first of equal ones: the inputs themselves


def input_ranks(
    cfg: DegreeSweepConfig, cells: Cells, nets: Networks | None = None
) -> dict[str, dict[str, Any]]:
    """Per arm, the rank of its input Jacobian at initialization (seed 0, teacher 0) over the
    first test inputs, and the most its design lets through (`design_bound`: `bound`, with
    `bound_reason` where that is fewer than the inputs); the cell that loses a direction, else
    the lowest rank over its depths (`measures._jacobian`). A UserError before any fit when an
    arm sees fewer directions than its design lets through (a direction lost inside the network,
    such as LayerNorm over the inputs' width or fewer), naming the fix; a bound the design chose
    is stated in the report, not refused. `nets`: the cells' networks (`Networks`), read on a
    copy."""
    from blocklab.measures._jacobian import input_rank

    nets = nets or Networks(cfg, cells)
    data = nets.data
    if data.vocab is not None:  # token ids have no input gradient
        return {}
    sample = data.test.x[: max(256, 4 * data.test.x[0].numel())]
    out: dict[str, dict[str, Any]] = {}
    features: dict[str, int] = {}  # arm -> the features its embedding reads at one position
    for arm, shape in cells.values():
        model = nets.copied(arm, shape.depth, shape.width)  # input_rank makes it float64
        seen = input_rank(model, sample)
        if not seen.rows:  # its outputs overflowed at initialization: nothing to read
            continue
        bound, reason = design_bound(model, seen)
        r = {
            "rank": seen.rank,
            "inputs": seen.inputs,
            "depth": shape.depth,
            "width": shape.width,
            "singular_values": list(seen.singular_values),
            "bound": bound,
            "bound_reason": reason,
        }
        # the cell that loses a direction first, else the lowest rank
        if arm.label not in out or _order(r) < _order(out[arm.label]):
            out[arm.label] = r
            embed = getattr(model, "embed", None)
            features[arm.label] = getattr(embed, "in_features", seen.inputs)
    lost = {a: r for a, r in out.items() if r["rank"] < r["bound"]}
    if lost:
        arm, r = next(iter(lost.items()))
        low = ", ".join(f"{v:.2g}" for v in r["singular_values"])
        allowed = (
            f", of the {r['bound']} its {r['bound_reason']} lets through"
            if r["bound_reason"]
            else ""
        )
        need = features[arm] + 1  # LayerNorm at a width above the features keeps them all
        if cfg.shape.norm == "layer":
            wider = f"a width of {need} or more, or " if need > r["width"] else ""
            fix = f"{wider}--norm rms"
        else:
            fix = "another block or --norm: a layer drops a direction its embedding passes"
        raise UserError(
            f"NO VERDICT: design check input_rank failed before any fit: {arm} at width "
            f"{r['width']} with {cfg.shape.norm} norm sees {r['rank']} of the task's {r['inputs']} "
            f"input directions{allowed} (input Jacobian singular values {low}), so a direction "
            f"is lost inside the network and every fit would measure that floor; use {fix}"
        )
    return out


def _order(r: dict[str, Any]) -> tuple[bool, int]:
    return r["rank"] >= r["bound"], r["rank"]


def check_ladders(cfg: DegreeSweepConfig, cells: Cells, nets: Networks | None = None) -> None:
    """Before any fit of a staged run: every arm continues as its depth ladder will continue it
    (`checks.blocks.check_ladder`, the contract check `blocklab check` runs on every per-token
    block), at the run's width, norm and residual scaling, on the first test inputs; else a
    UserError naming the arm and --ladder off. `nets`: the cells' networks (`Networks`): the
    arm's cell at depth 1 where the run has one is the ladder's first rung (a copy of it)."""
    if not cfg.staged:
        return
    from blocklab.checks.blocks import check_ladder

    nets = nets or Networks(cfg, cells)
    sample = nets.data.test.x[:256]
    arms = {arm.label: (arm, shape) for arm, shape in cells.values()}
    for label, (arm, shape) in arms.items():
        one = spec(cfg, arm, shape, cfg.train.lr, 0)

        def make(depth: int, seed: int, one=one):
            return nets.rung(one, depth, seed)

        check_ladder(make, sample, label if arm.degrees else f"block {label}")

"""The degree sweep's checks before any fit, on one network per cell: every cell's network
(its arm at its depth, seed 0, teacher 0) is built once (`plan.Networks`), and the input-rank check
(`plan.input_ranks`), the ladder check (`plan.check_ladders`) and the functional count
(`exact.functional_counts`) all read that one network (`check`); and where the pairs the answer
compares meet, said before any fit (`meeting_words`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blocklab.experiments.degree_sweep import exact, plan
from blocklab.experiments.degree_sweep.config import DegreeSweepConfig
from blocklab.theory import ANSWER_PAIRS, CONTROL_LABEL


@dataclass(frozen=True)
class Preflight:
    """What the checks before any fit found: per arm its input rank (`plan.input_ranks`), per
    cell its functional count (`exact.functional_counts`)."""

    input_rank: dict[str, dict[str, Any]]
    counts: dict[tuple[int, str], dict[str, Any]]


def check(cfg: DegreeSweepConfig, cells: plan.Cells, stage=None) -> Preflight:
    """Build every cell's network once and check the design on it: a direction lost inside a
    network is refused, then (staged runs) a block its ladder cannot continue; then each cell's
    functional count. `stage(line)`, where given, is told as each check begins."""
    say = stage or (lambda line: None)
    nets = plan.Networks(cfg, cells)
    say(f"checking that every input reaches the output in {len(cells)} cells")
    seen = plan.input_ranks(cfg, cells, nets)
    if cfg.staged:
        say("checking that each block's ladder can continue its fits")
    plan.check_ladders(cfg, cells, nets)
    say(f"counting the functional dimension of {len(cells)} cells' networks")
    counts = exact.functional_counts(cfg, cells, nets)
    return Preflight(seen, counts)


def meeting_words(cfg: DegreeSweepConfig, cells: plan.Cells | None = None) -> str | None:
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

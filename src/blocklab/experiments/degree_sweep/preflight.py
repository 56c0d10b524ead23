"""The degree sweep's checks before any fit, on one network per cell: every cell's network
(its arm at its depth, seed 0, teacher 0) is built once (`plan.Networks`), and the input-rank check
(`plan.input_ranks`), the ladder check (`plan.check_ladders`) and the functional count
(`exact.functional_counts`) all read that one network (`check`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blocklab.experiments.degree_sweep import exact, plan
from blocklab.experiments.degree_sweep.config import DegreeSweepConfig


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

"""The networks the degree sweep's checks before any fit read: each cell's network (its arm at
its depth and width, seed 0, teacher 0), from the run's one cache of built networks
(`fitting.built`), which the fits' cost estimate, their timing and the build check read too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from blocklab.experiments.degree_sweep.config import DegreeSweepConfig
from blocklab.experiments.degree_sweep.plan import Cells, spec

if TYPE_CHECKING:
    from blocklab.specs import Arm, TrialSpec


class Networks:
    """Each cell's network at initialization (seed 0) on teacher 0's data, by arm, depth and
    width: `cell` returns it, `copied` a copy for a check that changes it (None where the run has
    no such cell), `rung` a copy of an arm's network at any depth and seed. Each is built once,
    within the run's `built.once()` shared with what else reads it before the fits."""

    def __init__(self, cfg: DegreeSweepConfig, cells: Cells):
        from blocklab.fitting import built
        from blocklab.fitting.network import task_data

        self.data = task_data(cfg.task, cfg.task_options, 0)
        self.specs: dict[tuple[str, int, int], TrialSpec] = {
            (arm.label, shape.depth, shape.width): spec(cfg, arm, shape, cfg.train.lr, 0)
            for arm, shape in cells.values()
        }
        self.built = built.shared()

    def cell(self, arm: Arm, depth: int, width: int):
        # seed 0, not the trial's own: the control's cell is d=3's network at seed 0
        return self.built.network(self.specs[(arm.label, depth, width)], 0)

    def copied(self, arm: Arm, depth: int, width: int):
        if (arm.label, depth, width) not in self.specs:
            return None
        return self.built.copied(self.specs[(arm.label, depth, width)], 0)

    def rung(self, one: TrialSpec, depth: int, seed: int):
        """A copy of `one`'s network at `depth`, initialized by `seed`: a ladder's rung, the
        cell's own network where the run has one at seed 0."""
        return self.built.copied(one.at_depth(depth), seed)

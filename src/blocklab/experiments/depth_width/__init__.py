"""Seed 001's depth-to-width experiment (Levine et al. 2020): language models at every depth of a
grid and a series of non-embedding sizes, the transition width between adjacent depths and its
fit log dx = a + b L (`blocklab depth-width`).

`experiment` holds its config, run and manifest; `analysis` the claims tested from the fit
(the fit itself is the shared `blocklab.analysis.depth_width`, which `blocklab advise` reads
too); `report` its page and its figures 2, 3 and 4.
"""

from blocklab.experiments.depth_width.experiment import (
    FIT_FILE,
    DepthWidth,
    DepthWidthConfig,
    DepthWidthTrials,
    plan,
    run,
    shape,
    width_for,
)

__all__ = [
    "FIT_FILE",
    "DepthWidth",
    "DepthWidthConfig",
    "DepthWidthTrials",
    "plan",
    "run",
    "shape",
    "width_for",
]

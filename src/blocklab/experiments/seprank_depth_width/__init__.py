"""Seed 001's separation rank against depth and width (Theorems 1-2; `blocklab seprank
depth-width`): grid ranks of linearized attention networks between the theorems' bounds.

`experiment` holds its config, run and manifest (the measuring is the shared
`experiments._seprank`); `report` its page and figures, over the shared `blocklab.analysis.seprank`.
"""

from blocklab.experiments.seprank_depth_width.experiment import (
    DepthWidthConfig,
    SeprankDepthWidth,
    attention_arm,
    run,
)

__all__ = [
    "DepthWidthConfig",
    "SeprankDepthWidth",
    "attention_arm",
    "run",
]

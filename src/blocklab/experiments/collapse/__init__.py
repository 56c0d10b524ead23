"""Seed 003's rank collapse through depth (Dong et al. 2021): how the residual of a stack of
token-mixing layers falls with depth, pure and with skips, feed-forwards and norms, at
initialization and after training (`blocklab collapse`).

`experiment` holds its config, run and manifest; `analysis` the statistics and tests of the
measured curves; `report` its page and figures.
"""

from blocklab.experiments.collapse.experiment import (
    PARTS,
    PURE,
    Collapse,
    CollapseConfig,
    CollapseTrials,
    path_shares,
    plan,
    run,
    variant_shape,
)

__all__ = [
    "PARTS",
    "PURE",
    "Collapse",
    "CollapseConfig",
    "CollapseTrials",
    "path_shares",
    "plan",
    "run",
    "variant_shape",
]

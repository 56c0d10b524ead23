"""Seed 004's needle (`blocklab needle`): softmax attention separates a needle that linear attention
averages away, measured at random weights and trained.

`experiment` holds its config, run and manifest; `analysis` the separation rates and their tests;
`report` its page and figures.
"""

from blocklab.experiments.needle.experiment import (
    BLOCKS,
    TRAINED_SHAPE,
    Needle,
    NeedleConfig,
    NeedleTrials,
    best_threshold_accuracy,
    kernels,
    plan_trained,
    random_setting,
    run,
    task_options,
)

__all__ = [
    "BLOCKS",
    "TRAINED_SHAPE",
    "Needle",
    "NeedleConfig",
    "NeedleTrials",
    "best_threshold_accuracy",
    "kernels",
    "plan_trained",
    "random_setting",
    "run",
    "task_options",
]

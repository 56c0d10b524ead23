"""The token-manipulation suite (`blocklab mad`): every sequence block at one parameter budget on
mad-lab's tasks (Poli et al. 2024) and zoology's MQAR (Arora et al. 2023), testing seed 000's
claim that a block's degree predicts what it learns; and its width-sweep form (`--sweep-width`),
zoology's MQAR width sweep.

`experiment` holds its config, run and manifest, and `width_sweep` the width sweep's plan and
run; `analysis/` the statistics of the suite (`suite`) and of the width sweep (`width_sweep`);
`report/` the suite's page (`suite`), the width sweep's (`width_sweep`) and the published
findings both test (`published`).
"""

from blocklab.experiments.mad.experiment import (
    BUDGET_TOL,
    EXPERIMENT,
    LADDERS,
    MODES,
    SHAPE,
    SWEEP_BLOCKS,
    TASKS,
    Mad,
    MadConfig,
    MadTrials,
    blocks,
    causal_arm,
    check_task,
    default_blocks,
    ladder,
    nominal_degree,
    plan,
    run,
)

__all__ = [
    "BUDGET_TOL",
    "EXPERIMENT",
    "LADDERS",
    "MODES",
    "SHAPE",
    "SWEEP_BLOCKS",
    "TASKS",
    "Mad",
    "MadConfig",
    "MadTrials",
    "blocks",
    "causal_arm",
    "check_task",
    "default_blocks",
    "ladder",
    "nominal_degree",
    "plan",
    "run",
]

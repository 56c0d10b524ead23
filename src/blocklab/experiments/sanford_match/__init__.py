"""Seed 002's Match2 / Match3 separation (Sanford, Hsu, Telgarsky 2023; `blocklab sanford match`):
the seed's constructions, and standard against tensor attention trained at equal parameters.

`experiment` holds its config, run and manifest; `analysis` the accuracies, plateaus and tests;
`report` its page and figures.
"""

from blocklab.experiments.sanford_match.experiment import (
    EXPERIMENT,
    MATCH_SHAPE,
    MatchConfig,
    MatchTrials,
    SanfordMatch,
    constructed,
    match_arms,
    plan,
    run,
    task_options,
)

__all__ = [
    "EXPERIMENT",
    "MATCH_SHAPE",
    "MatchConfig",
    "MatchTrials",
    "SanfordMatch",
    "constructed",
    "match_arms",
    "plan",
    "run",
    "task_options",
]

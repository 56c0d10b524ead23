"""Seed 002's qSA separation (Sanford, Hsu, Telgarsky 2023; `blocklab sanford qsa`): one softmax
attention layer on q-sparse averaging for several q, beside a fully connected network of equal
parameters.

`experiment` holds its config, run and manifest; `analysis` the summaries of its error; `report`
its page and figures.
"""

from blocklab.experiments.sanford_qsa.experiment import (
    ATTENTION_SHAPE,
    FLAT_SHAPE,
    QsaConfig,
    SanfordQsa,
    plan,
    run,
)

__all__ = [
    "ATTENTION_SHAPE",
    "FLAT_SHAPE",
    "QsaConfig",
    "SanfordQsa",
    "plan",
    "run",
]

"""Seed 000's separation rank against degree (eq. 16-17, Task 1; `blocklab seprank degree`): grid
ranks of degree-d polynomial networks, measured against sep = d^p + 1.

`experiment` holds its config, run and manifest (the measuring is the shared
`experiments._seprank`); `report` its page and figures, over the shared `blocklab.analysis.seprank`.
"""

from blocklab.experiments.seprank_degree.experiment import (
    DegreeConfig,
    SeprankDegree,
    degree_depths,
    run,
)

__all__ = [
    "DegreeConfig",
    "SeprankDegree",
    "degree_depths",
    "run",
]

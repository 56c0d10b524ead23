"""The token suite's report: the suite's page (`suite`: per-cell results, scores, degree
correlations, paired tests, figures), the width sweep's (`width_sweep`), and the published
findings both test (`published`). `write` answers for both forms: the suite's hands a width
sweep's run to `width_sweep.write`.
"""

import blocklab.reports  # noqa: F401  (files only: the backend is set before pyplot's import)
from blocklab.experiments.mad.report.suite import analyze, write

__all__ = [
    "analyze",
    "write",
]

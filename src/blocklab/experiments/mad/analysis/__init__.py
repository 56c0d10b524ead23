"""The token suite's statistics, from the rows its runs return: the suite's per-cell results,
aggregate scores, degree correlations and paired tests (`suite`), and the width sweep's
accuracy against width, the least width that solves each setting and its growth (`width_sweep`).
"""

"""The degree sweep's statistics, above its experiment: per-arm summaries and paired tests
(arms), each (arm, budget) cell's statistics and the command a run without a verdict runs next
(cells); the answer at equal counts (matched), the hypotheses it tests (hypotheses), the checks it
rests on (matched_checks) and its status (answered); each arm's own fit (power_law, scaling), one
shared law with a multiplier per arm (shared_law, multiplier) and the intervals' coverage
(coverage), the parameter counts a fit reads (counts), the design checks (design, fit_checks),
the run's status (capacity, decision) and its claims, the referee's fit (referee), the spreads a
larger run is sized by (pilot) and the next command's cost (cost). Its report calls them from
`analyze`; the experiment's modules never import them. What other experiments share stays in
`blocklab.analysis`."""

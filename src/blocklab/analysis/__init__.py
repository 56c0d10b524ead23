"""Statistics of finished trials, above the experiments that run and store them: summaries over
seeds (summary), intervals, paired tests and verdicts (stats), fits (depth_width) and the
statistics one experiment's report needs (collapse, match, ...), with the theory beside them.
What only the degree sweep uses lives in its home (`blocklab.experiments.degree_sweep.analysis`).
The reports call them from their `analyze`; nothing here runs a trial."""

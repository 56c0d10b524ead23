"""Statistics of finished trials, above the experiments that run and store them: summaries over
seeds (summary), intervals, paired tests and verdicts (stats), fits (power_law, scaling,
depth_width) and the statistics one experiment's report needs (capacity, collapse), with the
theory beside them. The reports call them from their `analyze`; nothing here runs a trial."""

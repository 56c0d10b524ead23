"""Statistics of finished trials that experiments share, above the experiments that run and store
them: summaries over seeds (summary), intervals, Holm's correction and paired tests (stats),
whether a trial plateaued (plateau), a design's power (power), the depth-to-width fits that the
advice command reads too (depth_width) and the separation-rank statistics of the two seprank
experiments (seprank). What one experiment alone computes lives in its home
(`blocklab.experiments.NAME.analysis`). The reports call them from their `analyze`; nothing here
runs a trial."""

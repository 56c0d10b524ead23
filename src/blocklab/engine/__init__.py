"""The trial engine: what turns trial specs into stored records.

`sweep` runs specs and resumes from the store; `claims` splits a store between sweeps;
`executors` and `processes` place units of work on processes, Ray or Slurm; `train` (one network
under Adam) and `ensemble` (many networks as one computation, with `stacked` weights) train them,
each trial read by a `monitor` (its curves, divergence, plateau and stored record); `fit` fits
one network to convergence by full-batch second-order methods in float64, with a certificate;
`progress` and `provenance` say how far a sweep is and what a trial ran on. Importing this package
imports no torch: `executors` serves the command line's help.
"""

"""Seed 000's experiment: networks of degree-d layers at equal parameter budgets, over seeds.

It measures capacity: what a network of each degree can fit at each budget. Every arm and seed
fits the same target (teacher 0; `teachers` K repeats the whole comparison on K independent
targets), seeds vary initialization and batches, and generative tasks draw fresh examples every
step, so a test loss is approximation plus optimization error and arms pair on one problem. The
negative control (`control`) is a second d=3 arm fitting the same teachers from seeds of its own,
paired with d=3 by the seed it stands beside: it must come out equal to d=3.

For every (budget, arm) a learning rate is chosen from a grid on the validation split with the
first seed and teacher (one fixed rate across degrees would favour whichever degree it suits);
when the best rate lies at an edge of the grid the grid is extended past it and searched again,
up to `lr_extend` times. Then every (teacher, seed) trains at that rate and is scored on the test
split. A second-order fit (the default) searches no rate: it fits every cell, or climbs each
arm's depth ladder, to a certified convergence. The report (`report/`, this package's) turns
the rows into summaries, paired tests, and with its analysis (`analysis/`: `capacity`) design
checks, scaling fits and a verdict; the experiment's modules import neither.

The package: `config` (the config and its forms), `plan` (what a run fits, planned from that
config alone: shapes, trials, ladders, referees), `networks` (each cell's network, built once
for everything that reads it before the fits), `preflight` (the design checks on those networks
before any fit), `exact` (the counts and exact measures beside the trained ones), `sizing` (the
recorded spreads a run is sized from), `arm_depths` (each arm's depths), and `experiment`: `run`,
one path through them that also searches the rates and chooses each fit's optimizer, and the
manifest. This file names what callers import.
"""

from blocklab.experiments.degree_sweep.config import SHAPE, DegreeSweepConfig
from blocklab.experiments.degree_sweep.experiment import (
    DEMO_CORE_SECONDS,
    EXPERIMENT,
    PILOT_TIME,
    DegreeSweep,
    DegreeSweepTrials,
    pilot_time,
    run,
)

__all__ = [
    "DEMO_CORE_SECONDS",
    "EXPERIMENT",
    "PILOT_TIME",
    "SHAPE",
    "DegreeSweep",
    "DegreeSweepConfig",
    "DegreeSweepTrials",
    "pilot_time",
    "run",
]

"""The trial engine: what turns trial specs into stored records.

`sweep` runs specs and resumes from the store; `trial` runs one batch of them (through
`blocklab.fitting`); `leases` splits a store between sweeps; `executors` (a local pool) and
`clusters` (Ray, Slurm), both on `executor_base`, and `processes` place batches of work on
processes; `devices` says which device a worker uses; `progress` and `provenance` say how far a
sweep is and what a trial ran on; `reuse` and `points` read what a store already holds. Importing
this package imports no torch: `executors` serves the command line's help.
"""

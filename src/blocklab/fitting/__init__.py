"""Training and fitting networks: what a trial's run does to its network.

`train` trains one network under AdamW and `ensemble` many of one architecture as one computation
(with `stacked` weights and `stacked_adamw`), each trial read by a `monitor` (its curves,
divergence, plateau and stored record); `fit` fits one network by full-batch second-order methods
in float64, `batched` many as one computation, `certify` says when a fit has converged, `converge`
fits a trial's restarts, `ladder` its depth ladder, `cohorts` ladders of one shape together and
`continuation` a stored fit continued to a larger budget; `estimate` and `timing` say what a fit
will cost before it starts; `network` builds a spec's data and network. Nothing here imports
`blocklab.engine`, which runs trials (sweeps, leases, executors) through these.
"""

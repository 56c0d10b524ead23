"""Networks at initialization, built once for what reads them before a run fits: an experiment's
design checks, a fit's cost estimate (`estimate.estimate`), the timed steps (`timing`) and the build
check of every architecture (`engine.sweep.check_builds`). Within `once()` these share one cache,
so a network they all need is built once; outside it each caller gets a cache of its own.

A network here is an architecture (the trial's arm and shape on its task: `architecture`) at
an initialization seed. It is built on the data of the task's seed 0, which fixes its shapes
(the teacher's values change no parameter's shape, nor which parameters get a gradient), and
under `torch.random.fork_rng`, so a check that builds one leaves the random numbers drawn after
it as they would be without it. A caller reads a network (`network`); one that changes it (a
timed step trains it, a float64 check converts it) takes a copy (`copied`), so every later
reader sees the network as `init_model` made it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import torch

from blocklab.fitting.network import init_model, task_data


def architecture(spec) -> str:
    """What a trial's network is made from, apart from its seeds: its task (with the options
    that shape its data), arm and shape. Trials that differ in their fit, budget, seeds, rounding
    or ladder build the same network at the same seed."""
    made = {
        "task": spec.task,
        "task_options": spec.task_options,
        "arm": dataclasses.asdict(spec.arm),
        "shape": dataclasses.asdict(spec.shape),
    }
    return json.dumps(made, sort_keys=True, default=str)


class Built:
    """Networks at initialization by (architecture, seed), each built on first use and kept."""

    def __init__(self):
        self.nets: dict[tuple[str, int], Any] = {}

    def network(self, spec, seed: int | None = None):
        """`spec`'s network initialized by `seed` (None: the spec's own), its unused parameters
        frozen (`network.init_model`), on the CPU, rounding 0; shared, so read it only."""
        seed = spec.seed if seed is None else seed
        key = (architecture(spec), seed)
        if key not in self.nets:
            # rounding moves each parameter by its last bit: no reader here sees it
            plain = dataclasses.replace(spec, rounding=0)
            data = task_data(spec.task, spec.task_options, 0)
            with torch.random.fork_rng(devices=[]):
                self.nets[key] = init_model(plain, data, "cpu", seed)
        return self.nets[key]

    def copied(self, spec, seed: int | None = None):
        """A copy of `network(spec, seed)`, for a caller that trains or converts it."""
        return copy.deepcopy(self.network(spec, seed))


# within `once()`: the networks built so far
_shared: Built | None = None


@contextlib.contextmanager
def once() -> Iterator[None]:
    """Within it, `shared()` is one cache: every network the checks and estimates read is built
    once. Nested uses share the outermost one's."""
    global _shared
    outer = _shared
    if outer is None:
        _shared = Built()
    try:
        yield
    finally:
        _shared = outer


def shared() -> Built:
    """The cache of the `once()` around the caller, else a new one for the caller to keep."""
    return _shared if _shared is not None else Built()

"""A spec's network and the data it fits: the task's data made from its options and seed (and
cached), the network the spec describes shaped for that data, initialized by a seed with its
unused parameters frozen, and under another rounding moved by its last bit. A trial
(`engine.trial`), a fit's cost (`plan`, `timing`) and `blocklab bench` build theirs here.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from blocklab.models import Net
from blocklab.specs import TrialSpec
from blocklab.tasks import TaskData, make_task


def task_data(task: str, options: dict[str, Any], seed: int) -> TaskData:
    """A task's data made from its options and seed, cached: trials and shape checks that share
    a task make it once."""
    return _cached_data(task, json.dumps(options, sort_keys=True), seed)


@functools.lru_cache(maxsize=4)
def _cached_data(task: str, key: str, seed: int) -> TaskData:
    # the options as canonical JSON: the one cache key, hashable, equal for equal options
    return make_task(task, **json.loads(key)).make(seed)


def build_model(spec: TrialSpec, data: TaskData) -> Net:
    """The network a spec describes, shaped for the task's data."""
    # sequences embed each position's features; vectors are flattened
    n_in = data.input_shape[-1] if data.sequence else math.prod(data.input_shape)
    return Net(
        spec.arm,
        spec.shape,
        n_in,
        data.n_out,
        seq_len=data.seq_len,
        pooled=data.sequence and not data.per_position,
        bottleneck=data.bottleneck,
        vocab=data.vocab,
    )


def init_model(spec: TrialSpec, data: TaskData, device: str, seed: int) -> Net:
    """The spec's network, initialized by `seed`, its unused parameters frozen; under another
    rounding (`spec.rounding`), every parameter moved by its last bit (`rounded`)."""
    torch.manual_seed(seed)
    model = build_model(spec, data).to(device)
    model.freeze_unused(data.train.x[:2])
    if spec.rounding:
        rounded(model, seed, spec.rounding)
    return model


def rounded(model: nn.Module, seed: int, rounding: int) -> None:
    """Move every parameter of `model` by one unit in its last place, up or down by a sign
    drawn from (`seed`, `rounding`): the least change a float can make, which another
    machine's kernels make to a computation's bits. A fit amplifies it as it amplifies theirs
    (the spread it gives, against real roundings', is in the results log)."""
    state = np.random.SeedSequence([seed, rounding, 0x726F756E64]).generate_state(1)[0]
    g = torch.Generator().manual_seed(int(state))
    with torch.no_grad():
        for p in model.parameters():
            up = torch.rand(p.shape, generator=g) < 0.5  # drawn on the CPU: one draw anywhere
            toward = torch.where(up, math.inf, -math.inf).to(p.device, p.dtype)
            p.copy_(torch.nextafter(p, toward))

"""The measure contract, over small networks of linearized, causal softmax, mixer and per-token
blocks: a measure applies to at least one of them (and refuses the others with a UserError,
never another exception), gives finite plain JSON that the same seed repeats, leaves the model as
it was (weights, dtype, mode), reads given inputs, and refuses unknown options with a hint."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import torch

from blocklab.checks import expect, label
from blocklab.errors import UserError
from blocklab.measures import MEASURES, make_measure
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape

T, D = 4, 3  # sequence length and input width of the contract networks
NETS = {
    "linearized": dict(arm="linearized_attention", norm="none", residual=False),
    "softmax-causal": dict(arm="softmax_attention(causal=true)", norm="layer", residual=True),
    "mixer": dict(arm="mixer", norm="rms", residual=True),
    "per-token": dict(arm="3", norm="none", residual=False),
}


def registry():
    return MEASURES


def net(kind: str, depth: int = 2, width: int = 6, seed: int = 0) -> Net:
    spec = NETS[kind]
    torch.manual_seed(seed)
    arm = parse_arm(spec["arm"])
    return Net(
        arm, NetShape(depth, width, norm=spec["norm"], residual=spec["residual"]), D, 2, seq_len=T
    )


class Case:
    """A measure with one of its `examples`; its result on each contract network kept."""

    def __init__(self, name: str, example: dict[str, Any]):
        self.name, self.example = name, example
        self._measured: dict[str, Any] = {}

    def make(self, **extra):
        return make_measure(self.name, **self.example, **extra)

    def measured(self, kind: str, fresh: bool = False):
        """The result on a contract network at seed 3, or None where the measure refuses it: a
        measure defined for some networks only says so with a UserError."""
        if fresh or kind not in self._measured:
            try:
                result = self.make().measure(net(kind), T, D, seed=3)
            except UserError:
                result = None
            if fresh:
                return result
            self._measured[kind] = result
        return self._measured[kind]

    def accepted(self) -> list[str]:
        return [kind for kind in NETS if self.measured(kind) is not None]

    def __str__(self) -> str:
        return label(self.name, self.example)


def cases(names: list[str] | None = None) -> list[Case]:
    names = MEASURES.names() if names is None else names
    return [Case(name, dict(kw)) for name in names for kw in MEASURES.get(name).examples]


def applies(case: Case) -> None:
    expect(case.accepted(), f"refuses every contract network ({', '.join(NETS)})")


def results(case: Case) -> None:
    for kind in NETS:
        first, again = case.measured(kind), case.measured(kind, fresh=True)
        expect(first == again, f"{kind}: the same seed gave another result")
        if first is None:
            continue
        expect(json.loads(json.dumps(first)) == first, f"{kind}: the result is not plain JSON")
        value = first.get("value")
        number = isinstance(value, int | float) and not isinstance(value, bool)
        expect(number and math.isfinite(value), f"{kind}: 'value' is {value!r}, not a number")


def untouched(case: Case) -> None:
    kinds = case.accepted()
    expect(kinds, "refuses every contract network")
    model = net(kinds[0]).train()
    before = copy.deepcopy(model.state_dict())
    case.make().measure(model, T, D, seed=0)
    expect(model.training, "the model was left in eval mode")
    for key, value in model.state_dict().items():
        expect(value.dtype == torch.float32, f"{key} was left as {value.dtype}")
        expect(torch.equal(value, before[key]), f"{key} was changed")


def inputs(case: Case) -> None:
    kinds = case.accepted()
    expect(kinds, "refuses every contract network")
    x = torch.randn(7, T, D, generator=torch.Generator().manual_seed(0))  # (B, T, D)
    out = case.make().measure(net(kinds[-1]), T, D, seed=0, inputs=x)
    expect(math.isfinite(out["value"]), "given inputs gave a non-finite value")


def options(case: Case) -> None:
    try:
        make_measure(case.name, no_such_option=1)
    except UserError as exc:
        expect("unknown measure" in str(exc), f"an unknown option fails with {exc}")
    else:
        raise AssertionError("unknown option 'no_such_option' was accepted")


def name(case: Case) -> None:
    got = getattr(MEASURES.get(case.name), "name", None)
    expect(got == case.name, f"registered as {case.name!r} but names itself {got!r}")


CHECKS = {
    "applies": applies,
    "results": results,
    "untouched": untouched,
    "inputs": inputs,
    "options": options,
    "name": name,
}

"""The CPU's stand-in for a GPU's kernel launches (benchmarks/ops_per_step.py): one stacked
ensemble training step dispatches as many operators at 1, 4 and 16 members, and a loop over the
members would show."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from blocklab.fitting.stacked_adamw import StackedAdamW

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ops_per_step.py"


def _load():
    spec = importlib.util.spec_from_file_location("ops_per_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dispatched(bench, members: int, rates: int = 1) -> int:
    return bench.step_ops("teacher", members, rates)["dispatched"]


def test_a_step_dispatches_as_many_operators_at_1_4_and_16_members():
    bench = _load()
    counts = [_dispatched(bench, m) for m in (1, 4, 16)]
    assert counts[0] == counts[1] == counts[2], counts
    # the fused AdamW kernel takes one rate: one more call per rate, not per member
    assert _dispatched(bench, 4, rates=2) == counts[0] + 1


class _PerMember(StackedAdamW):
    """The same step with the gradients zeroed one member at a time: a loop over the members."""

    def zero_grad(self) -> None:
        for e in range(self.coef.shape[0]):
            torch._foreach_zero_([g[e] for g in self.grads])


def test_a_loop_over_the_members_fails_the_check(monkeypatch):
    bench = _load()
    monkeypatch.setattr(bench, "StackedAdamW", _PerMember)
    assert _dispatched(bench, 1) < _dispatched(bench, 4)

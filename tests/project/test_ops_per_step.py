"""The CPU's stand-in for a GPU's kernel launches (benchmarks/ops_per_step.py): one stacked
ensemble training step dispatches as many operators at 1, 4 and 16 members, and a loop over the
members would show."""

from __future__ import annotations

import pytest
import torch

from _scripts import load
from blocklab.fitting.stacked_adamw import PATHS, StackedAdamW


def _load():
    return load("ops_per_step")


def _dispatched(bench, members: int, rates: int = 1, path: str = "skip") -> int:
    return bench.step_ops("teacher", members, rates, path)["dispatched"]


@pytest.mark.parametrize("path", PATHS)
def test_a_step_dispatches_as_many_operators_at_1_4_and_16_members(path):
    bench = _load()
    counts = [_dispatched(bench, m, path=path) for m in (1, 4, 16)]
    assert counts[0] == counts[1] == counts[2], counts
    # the fused AdamW kernel takes one rate: one more call per rate, not per member
    assert _dispatched(bench, 4, rates=2, path=path) == counts[0] + 1


class _PerMember(StackedAdamW):
    """The same step with the gradients zeroed one member at a time: a loop over the members."""

    def zero_grad(self) -> None:
        for e in range(self.coef.shape[0]):
            torch._foreach_zero_([g[e] for g in self.grads])


@pytest.mark.parametrize("path", PATHS)
def test_a_loop_over_the_members_fails_the_check(monkeypatch, path):
    bench = _load()
    monkeypatch.setattr(bench, "StackedAdamW", _PerMember)
    assert _dispatched(bench, 1, path=path) < _dispatched(bench, 4, path=path)

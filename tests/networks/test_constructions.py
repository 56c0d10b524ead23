"""Seed 002's constructions: registered blocks with explicit weights solve Match2 / Match3 exactly
at a width that does not grow with N or M, and fail when the pieces the proofs need are removed."""

from __future__ import annotations

import pytest
import torch

from blocklab import constructions
from blocklab.blocks import BLOCKS
from blocklab.errors import UserError
from blocklab.tasks import make_task
from blocklab.tasks.base import IGNORE

WIDTH = {
    ("match2", "softmax_attention"): 3,
    ("match2", "tensor_attention"): 3,
    ("match3", "tensor_attention"): 5,
}


@pytest.mark.parametrize(("task", "block"), sorted(constructions.CONSTRUCTIONS))
@pytest.mark.parametrize(
    ("seq_len", "modulus"), [(4, None), (6, None), (12, None), (6, 5), (8, 64)]
)
def test_constructions_solve_fresh_data_at_a_fixed_width(task, block, seq_len, modulus):
    result = constructions.evaluate(task, block, seq_len, modulus, n_test=256, seed=3)
    assert result["accuracy"] == 1.0
    assert result["width"] == WIDTH[task, block]  # O(1): the same for every N and M
    assert (result["task"], result["block"], result["seq_len"]) == (task, block, seq_len)
    if modulus is not None:
        assert result["modulus"] == modulus


def _data(task: str, seq_len: int = 6):
    return make_task(task, seq_len=seq_len, n_train=1, n_val=1, n_test=512).make(1)


def _accuracy(net, data) -> float:
    with torch.no_grad():
        out = net(data.test.x)[..., 0]  # (n, N + 1)
    scored = data.test.y != IGNORE
    return ((out > 0.5).long() == data.test.y)[scored].double().mean().item()


@pytest.mark.parametrize(("task", "block"), sorted(constructions.CONSTRUCTIONS))
def test_a_construction_is_a_registered_block_and_needs_its_stop_key(task, block):
    data = _data(task)
    M = data.info["modulus"]
    net = constructions.CONSTRUCTIONS[task, block](M, 6)
    assert type(net) is BLOCKS.get(block)
    assert _accuracy(net, data) == 1.0
    # without STOP's key a query with no match spreads its weight over residues, whose values
    # are all 1: it reads as a match, and the negatives are lost
    with torch.no_grad():
        for name in ("k", "k2") if block == "tensor_attention" else ("k",):
            getattr(net, name).weight[:, M] = 0
    assert _accuracy(net, data) < 0.75


@pytest.mark.parametrize(("task", "block"), sorted(constructions.CONSTRUCTIONS))
def test_a_construction_needs_its_temperature(task, block, monkeypatch):
    data = _data(task, seq_len=8)
    M = data.info["modulus"]
    monkeypatch.setattr(constructions, "SAFETY", 0.01)
    assert _accuracy(constructions.CONSTRUCTIONS[task, block](M, 8), data) < 0.9


def test_no_construction_for_match3_with_standard_attention():
    with pytest.raises(UserError, match="no construction for match3 with softmax_attention"):
        constructions.evaluate("match3", "softmax_attention", 6)
    with pytest.raises(UserError, match="M >= 3"):
        constructions.match2_standard(2, 6)

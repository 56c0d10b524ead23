"""Seed 002's constructions, executed: registered attention blocks with explicit weights that
compute Match2 and Match3 (Sanford, Hsu and Telgarsky 2023, part 2), scored on fresh data.

A construction's input is the match task's own: one-hot residues x in Z_M and the STOP token,
(B, N + 1, M + 1). Every "input MLP" of the proofs is then a linear map of the one-hot, so a
block's projections hold it. One head; its dimension m is the construction's width. With
theta = 2 pi / M and a temperature c:

- Match2, standard (softmax) attention, m = 3 (result #1):
  q(x) = c (cos theta x, sin theta x, gamma), k(x) = (cos theta x, -sin theta x, 0),
  k(STOP) = (0, 0, 1), so <q_i, k_j> = c cos theta (x_i + x_j), which is c exactly when
  x_i + x_j = 0 mod M, and <q_i, k_STOP> = c gamma with gamma = cos(pi / M), between the best
  non-match c cos theta and a match. v(x) = 1, v(STOP) = 0: the output is ~1 when a match exists
  (the weight sits on the matches) and ~0 when none does (it sits on STOP).
- Match3, tensor (third-order) attention, m = 5: cos(a + b + d) = Re(e^{ia} e^{ib} e^{id}) is a
  sum of four products of one function of each token, one per coordinate c of
  A_ijl = sum_c q_ic k_jc k2_lc:
  (cos a)(cos b)(cos d) - (cos a)(sin b)(sin d) - (sin a)(cos b)(sin d) - (sin a)(sin b)(cos d).
  A fifth coordinate gives the pair (STOP, STOP) the score c gamma; a pair with one STOP scores 0.
  v = v2 = 1 on residues and 0 on STOP, so only residue pairs carry value.
- Match2, tensor attention, m = 3: the same with k2 = 1 on residues, A_ijl = c cos theta(x_i + x_j)
  for every residue l: what standard attention does, inside the larger block.

Standard attention has no construction for Match3: the seed proves m H = Omega(N / log N).
The temperature makes the softmax's misplaced weight small against the margin between a match and
STOP, over at most (N + 1)^2 keys; gamma needs cos(pi / M) > 0, so M >= 3.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from blocklab.blocks import Block, make_block
from blocklab.errors import UserError
from blocklab.tasks import make_task
from blocklab.tasks.base import IGNORE

# how many times the temperature exceeds the least that separates the scores, for float32 slack
SAFETY = 4.0


def temperature(modulus: int, seq_len: int) -> float:
    """c with (N + 1)^2 exp(-c * margin) <= 1/4: the weight off the top scores stays under 1/4,
    the margin being the smaller of 1 - gamma and gamma - cos theta."""
    gamma = math.cos(math.pi / modulus)
    margin = min(1 - gamma, gamma - math.cos(2 * math.pi / modulus))
    return SAFETY * math.log(4 * (seq_len + 1) ** 2) / margin


def _angles(modulus: int) -> tuple[torch.Tensor, torch.Tensor]:
    theta = 2 * math.pi * torch.arange(modulus, dtype=torch.float64) / modulus  # (M,)
    return theta.cos(), theta.sin()


def _set(block: Block, name: str, rows: list[torch.Tensor], modulus: int) -> None:
    """Projection `name` maps residue x to (rows[0][x], rows[1][x], ...) and STOP to the last
    entry of each row: weight (m, M + 1) in nn.Linear's (out, in) layout."""
    weight = torch.stack([r.to(torch.float64) for r in rows])  # (m, M + 1)
    assert weight.shape[1] == modulus + 1
    getattr(block, name).weight.data.copy_(weight)


def _with_stop(values: torch.Tensor, stop: float) -> torch.Tensor:
    return torch.cat([values, torch.tensor([stop], dtype=values.dtype)])  # (M + 1,)


def _output(block: Block, m: int) -> None:
    """Wo reads the first value coordinate: the block's output is the match indicator (B, T, 1)."""
    block.o.weight.data.copy_(torch.eye(1, m))


def _check(modulus: int) -> None:
    if modulus < 3:
        raise UserError(f"the constructions need a modulus M >= 3, got {modulus}")


def match2_standard(modulus: int, seq_len: int) -> Block:
    """Softmax attention (head dimension 3) whose output at a residue is ~1 iff it has a match."""
    _check(modulus)
    block = make_block("softmax_attention", modulus + 1, 1, head_dim=3)
    cos, sin = _angles(modulus)
    zero, one = torch.zeros(modulus), torch.ones(modulus)
    gamma, c = math.cos(math.pi / modulus), temperature(modulus, seq_len) / block.scale
    _set(
        block,
        "q",
        [_with_stop(c * cos, 0), _with_stop(c * sin, 0), _with_stop(c * gamma * one, 0)],
        modulus,
    )
    _set(block, "k", [_with_stop(cos, 0), _with_stop(-sin, 0), _with_stop(zero, 1)], modulus)
    _set(block, "v", [_with_stop(one, 0), _with_stop(zero, 0), _with_stop(zero, 0)], modulus)
    _output(block, 3)
    return block


def _tensor(modulus: int, seq_len: int, order: int) -> Block:
    _check(modulus)
    cos, sin = _angles(modulus)
    zero, one = torch.zeros(modulus), torch.ones(modulus)
    gamma = math.cos(math.pi / modulus)
    if order == 3:  # (q, k, k2) per coordinate: the expansion of cos(a + b + d)
        terms = [(cos, cos, cos), (-cos, sin, sin), (-sin, cos, sin), (-sin, sin, cos)]
    else:  # cos(a + b) = cos a cos b - sin a sin b, whatever the third token
        terms = [(cos, cos, one), (-sin, sin, one)]
    m = len(terms) + 1
    block = make_block("tensor_attention", modulus + 1, 1, head_dim=m)
    c = temperature(modulus, seq_len) / block.scale
    # the last coordinate scores (STOP, STOP) at c gamma; residues leave it 0
    q = [_with_stop(c * t[0], 0) for t in terms] + [_with_stop(c * gamma * one, 0)]
    k = [_with_stop(t[1], 0) for t in terms] + [_with_stop(zero, 1)]
    k2 = [_with_stop(t[2], 0) for t in terms] + [_with_stop(zero, 1)]
    value = [_with_stop(one, 0)] + [_with_stop(zero, 0)] * (m - 1)
    for name, rows in (("q", q), ("k", k), ("k2", k2), ("v", value), ("v2", value)):
        _set(block, name, rows, modulus)
    _output(block, m)
    return block


def match3_tensor(modulus: int, seq_len: int) -> Block:
    """Tensor attention (head dimension 5) whose output at a residue is ~1 iff it has a match."""
    return _tensor(modulus, seq_len, 3)


def match2_tensor(modulus: int, seq_len: int) -> Block:
    """Tensor attention (head dimension 3) computing Match2 as standard attention does."""
    return _tensor(modulus, seq_len, 2)


# (task, block) -> the construction; standard attention has none for Match3
CONSTRUCTIONS: dict[tuple[str, str], Callable[[int, int], Block]] = {
    ("match2", "softmax_attention"): match2_standard,
    ("match2", "tensor_attention"): match2_tensor,
    ("match3", "tensor_attention"): match3_tensor,
}


def evaluate(
    task: str,
    block: str,
    seq_len: int,
    modulus: int | None = None,
    n_test: int = 2048,
    seed: int = 0,
) -> dict[str, Any]:
    """The construction's accuracy on freshly generated test data of the task (STOP on): a
    residue is predicted positive when the block's output exceeds 1/2."""
    if (task, block) not in CONSTRUCTIONS:
        have = ", ".join(f"{t} with {b}" for t, b in CONSTRUCTIONS)
        raise UserError(f"no construction for {task} with {block} (there are: {have})")
    t = make_task(task, seq_len=seq_len, modulus=modulus, n_train=1, n_val=1, n_test=n_test)
    data = t.make(seed)
    M = data.info["modulus"]
    net = CONSTRUCTIONS[task, block](M, seq_len)
    with torch.no_grad():
        out = net(data.test.x)[..., 0]  # (n, N + 1)
    scored = data.test.y != IGNORE
    hits = ((out > 0.5).long() == data.test.y)[scored]
    return {
        "task": task,
        "block": block,
        "width": net.head_dim,
        "seq_len": seq_len,
        "modulus": M,
        "accuracy": hits.double().mean().item(),
        "n_test": n_test,
    }

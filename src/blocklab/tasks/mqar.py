"""Multi-query associative recall (zoology's MQAR, Arora et al. 2023).

Vocabulary, with H = V // 2: keys 1..H-1, values H..V-1; 0 is the filler token. With
C = 2 * num_kv_pairs, positions 0..C-1 hold the context k1 v1 k2 v2 ...: keys distinct, values
distinct, each set drawn uniformly without replacement. Positions C..T-1 are the query region:
each key appears once more, the i-th key at region offset 2 (g_i - 1), where the gaps g_i are drawn
from 1..space (space = (T - C) / 2) without replacement, one after another in key order, with
probabilities proportional to g^(power_a - 1) (zoology's power law: short gaps likelier). The
other region positions hold 0, or with `random_non_queries` tokens uniform over the whole
vocabulary (as zoology, which draws them after placing the queries, so none lands on a query).

Labels (aligned to the inputs): at a query's position the label is its key's value; every other
position is IGNORE, including a random filler that happens to equal a context key. A causal model
decides each label from the context before it.

Requirements, exact for this construction: seq_len even, 4 * num_kv_pairs <= seq_len (space >=
num_kv_pairs gaps), and H - 1 >= num_kv_pairs keys (values are then plentiful too). zoology also
asserts vocab > seq_len, which the construction does not need; it is not required here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, _tokens
from blocklab.tasks._tokens import TokenTask
from blocklab.tasks.base import IGNORE, TaskData


def lookup(x: torch.Tensor, n_pairs: int) -> torch.Tensor:
    """The oracle's answer per position (n, T): after the context, a token equal to a context key
    answers that key's value; IGNORE elsewhere."""
    C = 2 * n_pairs
    keys, values = x[:, 0:C:2], x[:, 1:C:2]  # (n, k) each
    match = x[:, :, None] == keys[:, None, :]  # (n, T, k)
    found = match.any(-1) & (torch.arange(x.shape[1]) >= C)  # (n, T)
    which = match.int().argmax(-1)  # (n, T) context keys are distinct: one match at most
    return torch.where(found, values.gather(1, which), IGNORE)


@TASKS.register
class Mqar(TokenTask):
    """A context of key-value pairs, then each key queried once at a power-law distance."""

    @dataclass(frozen=True)
    class Options:
        seq_len: int = 64  # T, even
        vocab: int = 128  # V
        num_kv_pairs: int = 4
        power_a: float = 0.01  # gap g drawn with probability proportional to g^(power_a - 1)
        random_non_queries: bool = True  # fill the non-query region with random tokens, not 0
        n_train: int = 4096
        n_val: int = 256
        n_test: int = 512

        def __post_init__(self):
            _tokens.check_sizes(self)
            _tokens.at_least(self, 1, "num_kv_pairs")
            if not isinstance(self.random_non_queries, bool):
                raise UserError(
                    f"random_non_queries must be true or false, got {self.random_non_queries!r}"
                )
            if self.seq_len % 2 or self.seq_len < 4 * self.num_kv_pairs:
                raise UserError(
                    f"seq_len must be even and >= 4 * num_kv_pairs = {4 * self.num_kv_pairs}, "
                    f"got {self.seq_len}"
                )
            if self.vocab // 2 - 1 < self.num_kv_pairs:
                raise UserError(
                    f"vocab must be >= {2 * self.num_kv_pairs + 2} for {self.num_kv_pairs} "
                    f"distinct keys in 1..vocab // 2 - 1, got {self.vocab}"
                )
            if not self.power_a > 0:
                raise UserError(f"power_a must be > 0, got {self.power_a}")

    def draw(self, n: int, g: torch.Generator, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.options
        T, V, k = o.seq_len, o.vocab, o.num_kv_pairs
        H, C = V // 2, 2 * k
        space = (T - C) // 2
        keys = 1 + torch.rand(n, H - 1, generator=g).argsort(1)[:, :k]  # (n, k)
        values = H + torch.rand(n, V - H, generator=g).argsort(1)[:, :k]  # (n, k)
        # Gumbel top-k: k gaps without replacement, in the order successive draws would give
        log_p = (o.power_a - 1) * torch.arange(1, space + 1, dtype=torch.float64).log()  # (space,)
        u = torch.rand(n, space, generator=g, dtype=torch.float64).clamp_min(1e-300)
        gaps = (log_p - (-u.log()).log()).topk(k, dim=1).indices  # (n, k): g - 1
        where = C + 2 * gaps  # (n, k) query positions
        if o.random_non_queries:
            x = torch.randint(V, (n, T), generator=g)  # (n, T)
        else:
            x = torch.zeros(n, T, dtype=torch.int64)
        x[:, 0:C:2], x[:, 1:C:2] = keys, values
        x.scatter_(1, where, keys)
        y = torch.full((n, T), IGNORE).scatter_(1, where, values)  # (n, T)
        return x, y

    def make(self, seed: int) -> TaskData:
        o = self.options
        H = o.vocab // 2

        def oracle(x: torch.Tensor) -> torch.Tensor:
            return _tokens.one_hot(lookup(x, o.num_kv_pairs), o.vocab)  # (n, T, V)

        info = {
            "keys": [1, H - 1],
            "values": [H, o.vocab - 1],
            "filler": "random" if o.random_non_queries else 0,
            "context": 2 * o.num_kv_pairs,
            "num_kv_pairs": o.num_kv_pairs,
            "power_a": o.power_a,
        }
        return _tokens.token_data(self, self.draw, seed, o.vocab, oracle, info)

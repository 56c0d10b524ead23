"""Memorization (mad-lab, Poli et al. 2024): recall a fixed key-value map stored in the weights.

Vocabulary: INSERT = V - 1; of the m = V - 1 others, ids 0..m//2 - 1 are keys and m//2..m-1
values. The map is a random function from keys to values (each key's value uniform and
independent, so two keys may share a value and some values go unused), drawn from a generator
seeded by `map_seed` alone: the same for every trial seed and split. A sequence is T/2 pairs
(key, INSERT), keys uniform; the trial seed chooses which keys, in which order.

Labels (aligned to the inputs): at an INSERT position (odd) the label is the map's value of the
key just before it; key positions (even) are IGNORE. A causal model decides each label from the
key before it; the sequence holds no value, so the map must be learned.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, _tokens
from blocklab.tasks._tokens import TokenTask
from blocklab.tasks.base import IGNORE, TaskData


@TASKS.register
class Memorization(TokenTask):
    """(key, INSERT) pairs; at INSERT the value a fixed map gives the key."""

    @dataclass(frozen=True)
    class Options:
        seq_len: int = 16  # T, even: T/2 pairs
        vocab: int = 64  # V: 31 keys, 32 values, INSERT
        map_seed: int = 0  # seeds the map, which the trial seed leaves alone
        n_train: int = 4096
        n_val: int = 256
        n_test: int = 512

        def __post_init__(self):
            _tokens.check_sizes(self)
            if self.seq_len < 2 or self.seq_len % 2:
                raise UserError(f"seq_len must be even and >= 2 (a pair), got {self.seq_len}")
            if self.vocab < 5:
                raise UserError(
                    f"vocab must be >= 5 (two keys, two values, INSERT), got {self.vocab}"
                )

    def ids(self) -> tuple[int, int]:
        """(keys K, INSERT): keys 0..K-1, values K..V-2."""
        V = self.options.vocab
        return (V - 1) // 2, V - 1

    def key_map(self) -> torch.Tensor:
        """The value of each key (K,), from `map_seed` alone."""
        K, insert = self.ids()
        g = torch.Generator().manual_seed(self.options.map_seed)
        return torch.randint(K, insert, (K,), generator=g)

    def draw(self, n: int, g: torch.Generator, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        K, insert = self.ids()
        P = self.options.seq_len // 2
        keys = torch.randint(K, (n, P), generator=g)  # (n, P)
        x = torch.stack([keys, torch.full_like(keys, insert)], -1).flatten(1)  # (n, T)
        labels = self.key_map()[keys]  # (n, P)
        y = torch.stack([torch.full_like(keys, IGNORE), labels], -1).flatten(1)  # (n, T)
        return x, y

    def make(self, seed: int) -> TaskData:
        o = self.options
        K, insert = self.ids()
        table = self.key_map()  # (K,)

        def oracle(x: torch.Tensor) -> torch.Tensor:
            before = torch.cat([torch.full_like(x[:, :1], insert), x[:, :-1]], 1)  # (n, T)
            due = (x == insert) & (before < K)  # (n, T) an INSERT right after a key
            pred = torch.where(due, table[before.clamp_max(K - 1)], IGNORE)
            return _tokens.one_hot(pred, o.vocab)  # (n, T, V)

        info = {
            "keys": [0, K - 1],
            "values": [K, insert - 1],
            "insert": insert,
            "map_seed": o.map_seed,
            "map": table.tolist(),
            "distinct_values": int(table.unique().numel()),
        }
        return _tokens.token_data(self, self.draw, seed, o.vocab, oracle, info)

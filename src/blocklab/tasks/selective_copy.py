"""Selective copying (mad-lab, Poli et al. 2024; Gu and Dao's Mamba task).

Vocabulary: data tokens 0..V-3, BLANK = V-2, COPY = V-1. With R = T - n_copy - 1, positions
0..R-1 hold n_copy data tokens (each uniform over the data tokens) at distinct positions drawn
uniformly, BLANK elsewhere; position R holds COPY; the last n_copy positions hold BLANK.

Labels (aligned to the inputs): at the j-th BLANK after COPY (position R + 1 + j) the label is the
j-th data token of the sequence, in order; every other position is IGNORE. A causal model decides
each label from the tokens up to it: the data tokens precede COPY, and the count of BLANKs since
COPY says which one is due.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, _tokens
from blocklab.tasks._tokens import TokenTask
from blocklab.tasks.base import IGNORE, TaskData


def recopy(x: torch.Tensor, blank: int, copy: int) -> torch.Tensor:
    """The oracle's answer per position (n, T): after the first COPY, the data tokens before it in
    order, one per position; IGNORE elsewhere."""
    n, T = x.shape
    pos = torch.arange(T)
    at = torch.where(x == copy, pos, T).min(1, keepdim=True).values  # (n, 1) the first COPY
    data = (x != blank) & (pos < at)  # (n, T)
    # the data positions first, each group in order: a sort key that is stable by construction
    order = torch.where(data, pos, pos + T).argsort(1)  # (n, T)
    j = (pos - at - 1).clamp(0, T - 1)  # (n, T) which data token a position after COPY recalls
    due = (pos > at) & (j < data.sum(1, keepdim=True))  # (n, T)
    return torch.where(due, x.gather(1, order.gather(1, j)), IGNORE)


@TASKS.register
class SelectiveCopy(TokenTask):
    """Copy the n_copy data tokens scattered among BLANKs, in order, after a COPY token."""

    @dataclass(frozen=True)
    class Options:
        seq_len: int = 32  # T
        vocab: int = 16  # V: 14 data tokens, BLANK, COPY
        n_copy: int = 4  # data tokens to copy
        n_train: int = 4096
        n_val: int = 256
        n_test: int = 512

        def __post_init__(self):
            _tokens.check_sizes(self)
            _tokens.at_least(self, 1, "n_copy")
            if self.vocab < 4:
                raise UserError(
                    f"vocab must be >= 4 (two data tokens, BLANK, COPY), got {self.vocab}"
                )
            if self.seq_len <= 2 * self.n_copy + 1:
                raise UserError(
                    f"seq_len must be > 2 * n_copy + 1 = {2 * self.n_copy + 1} (a blank among the "
                    f"data, COPY, n_copy answers), got {self.seq_len}"
                )

    def draw(self, n: int, g: torch.Generator, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.options
        T, k, V = o.seq_len, o.n_copy, o.vocab
        R = T - k - 1  # the region that holds the data
        places = torch.rand(n, R, generator=g).argsort(1)[:, :k].sort(1).values  # (n, k)
        tokens = torch.randint(V - 2, (n, k), generator=g)  # (n, k)
        x = torch.full((n, T), V - 2)  # BLANK
        x.scatter_(1, places, tokens)
        x[:, R] = V - 1  # COPY
        y = torch.full((n, T), IGNORE)
        y[:, R + 1 :] = tokens
        return x, y

    def make(self, seed: int) -> TaskData:
        o = self.options
        blank, copy = o.vocab - 2, o.vocab - 1

        def oracle(x: torch.Tensor) -> torch.Tensor:
            return _tokens.one_hot(recopy(x, blank, copy), o.vocab)  # (n, T, V)

        info = {
            "data_tokens": [0, o.vocab - 3],
            "blank": blank,
            "copy": copy,
            "copy_position": o.seq_len - o.n_copy - 1,
            "n_copy": o.n_copy,
        }
        return _tokens.token_data(self, self.draw, seed, o.vocab, oracle, info)

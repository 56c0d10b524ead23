"""In-context recall, multi-query (mad-lab's recall task, Poli et al. 2024).

Vocabulary: the last `noise_vocab` ids are noise tokens; of the m = vocab - noise_vocab others,
ids 0..m//2 - 1 are keys and m//2..m-1 values (the first and second half). A sequence is T/2
key-value pairs k v k v ...: each key uniform over the keys; within one sequence a key has one
value, uniform over the values, drawn for the sequence and reused at each of its appearances.

Labels are aligned to the inputs: the label at a key's position (even positions) is its value
when the same key occurred at an earlier key position of the sequence, IGNORE at its first
appearance; value positions (odd) are IGNORE. A causal model decides every label from the tokens
up to it: the value follows the key's earlier occurrence.

Noise (`frac_noise` > 0): each pair slot independently becomes two noise tokens (each uniform over
the noise ids) with probability frac_noise; both positions are IGNORE, and a noise token is never
a key, so a slot turned to noise holds no key-value binding. Noise replaces whole pairs (a choice
made here), so keys stay at even positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, _tokens
from blocklab.tasks._tokens import TokenTask
from blocklab.tasks.base import IGNORE, TaskData


def recall(x: torch.Tensor, n_keys: int) -> torch.Tensor:
    """The oracle's answer per position (n, T): at a key (even position) that occurred at an earlier
    even position, the token after that occurrence; elsewhere IGNORE."""
    keys, values = x[:, 0::2], x[:, 1::2]  # (n, P) each
    P = keys.shape[1]
    earlier = torch.ones(P, P, dtype=torch.bool).tril(-1)  # [i, j]: j < i
    is_key = keys < n_keys  # (n, P)
    same = (keys[:, :, None] == keys[:, None, :]) & is_key[:, None, :] & earlier  # (n, P, P)
    # any earlier occurrence names the same value: take the latest
    latest = (same * torch.arange(1, P + 1)).argmax(-1)  # (n, P)
    found = is_key & same.any(-1)  # (n, P)
    answer = torch.where(found, values.gather(1, latest), IGNORE)  # (n, P)
    return torch.stack([answer, torch.full_like(answer, IGNORE)], -1).flatten(1)  # (n, T)


@TASKS.register
class Icr(TokenTask):
    """Multi-query in-context recall: T/2 key-value pairs, each repeated key labelled with its
    value at the key's position."""

    @dataclass(frozen=True)
    class Options:
        seq_len: int = 32  # T, even: T/2 pairs
        vocab: int = 16  # V, noise ids included
        noise_vocab: int = 0  # noise ids, the last of the vocabulary
        frac_noise: float = 0.0  # probability that a pair slot is noise
        n_train: int = 4096
        n_val: int = 256
        n_test: int = 512

        def __post_init__(self):
            _tokens.check_sizes(self)
            _tokens.check_noise(self.frac_noise, self.noise_vocab)
            if self.seq_len < 4 or self.seq_len % 2:
                raise UserError(f"seq_len must be even and >= 4 (two pairs), got {self.seq_len}")
            if self.vocab - self.noise_vocab < 4:
                raise UserError(
                    f"vocab - noise_vocab must be >= 4 (two keys and two values), got "
                    f"{self.vocab} - {self.noise_vocab}"
                )

    def ids(self) -> tuple[int, int]:
        """(number of keys, number of keys and values): keys 0..K-1, values K..m-1, noise m..V-1."""
        m = self.options.vocab - self.options.noise_vocab
        return m // 2, m

    def draw(self, n: int, g: torch.Generator, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.options
        K, m = self.ids()
        P = o.seq_len // 2
        keys = torch.randint(K, (n, P), generator=g)  # (n, P)
        table = torch.randint(K, m, (n, K), generator=g)  # (n, K): each key's value, per sequence
        values = table.gather(1, keys)  # (n, P)
        clean = torch.ones(n, P, dtype=torch.bool)  # (n, P) slots that hold a pair
        if o.frac_noise > 0:
            clean = torch.rand(n, P, generator=g) >= o.frac_noise
        earlier = torch.ones(P, P, dtype=torch.bool).tril(-1)  # [i, j]: j < i
        seen = ((keys[:, :, None] == keys[:, None, :]) & clean[:, None, :] & earlier).any(-1)
        label = torch.where(clean & seen, values, IGNORE)  # (n, P)
        x = torch.stack([keys, values], -1)  # (n, P, 2)
        if o.frac_noise > 0:
            noise = torch.randint(m, o.vocab, (n, P, 2), generator=g)  # (n, P, 2)
            x = torch.where(clean[..., None], x, noise)
        y = torch.stack([label, torch.full_like(label, IGNORE)], -1)  # (n, P, 2)
        return x.flatten(1), y.flatten(1)  # (n, T) each

    def make(self, seed: int) -> TaskData:
        o = self.options
        K, m = self.ids()

        def oracle(x: torch.Tensor) -> torch.Tensor:
            return _tokens.one_hot(recall(x, K), o.vocab)  # (n, T, V)

        info = {
            "keys": [0, K - 1],
            "values": [K, m - 1],
            "noise": [m, o.vocab - 1] if o.noise_vocab else None,
            "frac_noise": o.frac_noise,
        }
        data = _tokens.token_data(self, self.draw, seed, o.vocab, oracle, info)
        x = data.train.x
        data.info["noise_share"] = float((x >= m).double().mean())  # of positions, train split
        return data

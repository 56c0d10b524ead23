"""Compression (mad-lab, Poli et al. 2024): recall the whole sequence from one vector.

Vocabulary: COMPRESS = V - 1; the `noise_vocab` ids before it are noise tokens; data tokens are
0..V - noise_vocab - 2. A sequence is T - 1 data tokens (each uniform) and then COMPRESS. With
noise (frac_noise > 0), each of the first T - 1 positions independently holds a noise token
(uniform over the noise ids) instead, with probability frac_noise.

Labels (aligned to the inputs): at position i < T - 1 the label is x_i when x_i is a data token,
IGNORE at a noise token and at COMPRESS. Read causally the labels are trivial (the label at i is
the token at i); the task lies in the readout: the data set `bottleneck`, so the network reads
every position's output from the state at the last position (COMPRESS) alone, by one linear map,
and its layers must compress the sequence into that one vector. mad-lab decodes the vector with a
small MLP; the decoder here is linear, so the vector must hold the tokens linearly decodable.

The oracle maps inputs to logits directly; it is not bound by the bottleneck.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, _tokens
from blocklab.tasks._tokens import TokenTask
from blocklab.tasks.base import IGNORE, TaskData


@TASKS.register
class Compression(TokenTask):
    """Reconstruct T - 1 uniform tokens from the network's state at the final COMPRESS token."""

    @dataclass(frozen=True)
    class Options:
        seq_len: int = 8  # T: T - 1 tokens, then COMPRESS
        vocab: int = 16  # V, noise ids and COMPRESS included
        noise_vocab: int = 0  # noise ids, just before COMPRESS
        frac_noise: float = 0.0  # probability that a position holds noise
        n_train: int = 4096
        n_val: int = 256
        n_test: int = 512

        def __post_init__(self):
            _tokens.check_sizes(self)
            _tokens.check_noise(self.frac_noise, self.noise_vocab)
            _tokens.at_least(self, 2, "seq_len")
            if self.vocab - self.noise_vocab < 3:
                raise UserError(
                    f"vocab - noise_vocab must be >= 3 (two data tokens and COMPRESS), got "
                    f"{self.vocab} - {self.noise_vocab}"
                )

    def draw(self, n: int, g: torch.Generator, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.options
        T, V = o.seq_len, o.vocab
        first_noise = V - o.noise_vocab - 1
        x = torch.randint(first_noise, (n, T), generator=g)  # (n, T)
        x[:, -1] = V - 1  # COMPRESS
        y = x.clone()
        y[:, -1] = IGNORE
        if o.frac_noise > 0:
            noisy = torch.rand(n, T, generator=g) < o.frac_noise  # (n, T)
            noisy[:, -1] = False
            x = torch.where(noisy, torch.randint(first_noise, V - 1, (n, T), generator=g), x)
            y[noisy] = IGNORE
        return x, y

    def make(self, seed: int) -> TaskData:
        o = self.options
        first_noise = o.vocab - o.noise_vocab - 1

        def oracle(x: torch.Tensor) -> torch.Tensor:
            data = x < first_noise  # (n, T) COMPRESS and noise tokens are never data
            return _tokens.one_hot(torch.where(data, x, IGNORE), o.vocab)  # (n, T, V)

        info = {
            "data_tokens": [0, first_noise - 1],
            "noise": [first_noise, o.vocab - 2] if o.noise_vocab else None,
            "compress": o.vocab - 1,
            "frac_noise": o.frac_noise,
            "decoder": "linear",
        }
        return _tokens.token_data(self, self.draw, seed, o.vocab, oracle, info, bottleneck=True)

"""Noisy in-context recall (mad-lab's noisy recall, Poli et al. 2024): `icr` with noise on.

The generator, the labels and the token ids are icr's (see `blocklab.tasks.icr`): keys 0..m//2 - 1,
values m//2..m-1 with m = vocab - noise_vocab, noise ids m..vocab-1. Each pair slot is, with
probability frac_noise (here required > 0), two noise tokens, both positions IGNORE; a key's label
(its value) is set only where the key occurred at an earlier slot that is not noise.
"""

from __future__ import annotations

from dataclasses import dataclass

from blocklab.errors import UserError
from blocklab.tasks import TASKS
from blocklab.tasks.icr import Icr


@TASKS.register
class NoisyIcr(Icr):
    """Multi-query in-context recall with a share of the pair slots replaced by noise tokens."""

    @dataclass(frozen=True)
    class Options(Icr.Options):
        vocab: int = 32  # 16 noise ids, 8 keys, 8 values
        noise_vocab: int = 16
        frac_noise: float = 0.2

        def __post_init__(self):
            super().__post_init__()
            if self.frac_noise <= 0:
                raise UserError(
                    f"frac_noise must be > 0 here (icr has none), got {self.frac_noise}"
                )

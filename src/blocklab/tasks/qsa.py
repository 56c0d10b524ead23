"""q-sparse averaging (seed 002, Sanford, Hsu and Telgarsky 2023, part 1).

Position i holds a q-subset y_i of [N] and a vector z_i; the target is qSA(X)_i = (1/q) sum over
j in y_i of z_j. One self-attention unit approximates it iff its embedding dimension is about q
(m = O(d + q log N) suffices, m >= q / log N is needed), while any fully connected network needs
width Omega(N d).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS
from blocklab.tasks.base import Split, Task, TaskData


@TASKS.register
class Qsa(Task):
    """Token features concat(indicator of y_i (N), z_i (d), one-hot of i (N)), F = 2N + d, with
    y_i a uniform q-subset and z_i uniform on the unit sphere; a target vector (d,) per position.

    Scored as in Sanford et al.: an output counts when within eps = 1/(2q) of qSA_i in L2 norm.
    """

    kind = "regression"
    sequence = True
    scored_by_tolerance = True
    default_threshold = 1 / 256  # tolerance^2 / d at the defaults q = 4, d = 4
    small_options: ClassVar[dict] = {"n_train": 256, "n_val": 64, "n_test": 128}

    @dataclass(frozen=True)
    class Options:
        seq_len: int = 16  # N
        q: int = 4  # subset size
        dim: int = 4  # d
        n_train: int = 16384
        n_val: int = 1024
        n_test: int = 2048

        def __post_init__(self):
            if self.seq_len < 2:
                raise UserError(f"seq_len must be >= 2 (so that 1 <= q < N), got {self.seq_len}")
            if not 1 <= self.q < self.seq_len:
                raise UserError(f"need 1 <= q < seq_len = {self.seq_len}, got q = {self.q}")
            for key in ("dim", "n_train", "n_val", "n_test"):
                if getattr(self, key) < 1:
                    raise UserError(f"{key} must be >= 1, got {getattr(self, key)}")

    @property
    def tolerance(self) -> float:
        # Sanford et al.'s eps-approximation: eps = 1/(2q) with z on the unit sphere
        return 1 / (2 * self.options.q)

    @property
    def threshold(self) -> float:
        # per-coordinate MSE at which the typical error norm sqrt(d * MSE) equals the tolerance
        return self.tolerance**2 / self.options.dim

    def make(self, seed: int) -> TaskData:
        o = self.options
        N, q, d = o.seq_len, o.q, o.dim
        n = o.n_train + o.n_val + o.n_test
        g = torch.Generator().manual_seed(seed)
        # a uniform q-subset per position: the first q of a random permutation of [N]
        subsets = torch.rand(n, N, N, generator=g).argsort(-1)[..., :q]  # (n, N, q)
        member = torch.zeros(n, N, N).scatter_(2, subsets, 1.0)  # (n, N, N) indicator of y_i
        z = torch.randn(n, N, d, generator=g)  # (n, N, d)
        z = z / z.norm(dim=-1, keepdim=True)  # uniform on the unit sphere
        position = torch.eye(N).expand(n, N, N)  # (n, N, N) one-hot of i
        x = torch.cat([member, z, position], -1)  # (n, N, 2N + d)

        def oracle(x: torch.Tensor) -> torch.Tensor:
            return x[..., :N] @ x[..., N : N + d] / q  # (n, N, N) @ (n, N, d) -> (n, N, d)

        # targets stay in raw units, not standardized: the tolerance 1/(2q) is defined in them
        y = oracle(x)  # (n, N, d)
        sizes = [o.n_train, o.n_val, o.n_test]
        parts = zip(x.split(sizes), y.split(sizes), strict=True)
        train, val, test = (Split(a, b) for a, b in parts)
        tol = self.tolerance
        info = {
            "q": q,
            "seq_len": N,
            "dim": d,
            "tolerance": tol,
            # accuracy of predicting 0 (the mean of qSA by symmetry) on the test split
            "chance": float((test.y.norm(dim=-1) <= tol).double().mean()),
        }
        return TaskData(
            train,
            val,
            test,
            self.kind,
            d,
            info,
            sequence=True,
            per_position=True,
            tolerance=tol,
            oracle=oracle,
        )

"""Shared code of Match2 and Match3 (seed 002, Sanford, Hsu and Telgarsky 2023, part 2).

Tokens x_1..x_N are residues mod M. Match2(X)_i = 1{exists j: x_i + x_j = 0 mod M} and
Match3(X)_i = 1{exists j1, j2: x_i + x_j1 + x_j2 = 0 mod M}, where j, j1, j2 range over all of
[N], i itself and repeats included, as in the definitions.

With the `stop` option (on by default) each sequence ends in one more symbol, STOP (feature M of
M + 1), whose position has no label (IGNORE). Sanford et al.'s constructions need it: an
attention output is a convex combination of values, so the weights of a query without any match
must land somewhere. STOP's key scores between a match and the best non-match, and its value
differs from the residues' values: the query's output then says "no match" (Match2 with softmax
attention; for Match3 with tensor attention, the pair (STOP, STOP) plays that part). Without it,
"every position is a match" and "no position is" can give the same weights.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import torch

from blocklab.errors import UserError
from blocklab.tasks.base import IGNORE, Split, Task, TaskData

MARGIN = 10.0  # oracle logit margin: cross-entropy ~2e-9 per position
CHUNK = 1 << 24  # elements per block of the (n, N, M) membership test, bounds its memory


def union_bound(order: int, seq_len: int) -> int:
    """B with P(label = 1) <= B / M for every M: a union bound over the witnesses j or (j1, j2).

    Match2: j = i hits when 2 x_i = 0 (probability <= 2/M), each other j with probability 1/M.
    Match3: (i, i) hits when 3 x_i = 0 (<= 3/M), (i, j) and (j, i) need x_j = -2 x_i (1/M over the
    N - 1 other j), and each unordered pair of other positions, equal ones included, <= 2/M."""
    k = seq_len - 1
    return 2 + k if order == 2 else 3 + k + 2 * (k * (k + 1) // 2)


def positive_rates(order: int, seq_len: int, moduli: torch.Tensor) -> torch.Tensor:
    """Exact P(label_i = 1) under uniform tokens, for each modulus in `moduli`: float64 (m,).

    By exchangeability fix x_i = a and let the other K = N - 1 tokens be uniform.
    Match2 is negative iff 2a != 0 and no other token equals -a: (1 - 1/M)^K.
    Match3 is negative iff 3a != 0 and the other tokens avoid -2a, every v with 2v = -a, and every
    pair {v, -a - v}: the involution v -> -a - v splits Z_M into f fixed points (2v = -a) and
    (M - f)/2 pairs, one of them {a, -2a}, where only a stays allowed. The other tokens survive iff
    each is a or lies in one of the other P = (M - f)/2 - 1 pairs, never both sides of a pair; a
    dynamic program over the number j of pairs opened so far gives that probability, all terms
    positive (the inclusion-exclusion sum would cancel catastrophically in floats).
    """
    m = moduli.to(torch.float64)  # (m,)
    k = seq_len - 1
    if order == 2:
        fixed = 2 - moduli % 2  # residues a with 2a = 0: 0, and M/2 for even M
        return fixed / m + (1 - fixed / m) * (1 - (1 - 1 / m) ** k)

    def survive(pairs: torch.Tensor) -> torch.Tensor:
        j = torch.arange(k + 1, dtype=torch.float64)  # (K+1,) pairs opened so far
        state = torch.zeros(len(m), k + 1, dtype=torch.float64)  # (m, K+1)
        state[:, 0] = 1.0
        stay = (1 + j) / m[:, None]  # (m, K+1): draw a or a side already chosen
        grow = (2 * (pairs[:, None] - j)).clamp_min(0) / m[:, None]  # (m, K+1): open a new pair
        for _ in range(k):
            nxt = state * stay
            nxt[:, 1:] += state[:, :-1] * grow[:, :-1]
            state = nxt
        return state.sum(-1)  # (m,)

    thirds = torch.where(moduli % 3 == 0, 3, 1)  # residues a with 3a = 0
    odd_m = moduli % 2 == 1
    # odd M: every a has one fixed point. Even M: even a has two, odd a none; the a with 3a = 0
    # are all even (0, and M/3 and 2M/3 when 6 | M)
    odd = (moduli - thirds) * survive((moduli - 1) // 2 - 1)
    even = (moduli // 2 - thirds) * survive((moduli - 2) // 2 - 1)
    even = even + moduli // 2 * survive(moduli // 2 - 1)
    negative = torch.where(odd_m, odd, even)  # (m,) the sum over a of P(survive | x_i = a)
    return 1 - negative / m  # the mean over a of 1 - P(survive | x_i = a)


@functools.lru_cache(maxsize=64)
def auto_modulus(order: int, seq_len: int) -> tuple[int, float]:
    """The M >= 2 whose exact positive rate is closest to 1/2 (ties: the smaller M), and that rate.

    Candidates run until the union bound B/M <= 1/2 - (best gap so far): no larger M can then come
    closer, so the answer is the global one, and it depends on N alone."""
    bound, cap = union_bound(order, seq_len), 4 * union_bound(order, seq_len) + 8
    while True:
        moduli = torch.arange(2, cap + 1)  # (m,)
        gap = (positive_rates(order, seq_len, moduli) - 0.5).abs()
        best = int(gap.argmin())
        if 0.5 - bound / (cap + 1) >= gap[best]:
            rate = float(positive_rates(order, seq_len, moduli[best : best + 1])[0])
            return int(moduli[best]), rate
        cap *= 2


def match_labels(tokens: torch.Tensor, modulus: int, order: int) -> torch.Tensor:
    """Match2 / Match3 labels of integer tokens (n, N): bool (n, N)."""
    n, N = tokens.shape
    present = torch.zeros(n, modulus, dtype=torch.bool)
    present.scatter_(1, tokens, True)  # (n, M): which residues occur anywhere in the sequence
    need = (-tokens) % modulus  # (n, N): x_j (Match2) or x_j1 + x_j2 (Match3) must equal this
    if order == 2:
        return present.gather(1, need)
    out = torch.empty(n, N, dtype=torch.bool)
    step = max(1, CHUNK // (N * modulus))
    residues = torch.arange(modulus)
    for lo in range(0, n, step):
        p = present[lo : lo + step, None, :].expand(-1, N, -1)  # (b, N, M) x_j1 = a present?
        partner = (need[lo : lo + step, :, None] - residues) % modulus  # (b, N, M) x_j2 needed
        out[lo : lo + step] = (p & p.gather(2, partner)).any(-1)  # (b, N)
    return out


def distinct_sequences(n: int, seq_len: int, modulus: int, g: torch.Generator) -> torch.Tensor:
    """n distinct uniform token sequences (n, N) int64, in draw order: uniform sampling without
    replacement, so no sequence lands in two splits (with M = 9, N = 6 there are only 531441)."""
    x = torch.empty(0, seq_len, dtype=torch.int64)
    while len(x) < n:
        more = torch.randint(0, modulus, (2 * (n - len(x)) + 64, seq_len), generator=g)
        x = torch.cat([x, more])
        _, inverse = torch.unique(x, dim=0, return_inverse=True)
        first = torch.full((int(inverse.max()) + 1,), len(x)).scatter_reduce(
            0, inverse, torch.arange(len(x)), "amin"
        )
        x = x[first.sort().values]  # keep each sequence's first draw, in draw order
    return x[:n]


class MatchTask(Task):
    """Per-position binary labels of one-hot tokens; subclasses set `order` (2 or 3)."""

    order: ClassVar[int]
    kind = "classification"
    sequence = True
    # cross-entropy per position, well under chance (ln 2 = 0.69): most positions confidently right
    default_threshold = 0.25
    small_options: ClassVar[dict] = {"n_train": 256, "n_val": 64, "n_test": 128}

    @dataclass(frozen=True)
    class Options:
        seq_len: int = 6  # N
        modulus: int | None = None  # M; None picks the M with the most balanced labels for N
        n_train: int = 16384
        n_val: int = 1024
        n_test: int = 2048
        stop: bool = True  # a STOP token after the N residues (see the module docstring)

        def __post_init__(self):
            if not isinstance(self.stop, bool):
                raise UserError(f"stop must be true or false, got {self.stop!r}")
            if self.seq_len < 1:
                raise UserError(f"seq_len must be >= 1, got {self.seq_len}")
            if self.modulus is not None and self.modulus < 2:
                raise UserError(f"modulus must be >= 2 (or unset to choose it), got {self.modulus}")
            for key in ("n_train", "n_val", "n_test"):
                if getattr(self, key) < 1:
                    raise UserError(f"{key} must be >= 1, got {getattr(self, key)}")

    @property
    def seq_len(self) -> int:
        """Positions per example: the N residues, and STOP when it is on."""
        return self.options.seq_len + self.options.stop

    def modulus(self) -> tuple[int, float]:
        """M and the exact probability of a positive label under it."""
        o = self.options
        if o.modulus is None:
            return auto_modulus(self.order, o.seq_len)
        rate = positive_rates(self.order, o.seq_len, torch.tensor([o.modulus]))
        return o.modulus, float(rate[0])

    def make(self, seed: int) -> TaskData:
        o = self.options
        M, rate = self.modulus()
        n = o.n_train + o.n_val + o.n_test
        if M**o.seq_len < n:
            raise UserError(
                f"only {M}^{o.seq_len} = {M**o.seq_len} distinct sequences, fewer than the {n} "
                "examples the disjoint splits need: lower n_train/n_val/n_test or raise seq_len"
            )
        g = torch.Generator().manual_seed(seed)
        tokens = distinct_sequences(n, o.seq_len, M, g)  # (n, N)
        y = match_labels(tokens, M, self.order).long()  # (n, N)
        if o.stop:
            tokens = torch.cat([tokens, torch.full((n, 1), M)], 1)  # (n, N + 1): STOP is M
            y = torch.cat([y, torch.full((n, 1), IGNORE)], 1)  # (n, N + 1)
        x = torch.nn.functional.one_hot(tokens, M + o.stop).float()  # (n, T, M [+ 1])
        sizes = [o.n_train, o.n_val, o.n_test]
        parts = zip(x.split(sizes), y.split(sizes), strict=True)
        train, val, test = (Split(a, b) for a, b in parts)
        scored = train.y[train.y != IGNORE]
        info = {
            "modulus": M,
            "modulus_chosen": "auto" if o.modulus is None else "given",
            "balance": float(scored.float().mean()),  # fraction of positive labels, train split
            "positive_rate": rate,  # the exact probability under uniform tokens
            "seq_len": o.seq_len,
            "order": self.order,
            "stop": o.stop,
        }

        def oracle(x: torch.Tensor) -> torch.Tensor:
            labels = match_labels(x[:, : o.seq_len, :M].argmax(-1), M, self.order)  # (n, N)
            out = MARGIN * (2 * torch.nn.functional.one_hot(labels.long(), 2).float() - 1)
            return torch.cat([out, out.new_zeros(len(x), int(o.stop), 2)], 1)  # (n, T, 2)

        return TaskData(
            train, val, test, self.kind, 2, info, sequence=True, per_position=True, oracle=oracle
        )

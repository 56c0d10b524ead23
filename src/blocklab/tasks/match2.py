"""Match2 (seed 002, Sanford, Hsu and Telgarsky 2023):
Match2(X)_i = 1{exists j: x_i + x_j = 0 mod M}.

One self-attention unit with embedding dimension O(1) computes it exactly (queries and keys on the
circle at angle 2 pi x / M), the contrast to Match3. Shared code: `blocklab.tasks._match`.
"""

from __future__ import annotations

from blocklab.tasks import TASKS
from blocklab.tasks._match import MatchTask


@TASKS.register
class Match2(MatchTask):
    """Tokens uniform in {0..M-1}, one-hot features (n, N, M); a binary label per position.

    With M unset, M is the one whose exact positive rate is closest to 1/2 (M = 9 at N = 6)."""

    order = 2

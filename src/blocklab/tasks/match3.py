"""Match3 (seed 002, Sanford, Hsu and Telgarsky 2023):
Match3(X)_i = 1{exists j1, j2: x_i + x_j1 + x_j2 = 0 mod M}.

Any H-headed self-attention layer computing it needs m H = Omega(N / log N) (a communication
complexity argument), while Match2 needs O(1): the pair of tasks separates pairwise from three-wise
interactions. Shared code: `blocklab.tasks._match`.
"""

from __future__ import annotations

from blocklab.tasks import TASKS
from blocklab.tasks._match import MatchTask


@TASKS.register
class Match3(MatchTask):
    """Tokens uniform in {0..M-1}, one-hot features (n, N, M); a binary label per position.

    With M unset, M is the one whose exact positive rate is closest to 1/2 (M = 31 at N = 6, where
    the rate is 0.505; M = 30 gives 0.534)."""

    order = 3

"""Exact grid ranks over the prime field F_p: the generic separation-rank lower bound of a
polynomial network's architecture, free of the float64 tolerance (measure `exact_rank`).

The grid matrix of a polynomial network has entries that are polynomials in its weights and
templates. `exact_grid_rank` evaluates the same architecture over the prime field F_p
(p = PRIME), with weights and templates drawn uniformly from F_p, and finds the grid rank by exact
elimination. A minor that vanishes identically over Q vanishes mod p, so this rank never exceeds
the grid rank of a generic real network (the object of seed 001's "almost everywhere" theorems),
and it equals it except with probability <= deg(minor) / p (Schwartz-Zippel); several seeds
expose such an accident.

The float64 rank of `blocklab.measures.separation_rank` counts singular values above
rtol * sigma_max; a deep polynomial's spectrum decays smoothly past any tolerance, so the two
can differ by orders of magnitude: this module gives the rank itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from blocklab.blocks.fractional import Fractional
from blocklab.blocks.linearized_attention import LinearizedAttention
from blocklab.blocks.poly import Poly
from blocklab.blocks.poly_attention import PolyAttention
from blocklab.errors import UserError
from blocklab.measures import MEASURES
from blocklab.measures.base import Measure
from blocklab.measures.seprank import (
    MAX_POINTS,
    grid_tensor,
    matricize,
    resolve_partition,
    scalar_function,
)

# The largest prime below 2^23: a product of two residues is < 2^46, so sums of up to 64 of them
# stay below 2^53 and float64 (and its BLAS) computes them exactly.
PRIME = 8_388_593
EXACT_K = 64  # inner dimension of one exact float64 matmul


def _mod(x):
    """x mod PRIME in [0, PRIME) for integer-valued float64 arrays or tensors (|x| < 2^53): both
    numpy and torch compute a float remainder exactly (fmod, then a sign fix-up)."""
    return x % PRIME


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(a @ b) mod p, exact: the inner dimension is summed EXACT_K terms at a time."""
    k = a.shape[-1]
    out = _mod(a[..., :EXACT_K] @ b[..., :EXACT_K, :])
    for i in range(EXACT_K, k, EXACT_K):
        out = _mod(out + _mod(a[..., i : i + EXACT_K] @ b[..., i : i + EXACT_K, :]))
    return out


def _inverse(a: int) -> int:
    return pow(int(a) % PRIME, PRIME - 2, PRIME)  # Fermat


def rank_mod_p(matrix: np.ndarray, block: int = EXACT_K) -> int:
    """Rank over F_p by blocked Gaussian elimination: each panel of `block` columns is reduced
    row by row, then the rows below are updated by one exact BLAS product (L21 @ U12)."""
    a = _mod(np.array(matrix, dtype=np.float64))  # (m, n), residues
    m, n = a.shape
    r = 0
    for c0 in range(0, n, block):
        if r == m:
            break
        c1 = min(c0 + block, n)
        panel, order, cols = a[r:, c0:c1], np.arange(m - r), []  # panel is a view
        for j in range(c1 - c0):
            t = len(cols)
            nonzero = np.flatnonzero(panel[t:, j])
            if t == m - r or not len(nonzero):
                continue
            i = t + nonzero[0]
            panel[[t, i]], order[[t, i]] = panel[[i, t]], order[[i, t]]
            mult = _mod(panel[t + 1 :, j] * _inverse(panel[t, j]))  # (R - t - 1,)
            # products of residues are < 2^46: one reduction after the subtraction is exact
            panel[t + 1 :, j + 1 :] = _mod(
                panel[t + 1 :, j + 1 :] - np.outer(mult, panel[t, j + 1 :])
            )
            panel[t + 1 :, j] = mult  # the L factor, kept for the trailing update
            cols.append(j)
        k = len(cols)
        if k and c1 < n:
            rest = a[r:, c1:]
            rest[:] = rest[order]  # the panel's row swaps
            lower = panel[:, cols]  # (R, k) multipliers below the pivots
            upper = rest[:k].copy()  # U12 = L11^-1 A12, by forward substitution
            for s in range(1, k):
                upper[s] = _mod(upper[s] - lower[s, :s] @ upper[:s])  # < 64 p^2 < 2^53: exact
            rest[k:] = _mod(rest[k:] - lower[k:] @ upper)  # exact: k <= 64
        r += k
    return r


class ExactNet:
    """A blocklab `Net`'s architecture over F_p with weights drawn uniformly from F_p (the same
    function class as the float network, up to constants: a layer's fixed 1/sqrt(head_dim) folds
    into its W_O; the 1/n_i of causal attention, which varies by position, is kept as an inverse
    mod p)."""

    def __init__(self, net: nn.Module, seed: int):
        self.net = net
        _check_exact(net)
        g = np.random.default_rng([seed, 0])

        def draw(shape):
            return torch.from_numpy(g.integers(0, PRIME, shape)).double()

        self.params = {}  # nn.Linear -> (W^T (D_in, D_out), bias or None), residues
        for m in net.modules():
            if isinstance(m, nn.Linear):
                bias = None if m.bias is None else draw(m.bias.shape)
                self.params[m] = (draw(m.weight.shape).T.contiguous(), bias)

    def linear(self, m: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        w, b = self.params[m]
        y = _matmul(x, w)  # (..., D_out)
        return y if b is None else _mod(y + b)

    def block(self, b: nn.Module, h: torch.Tensor) -> torch.Tensor:
        if isinstance(b, Poly | Fractional):  # an integer-degree fractional block is `poly`
            degree = b.degree if isinstance(b, Poly) else b.n
            z = self.linear(b.proj, h).unflatten(-1, (degree, b.d_out))  # (..., d, D_out)
            out = z[..., 0, :]
            for k in range(1, degree):
                out = _mod(out * z[..., k, :])
            return out  # (..., D_out)
        q, k, v = (self.linear(getattr(b, n), h) for n in ("q", "k", "v"))  # (B, T, A)
        q, k, v = (z.unflatten(-1, (b.heads, -1)).transpose(-3, -2) for z in (q, k, v))
        scores = _matmul(q, k.transpose(-1, -2))  # (B, H, T, T)
        weights = scores
        for _ in range(1, getattr(b, "n", 1)):  # poly attention: <q_i, k_j>^n
            weights = _mod(weights * scores)
        t = h.shape[-2]
        if b.causal:
            weights = weights.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), 0.0)
        counts = torch.arange(1, t + 1) if b.causal else torch.full((t,), t)
        inv = torch.tensor([_inverse(c) for c in counts.tolist()], dtype=torch.float64)
        y = _mod(_matmul(weights, v) * inv[:, None])  # (B, H, T, Dh), times 1/n_i
        return self.linear(b.o, y.transpose(-3, -2).flatten(-2))  # (B, T, D_out)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        net = self.net
        h = self.linear(net.embed, x if net.seq_len else x.flatten(1))  # (B, D) or (B, T, D)
        for layer in net.layers:
            y = self.block(layer.block, h)
            h = _mod(h + y) if layer.residual else y
        if net.pooled:
            h = _mod(h.sum(1) * _inverse(h.shape[1]))  # (B, D), the mean over positions
        return self.linear(net.readout, h)


def _check_exact(net: nn.Module) -> None:
    def plain(m):
        return isinstance(m, nn.Identity)

    # read as a blocklab Net: feature inputs, layers of one block each, residual branches unscaled
    # (a factor 1/sqrt(depth) has no value in F_p)
    layers = getattr(net, "layers", None)
    ok = layers is not None and getattr(net, "pos", None) is None
    ok = ok and getattr(net, "out_shape", None) is None and plain(net.norm_out)
    for layer in layers or ():
        b = layer.block
        poly = isinstance(b, Poly) or (isinstance(b, Fractional) and not b.rank)
        attention = isinstance(b, LinearizedAttention | PolyAttention)
        ok &= plain(layer.norm) and plain(layer.act) and layer.ff is None and (poly or attention)
        ok &= layer.scale == 1.0
    if not ok:
        raise UserError(
            "the exact rank needs a polynomial network: poly or integer-degree blocks, "
            "linearized_attention or poly_attention, no norm, no activation, no feed-forward"
        )


@dataclass(frozen=True)
class ExactRank:
    rank: int
    shape: tuple[int, int]
    saturated: bool


def exact_grid_rank(
    net: nn.Module,
    n_positions: int,
    dim: int,
    partition="half",
    templates: int = 4,
    seed: int = 0,
    *,
    position: int = -1,
    entry: int = 0,
    vector: bool = False,
    max_points: int = MAX_POINTS,
    chunk: int = 1 << 14,
) -> ExactRank:
    """The grid rank of `net`'s architecture over F_p, weights and templates drawn from `seed`.

    Same grid, partition and output entry as `separation_rank`; integer templates in F_p."""
    if templates < 1 or n_positions < 2:
        raise UserError("the exact rank needs templates >= 1 and n_positions >= 2")
    if templates**n_positions > max_points:
        raise UserError(
            f"the grid has M^N = {templates}^{n_positions} points, over max_points = "
            f"{max_points:,}: use fewer templates or positions, or raise max_points"
        )
    a, b = resolve_partition(partition, n_positions, seed)
    g = np.random.default_rng([seed, 1])
    grid = g.integers(0, PRIME, (n_positions, templates, dim))  # (N, M, D)
    for t in grid:  # distinct templates: a repeated one would repeat a row of the grid matrix
        t[:, 0] = g.choice(PRIME, templates, replace=False)
    grid = torch.from_numpy(grid).double()
    fn = scalar_function(ExactNet(net, seed), position, entry, vector)
    matrix = matricize(grid_tensor(fn, grid, chunk), a, b)  # (M^|A|, M^|B|)
    rank = rank_mod_p(matrix.cpu().numpy())
    shape = (matrix.shape[0], matrix.shape[1])
    return ExactRank(rank, shape, rank == min(shape))


@MEASURES.register
class ExactRankMeasure(Measure):
    """The grid rank over F_p of one output entry of a polynomial network's architecture (see
    `exact_grid_rank`); any other network is refused with a UserError."""

    @dataclass(frozen=True)
    class Options:
        templates: int = 4  # M per position
        partition: str = "half"
        position: int = -1  # output position read
        entry: int = 0  # output coordinate read

    examples = [{}, {"partition": "interleaved", "templates": 3, "position": 0}]

    def measure(self, model, seq_len, dim, seed=0, inputs=None) -> dict[str, Any]:
        o = self.options  # the grid is the input, and the weights are drawn: `inputs` are not used
        r = exact_grid_rank(
            model, seq_len, dim, o.partition, o.templates, seed, position=o.position, entry=o.entry
        )
        return {
            "value": r.rank,
            "rank": r.rank,
            "saturated": r.saturated,
            "shape": list(r.shape),
            "prime": PRIME,
        }

"""Separation rank, bounded from below by grid tensors (seed 000 sections 4.3 and 5.1.3; seed 001
appendix B.1.2).

sep(y; A, B) is the least R with y = sum_{r<=R} g_r(x_A) g'_r(x_B) (seed 001 eq. 5). Evaluate y on
every point of a grid whose n-th variable runs over M template vectors drawn for position n; the
grid tensor, matricized by (A, B) into an M^|A| x M^|B| matrix, has rank <= sep(y; A, B) for any
templates (seed 000 eq. 10, seed 001 eq. 23), so its numerical rank is a lower bound. The bound
can be no larger than the matrix: when the rank fills it, the result is `saturated` and reads
">= rank".

Templates are drawn independently per position: with one shared set, a function symmetric in its
positions gives a grid matrix whose rank is capped by the number of template multisets.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from blocklab.errors import UserError
from blocklab.measures import MEASURES
from blocklab.measures.base import Measure
from blocklab.numerics import MAX_POINTS, RTOL

CHUNK = 1 << 14  # grid points evaluated per call of the function: bounds memory
# input numbers per call (points x N x D), so wide inputs take fewer points at a time: 128 MB
CHUNK_NUMBERS = 1 << 24

Partition = str | Sequence[int] | tuple[Sequence[int], Sequence[int]]


@dataclass(frozen=True, eq=False)
class SeparationRank:
    """The grid-tensor lower bound: `rank` <= sep(y; A, B), ">=" when `saturated`."""

    rank: int
    singular_values: np.ndarray  # all of them, descending, float64
    shape: tuple[int, int]  # (M^|A|, M^|B|)
    saturated: bool  # rank == min(shape): the grid, not the function, limits the bound
    rtol: float
    partition: tuple[tuple[int, ...], tuple[int, ...]]
    n_templates: int

    def rank_at(self, rtol: float) -> int:
        """The numerical rank at another relative tolerance, from the stored spectrum."""
        s = self.singular_values
        if not len(s) or s[0] <= 0:
            return 0
        return int((s > rtol * s[0]).sum())

    def epsilon_rank(self, eps: float) -> int:
        """Smallest k with sum_{i>k} sigma_i^2 <= eps * (grid entries): the least rank of a grid
        function within mean squared error eps of y (seed 000 eq. 15's d2 metric over the grid),
        by Eckart-Young. d2 is absolute, so eps is in the squared units of y."""
        if eps < 0:
            raise UserError(f"eps must be >= 0, got {eps!r}")
        budget = eps * self.shape[0] * self.shape[1]
        tail = np.cumsum(self.singular_values[::-1] ** 2)[::-1]  # tail[k] = sum_{i>=k} sigma_i^2
        above = np.nonzero(tail > budget)[0]
        return int(above[-1] + 1) if len(above) else 0

    @property
    def log3_rank(self) -> float:
        """log3 of the rank, the scale of seed 001's bounds (-inf for the zero function)."""
        return math.log(self.rank, 3) if self.rank > 0 else -math.inf

    def summary(self) -> dict[str, Any]:
        return {
            "value": self.rank,
            "rank": self.rank,
            "log3_rank": self.log3_rank if self.rank > 0 else None,
            "saturated": self.saturated,
            "shape": list(self.shape),
            "rtol": self.rtol,
            "partition": [list(self.partition[0]), list(self.partition[1])],
            "n_templates": self.n_templates,
            "singular_values": self.singular_values.tolist(),
        }


def separation_rank(
    fn: Callable[[torch.Tensor], torch.Tensor] | nn.Module,
    n_positions: int,
    dim: int,
    partition: Partition = "half",
    templates: int | torch.Tensor = 4,
    seed: int = 0,
    *,
    position: int = -1,
    entry: int = 0,
    vector: bool = False,
    rtol: float = RTOL,
    chunk: int = CHUNK,
    max_points: int = MAX_POINTS,
) -> SeparationRank:
    """Grid-tensor lower bound on the separation rank of y = fn(x^1, ..., x^N) w.r.t. a partition.

    fn: maps a float64 tensor (B, N, D) to (B,); or to (B, K) / (B, T, K), of which `entry`
        (and `position`) is taken. An nn.Module is evaluated as a float64 copy in eval mode.
    vector: fn takes (B, N * D) instead: the variables are consecutive groups of D coordinates of
        one vector (D = 1: the coordinates themselves).
    partition: "half" (first N//2 positions vs the rest), "interleaved" (even vs odd),
        "random" (a balanced split drawn from `seed`), "random:S" (drawn from S), the positions of
        A (B is the rest), or an explicit pair (A, B).
    templates: M, the number of standard normal template vectors drawn per position from `seed`,
        or a tensor (N, M, D) of them (or (M, D), shared by all positions).
    """
    n, d = _positive(n_positions, "n_positions", 2), _positive(dim, "dim", 1)
    a, b = resolve_partition(partition, n, seed)
    grid_templates = draw_templates(templates, n, d, seed)  # (N, M, D)
    m = grid_templates.shape[1]
    if m**n > max_points:
        raise UserError(
            f"the grid has M^N = {m}^{n} = {m**n:,} points, over max_points = {max_points:,}: "
            "use fewer templates or positions, or raise max_points"
        )
    if not rtol > 0:
        raise UserError(f"rtol must be > 0, got {rtol!r}")
    tensor = grid_tensor(scalar_function(fn, position, entry, vector), grid_templates, chunk)
    if not torch.isfinite(tensor).all():
        raise UserError("the function returned non-finite values on the grid (overflow?)")
    matrix = matricize(tensor, a, b)  # (M^|A|, M^|B|)
    s = torch.linalg.svdvals(matrix).cpu().numpy()  # descending
    rank = int((s > rtol * s[0]).sum()) if s[0] > 0 else 0
    shape = (matrix.shape[0], matrix.shape[1])
    return SeparationRank(rank, s, shape, rank == min(shape) > 0, rtol, (a, b), m)


def resolve_partition(partition: Partition, n: int, seed: int) -> tuple[tuple[int, ...], ...]:
    """(A, B) as sorted position tuples; both non-empty, disjoint, covering 0..n-1."""
    if isinstance(partition, str):
        name, _, arg = partition.partition(":")
        if name == "half":
            a = list(range(n // 2))
        elif name == "interleaved":
            a = list(range(0, n, 2))
        elif name == "random":
            try:
                rng = random.Random(int(arg) if arg else seed)
            except ValueError:
                raise UserError(f"partition {partition!r}: the seed must be an integer") from None
            a = rng.sample(range(n), n // 2)
        else:
            raise UserError(
                f"unknown partition {partition!r} (known: half, interleaved, random, random:SEED, "
                "or the positions of A)"
            )
        if arg and name != "random":
            raise UserError(f"partition {name!r} takes no argument, got {partition!r}")
        b = [i for i in range(n) if i not in a]
    else:
        parts = list(partition)
        pair = len(parts) == 2 and all(isinstance(p, Sequence) for p in parts)
        a = [_index(i, n) for i in parts[0]] if pair else [_index(i, n) for i in parts]
        b = [_index(i, n) for i in parts[1]] if pair else [i for i in range(n) if i not in a]
        if set(a) & set(b) or set(a) | set(b) != set(range(n)) or len(set(a)) != len(a):
            raise UserError(f"partition {partition!r} does not split positions 0..{n - 1} in two")
    if not a or not b:
        raise UserError(f"partition {partition!r} leaves one side empty (n_positions={n})")
    return tuple(sorted(a)), tuple(sorted(b))


def draw_templates(templates: int | torch.Tensor, n: int, dim: int, seed: int) -> torch.Tensor:
    """(N, M, D) float64 template vectors: M standard normal ones per position, or those given."""
    if isinstance(templates, torch.Tensor):
        t = templates.to(torch.float64)
        if t.dim() == 2:
            t = t.expand(n, *t.shape)  # one shared set; see the module docstring
        if t.dim() != 3 or t.shape[0] != n or t.shape[2] != dim or t.shape[1] < 1:
            raise UserError(
                f"templates must have shape (N, M, D) = ({n}, M, {dim}) or (M, {dim}), "
                f"got {tuple(templates.shape)}"
            )
        return t
    m = _positive(templates, "templates", 1)
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, m, dim, generator=g, dtype=torch.float64)


def grid_tensor(
    fn: Callable[[torch.Tensor], torch.Tensor], templates: torch.Tensor, chunk: int = CHUNK
) -> torch.Tensor:
    """A(y)[i_1, ..., i_N] = y(t[1, i_1], ..., t[N, i_N]), evaluated `chunk` points at a time
    (fewer where the inputs of `chunk` points would exceed CHUNK_NUMBERS numbers)."""
    n, m, dim = templates.shape
    chunk = min(_positive(chunk, "chunk", 1), max(1, CHUNK_NUMBERS // (n * dim)))
    total = m**n
    place = m ** torch.arange(n - 1, -1, -1)  # (N,) position 0 is the slowest index (C order)
    rows = torch.arange(n)
    out = torch.empty(total, dtype=torch.float64)
    with torch.no_grad():
        for start in range(0, total, chunk):
            flat = torch.arange(start, min(start + chunk, total))  # (b,)
            digits = flat[:, None] // place % m  # (b, N) template index per position
            y = fn(templates[rows, digits])  # (b, N, D) -> (b,)
            if y.shape != flat.shape:
                raise UserError(f"the function must return shape (B,), got {tuple(y.shape)}")
            out[start : start + len(flat)] = y.to(torch.float64)
    return out.reshape((m,) * n)


def matricize(tensor: torch.Tensor, a: Sequence[int], b: Sequence[int]) -> torch.Tensor:
    """[[A]]_{A,B}: rows run over the A positions, columns over B, each in increasing position
    order with the first position slowest (seed 000 section 5.1.3's row and column indices)."""
    m = tensor.shape[0]
    return tensor.permute(*a, *b).reshape(m ** len(a), m ** len(b))


def scalar_function(
    fn: Callable[[torch.Tensor], torch.Tensor] | nn.Module, position: int, entry: int, vector: bool
) -> Callable[[torch.Tensor], torch.Tensor]:
    """fn as a map (B, N, D) -> (B,) in float64: picks the output entry, flattens vector inputs."""
    device = None  # a plain function takes the grid where it is built: on the CPU
    if isinstance(fn, nn.Module):
        fn = copy.deepcopy(fn).double().eval()  # float64 without touching the caller's module
        device = next(fn.parameters(), torch.empty(0)).device  # the grid goes to the network

    def f(x: torch.Tensor) -> torch.Tensor:
        out = fn((x.flatten(1) if vector else x).to(device))
        if device is not None and isinstance(out, torch.Tensor):
            out = out.cpu()  # host: the grid tensor is assembled on the CPU
        if not isinstance(out, torch.Tensor) or out.dim() == 0 or out.shape[0] != x.shape[0]:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise UserError(f"the function must return a batch of outputs (B, ...), got {got}")
        try:
            if out.dim() == 2:
                return out[:, entry]
            if out.dim() == 3:
                return out[:, position, entry]
        except IndexError:
            raise UserError(
                f"output position {position} / entry {entry} is outside the output of shape "
                f"{tuple(out.shape[1:])}"
            ) from None
        if out.dim() > 3:
            raise UserError(f"cannot pick a scalar from an output of shape {tuple(out.shape)}")
        return out

    return f


def _positive(value: Any, what: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
        raise UserError(f"{what} must be an integer >= {least}, got {value!r}")
    return int(value)


def _index(i: Any, n: int) -> int:
    if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < n:
        raise UserError(f"partition position {i!r} is not in 0..{n - 1}")
    return int(i)


@MEASURES.register
class Seprank(Measure):
    """The grid-tensor separation rank of one output entry of a network (see `separation_rank`)."""

    @dataclass(frozen=True)
    class Options:
        templates: int = 4  # M per position
        partition: str = "half"
        position: int = -1  # output position read (the last sees every input even when causal)
        entry: int = 0  # output coordinate read
        rtol: float = RTOL

    examples = [{}, {"partition": "interleaved", "templates": 3, "position": 0}]

    def measure(self, model, seq_len, dim, seed=0, inputs=None) -> dict[str, Any]:
        o = self.options  # the grid is the input: `inputs` are not used
        result = separation_rank(
            model,
            seq_len,
            dim,
            o.partition,
            o.templates,
            seed,
            position=o.position,
            entry=o.entry,
            rtol=o.rtol,
        )
        return result.summary()

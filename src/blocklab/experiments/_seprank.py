"""Separation rank by grid tensors: seed 001's depth-width bounds and seed 000's degree-d claim.

The experiments evaluate a network on the grid of M template vectors per position, matricize by
the balanced partition and take the rank, a lower bound on sep(y; A, B) (seed 000 eq. 10,
seed 001 appendix B). Each network is measured twice:

- exact: the same architecture over the prime field F_p with weights drawn from F_p
  (`measures/exact_rank.py`): the grid rank of generic weights, the object of seed 001's "almost
  everywhere" theorems, up to a Schwartz-Zippel accident that several seeds expose.
- float64: the library's `separation_rank` on the float network, counting singular values above
  rtol * sigma_max. A deep polynomial's grid spectrum decays smoothly past any tolerance (degree
  3^L spreads its values over hundreds of orders of magnitude), so this numerical rank can fall
  far below the exact one: it is an epsilon-rank, still a lower bound, not the rank itself.

This module measures one network (`blocklab seprank measure`) and holds what the two
experiments share: `seprank_depth_width` (seed 001) and `seprank_degree` (seed 000). It imports
torch where a network is built or measured (see `blocklab.experiments`).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from blocklab import theory
from blocklab.errors import UserError
from blocklab.numerics import MAX_POINTS, RTOL
from blocklab.specs import NetShape
from blocklab.store import Store

if TYPE_CHECKING:
    from blocklab.models import Net
    from blocklab.specs import Arm

VERSION = 1  # part of every record id: bump when a measurement changes meaning
RANK_CODE = ("blocklab.measures.exact_rank", "blocklab.measures.seprank")  # in every fingerprint


# seed 001's analyzed stack (eq. 3): no norm, no residual, no feed-forward, no activation,
# bias-free blocks; each experiment sets its depth and width
ANALYZED = NetShape(depth=2, width=4, norm="none", residual=False, activation="none", ff="none")


def build_net(arm: Arm, shape: NetShape, positions: int, dim: int, seed: int) -> Net:
    """A stack of `shape` (`ANALYZED`, at some depth and width, unless a caller changes its
    switches) for token mixers on a sequence of `positions` tokens of `dim` inputs, a vector
    network on positions * dim inputs for per-token blocks; weights from `seed`."""
    import torch

    from blocklab.models import Net, mixes_tokens

    if dim < 1:
        raise UserError(f"dim must be >= 1, got {dim}")
    seq = mixes_tokens(arm)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Net(
            arm,
            shape,
            dim if seq else positions * dim,
            1,
            seq_len=positions if seq else None,
        )


def measure(net: Net, positions: int, dim: int, templates: int, seed: int, rtol: float, exact=True):
    """Both ranks of one network on one grid, as stored metrics."""
    from blocklab.measures.exact_rank import exact_grid_rank
    from blocklab.measures.seprank import separation_rank

    vector = net.seq_len is None
    start = time.time()
    out: dict[str, Any] = {}
    if exact:
        e = exact_grid_rank(net, positions, dim, "half", templates, seed, vector=vector)
        out.update(exact_rank=e.rank, exact_saturated=e.saturated)
    try:
        r = separation_rank(net, positions, dim, "half", templates, seed, vector=vector, rtol=rtol)
    except UserError as exc:  # a deep non-polynomial (the fractional block) overflows float64
        out.update(float_rank=None, float_error=str(exc).splitlines()[0], shape=None, spectrum=[])
    else:
        s = r.singular_values
        out.update(
            float_rank=r.rank,
            float_saturated=r.saturated,
            float_rank_at={f"{t:g}": r.rank_at(t) for t in (1e-6, 1e-12)},
            shape=list(r.shape),
            spectrum=(s / s[0]).tolist() if s[0] > 0 else s.tolist(),  # sigma_i / sigma_1
        )
    out["seconds"] = time.time() - start
    return out


def measure_network(
    block: str,
    shape: NetShape = ANALYZED,
    positions: int = 2,
    dim: int | None = None,
    *,
    templates: int | None = None,
    partition: str = "half",
    position: int = -1,
    entry: int = 0,
    rtol: float = RTOL,
    seed: int = 0,
    eps: float | None = None,
    exact: bool = False,
    max_points: int = MAX_POINTS,
) -> dict[str, Any]:
    """`blocklab seprank measure`: the grid rank of one network of `shape` (see `build_net`),
    with the epsilon-rank, the exact F_p rank and, for linearized attention, seed 001's bounds
    on request or where they apply."""
    from blocklab.measures.exact_rank import PRIME, exact_grid_rank
    from blocklab.measures.seprank import separation_rank
    from blocklab.models import mixes_tokens, parse_arm

    arm = parse_arm(block)
    depth, width, norm = shape.depth, shape.width, shape.norm
    if dim is None:  # token mixers: dx inputs per position make the embedding invertible
        dim = width if mixes_tokens(arm) else 1
    if templates is None:  # the largest grid of at most 2^16 points, two templates at least
        templates = max(2, math.floor(2 ** (16 / max(positions, 1)) + 1e-9))
    net = build_net(arm, shape, positions, dim, seed)
    vector = net.seq_len is None
    kw = {"position": position, "entry": entry, "vector": vector, "max_points": max_points}
    r = separation_rank(net, positions, dim, partition, templates, seed, rtol=rtol, **kw)
    s = r.singular_values
    layers = [arm.degrees[i % len(arm.degrees)] for i in range(depth)] if arm.degrees else None
    layers = layers or ([arm.block_degree] * depth if arm.block_degree else None)
    # a normalization, an activation or a ReLU feed-forward is not a polynomial
    plain = norm == "none" and shape.activation == "none" and shape.ff == "none"
    layers = layers if plain else None
    out = {
        "block": arm.label,
        "depth": depth,
        "width": width,
        "network": "vector" if vector else "sequence",
        "positions": positions,
        "dim": dim,
        "seed": seed,
        "degree": math.prod(layers) if layers else None,  # eq. 16: d^p, or prod d_i if mixed
        "polynomial": bool(layers) and all(float(d).is_integer() for d in layers),  # e is not
        **{k: v for k, v in r.summary().items() if k not in ("value", "singular_values")},
        "top_singular_values": s[:8].tolist(),
        "smallest_counted": float(s[r.rank - 1] / s[0]) if r.rank else None,
    }
    if eps is not None:
        out["eps"], out["epsilon_rank"] = eps, r.epsilon_rank(eps)
    if exact:
        e = exact_grid_rank(net, positions, dim, partition, templates, seed, **kw)
        out["exact"] = {"rank": e.rank, "saturated": e.saturated, "prime": PRIME}
    heads = arm.kwargs.get("heads", 1)
    if arm.block == "linearized_attention" and width > heads and norm == "none":
        lower, upper = theory.sep_rank_bounds(depth, width, heads)
        out["theory"] = {
            "heads": heads,
            "regime": theory.sep_rank_regime(depth, width),
            "threshold": theory.depth_threshold(width),
            "log3_lower": lower,
            "log3_upper": upper,
        }
    return out


def format_measure(m: dict[str, Any]) -> str:
    """The text `blocklab seprank measure` prints."""
    a, b = m["partition"]
    lines = [
        f"{m['block']}, depth {m['depth']}, width {m['width']}: a {m['network']} network of "
        f"{m['positions']} positions x {m['dim']} inputs (seed {m['seed']})"
        + (
            f"; {'polynomial' if m['polynomial'] else 'nominal'} degree {m['degree']:.6g}"
            if m["degree"]
            else ""
        ),
        f"grid: {m['n_templates']} templates per position, partition {a} | {b}, matrix "
        f"{m['shape'][0]} x {m['shape'][1]}",
        f"rank (float64, rtol {m['rtol']:g}): {'>= ' if m['saturated'] else ''}{m['rank']}"
        + (f"  (log3 = {m['log3_rank']:.3f})" if m["log3_rank"] is not None else ""),
        "saturated: "
        + (
            "yes: the grid, not the function, limits the rank; use more templates"
            if m["saturated"]
            else "no"
        ),
        "top singular values: " + " ".join(f"{v:.3g}" for v in m["top_singular_values"]),
    ]
    if m["smallest_counted"] is not None:
        lines.append(f"smallest counted sigma / sigma_1: {m['smallest_counted']:.3g}")
    if "epsilon_rank" in m:
        lines.append(f"epsilon-rank (eps = {m['eps']:g}, mean squared error): {m['epsilon_rank']}")
    if "exact" in m:
        e = m["exact"]
        lines.append(
            f"exact rank over F_p (p = {e['prime']}): {'>= ' if e['saturated'] else ''}{e['rank']}"
        )
    if "theory" in m:
        t = m["theory"]
        lines.append(
            f"seed 001 (L = {m['depth']}, dx = {m['width']}, H = {t['heads']}; threshold log3 dx = "
            f"{t['threshold']:.3f}, {t['regime']}): {t['log3_lower']:.3f} <= log3 sep <= "
            f"{t['log3_upper']:.3f}"
        )
    return "\n".join(lines)


def _record_id(experiment: str, config: dict[str, Any]) -> str:
    text = json.dumps({"experiment": experiment, "version": VERSION, **config}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Point:
    """One network to measure, as a worker process rebuilds it: `block` (a block or a degree as
    `models.parse_arm` reads it) in `ANALYZED` at `depth` and `width`, on `positions` x `dim`
    inputs, its weights and templates drawn from `seed`; `exact`: its rank over F_p too."""

    block: str
    depth: int
    width: int
    positions: int
    dim: int
    templates: int
    seed: int
    rtol: float
    exact: bool = True


def measure_point(point: Point, device: str = "cpu") -> dict[str, Any]:
    """A worker's job (`engine.executors`): both ranks of `point`'s network, as stored metrics.
    The exact rank is CPU arithmetic: `device` is not read."""
    from blocklab.models import parse_arm

    shape = replace(ANALYZED, depth=point.depth, width=point.width)
    net = build_net(parse_arm(point.block), shape, point.positions, point.dim, point.seed)
    return measure(
        net, point.positions, point.dim, point.templates, point.seed, point.rtol, point.exact
    )


@dataclass(frozen=True)
class _Shown:
    """A measured point as the command's display (`engine.progress.Progress.update`) names it."""

    id: str
    label: str
    text: str

    @property
    def arm(self) -> SimpleNamespace:
        return SimpleNamespace(label=self.label)

    def describe(self) -> str:
        return self.text


FLOAT_WHY = (
    "a float64 rank below the exact rank is float64's dynamic range, not the function's rank: "
    "float64 keeps about 16 significant digits, and the grid values of a deep network (products "
    "of many factors) span more orders of magnitude, so all but its first singular values fall "
    "below rtol x the largest; read the exact rank over F_p"
)
NO_EXACT = "{block} is not a polynomial: it has no exact rank over F_p, only the float64 one"


def measure_points(
    store: Store,
    experiment: str,
    planned: list[tuple[dict[str, Any], Point, list[str]]],
    *,
    resources=None,
    progress=True,
) -> list[dict[str, Any]]:
    """The stored record of each planned (config, point, modules), in order. Every point is
    planned at once (a run directory's plan counts them all before the first is measured); a
    record the store lets a rerun keep is read back (`Store.reusable`: made by the same code,
    `modules` besides the rank code here), the rest are measured in `resources.workers`
    processes (one by default) and stored as each finishes, by this process alone."""
    from blocklab.engine.executors import make_executor
    from blocklab.engine.progress import display
    from blocklab.engine.provenance import provenance
    from blocklab.fingerprint import code

    records, codes = [], {}
    for config, point, modules in planned:
        config = {**config, "seed": point.seed}
        rec = {"id": _record_id(experiment, config), "experiment": experiment, "seed": point.seed}
        records.append({**rec, "config": config})
        codes[rec["id"]] = code([*modules, __name__, *RANK_CODE])
    store.expect(list(codes))
    done, stale = store.reusable({i: c["fingerprint"] for i, c in codes.items()})
    store.say_stale(stale)
    todo = [i for i, r in enumerate(records) if r["id"] not in done]
    workers = resources.workers if resources is not None else 1
    bar, own = display(progress)
    bar.phase(experiment, len(todo), stored=done, announce=False)  # the line below says more
    if todo:  # a line from the start: the bar or the first point may take a while
        bar.say(
            f"[{experiment}] {len(todo)} of {len(records)} points to measure, "
            f"{min(workers, len(todo))} process{'es' if min(workers, len(todo)) > 1 else ''}"
        )
    told: set[str] = set()
    try:
        runner = make_executor("local", workers, {}, getattr(resources, "plugins", ()))
        points = [planned[i][1] for i in todo]
        for k, metrics in runner.imap_unordered(measure_point, points, "cpu"):
            i = todo[k]
            records[i] |= {
                "status": "done",
                "metrics": metrics,
                "provenance": {**provenance("cpu"), "code": codes[records[i]["id"]]},
                "finished_at": time.time(),
            }
            store.put(records[i])
            _show(bar, records[i], planned[i][1], told)
    finally:
        if own:
            bar.close()
    kept = {r["id"]: r for r in store.records(ids=sorted(done))} if done else {}
    return [kept.get(r["id"], r) for r in records]


def _or_dash(x) -> str:
    return "-" if x is None else str(x)


def _show(bar, record: dict[str, Any], point: Point, told: set[str]) -> None:
    """A measured point on the display, and once per run why a float64 rank falls below the
    exact one and that a non-polynomial block has no exact rank."""
    m, c = record["metrics"], record["config"]
    exact, floated = m.get("exact_rank"), m.get("float_rank")
    ranks = f"exact {_or_dash(exact)}, float64 {_or_dash(floated)}"
    text = f"{c['block']} p={point.depth} w={point.width} seed={point.seed}: {ranks}"
    bar.update(_Shown(record["id"], c["block"], text), record)
    below = exact is not None and floated is not None and floated < exact
    if below and not m.get("exact_saturated") and "float" not in told:
        told.add("float")
        bar.say(f"[{record['experiment']}] {FLOAT_WHY}")
    if not point.exact and c["block"] not in told:
        told.add(c["block"])
        bar.say(f"[{record['experiment']}] " + NO_EXACT.format(block=c["block"]))


def check_grid(positions: int, templates: int) -> None:
    if positions < 2:
        raise ValueError(f"positions must be >= 2 (a partition needs two sides), got {positions}")
    if templates**positions > MAX_POINTS:
        raise ValueError(
            f"the grid has templates^positions = {templates}^{positions} points, over "
            f"{MAX_POINTS:,}: use fewer templates or positions"
        )

"""`blocklab seprank measure`: the grid-tensor separation rank of one network (the seprank
experiments beside it are registered experiments)."""

from __future__ import annotations

import argparse
import dataclasses
import json

from blocklab import config as cfgmod
from blocklab import options
from blocklab.config import number
from blocklab.experiments._seprank import ANALYZED
from blocklab.numerics import MAX_POINTS, RTOL
from blocklab.specs import NetShape

# the switches a grid rank is measured over: depth, width, norm, residual
_NOT_OFFERED = ("bias", "activation", "ff", "flatten", "scaled_residual")

COUNT = number(int, ge=1)
INDEX = number(int, unbounded=True)  # from the end when negative, as Python indexes


def add_parser(sub) -> None:
    p = sub.add_parser("measure", help="the grid rank of one network")
    p.add_argument(
        "--block",
        default="linearized_attention",
        help="a block or a degree: linearized_attention, softmax_attention(heads=2), 3, e, mlp",
    )
    p.add_argument(
        "--positions", type=number(int, ge=2), default=2, help="positions N, the variables (2)"
    )
    p.add_argument(
        "--dim",
        type=COUNT,
        help="inputs per position (default: the width for token mixers, else 1)",
    )
    p.add_argument("--templates", type=COUNT, help="M per position (default: M^N <= 65,536)")
    p.add_argument("--partition", default="half", help="half, interleaved, random[:SEED]")
    p.add_argument("--position", type=INDEX, default=-1, help="output position read (-1)")
    p.add_argument("--entry", type=INDEX, default=0, help="output entry read (0)")
    p.add_argument(
        "--rtol", type=number(float, gt=0, lt=1), default=RTOL, help="relative tolerance"
    )
    p.add_argument("--seed", type=number(int, ge=0), default=0, help="weights and templates (0)")
    p.add_argument(
        "--eps", type=number(float, ge=0), help="also print the epsilon-rank at this eps"
    )
    p.add_argument("--exact", action="store_true", help="also the exact rank over F_p")
    # the network's switches are NetShape's fields, seed 001's analyzed stack by default
    cfgmod.add_flags(p, NetShape, skip=_NOT_OFFERED, defaults=ANALYZED)
    p.add_argument("--max-points", type=COUNT, default=MAX_POINTS, help="grid limit")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from blocklab.experiments import _arms
    from blocklab.experiments import _seprank as seprank
    from blocklab.formatting import plain
    from blocklab.measures.seprank import resolve_partition

    # what can be checked without a network is checked before one is built
    given = cfgmod.overrides(args, NetShape, skip=_NOT_OFFERED)
    shape = options.build(NetShape, {**dataclasses.asdict(ANALYZED), **given}, what="network")
    resolve_partition(args.partition, args.positions, args.seed)
    _arms.arm(args.block)  # an option the block does not take fails with the nearest name
    result = seprank.measure_network(
        args.block,
        shape,
        args.positions,
        args.dim,
        templates=args.templates,
        partition=args.partition,
        position=args.position,
        entry=args.entry,
        rtol=args.rtol,
        seed=args.seed,
        eps=args.eps,
        exact=args.exact,
        max_points=args.max_points,
    )
    print(json.dumps(plain(result), indent=2) if args.json else seprank.format_measure(result))
    return 0

"""`blocklab theory`: the seeds' closed forms at the given sizes (h(d) and the degree proxy,
seed 001's separation-rank bounds, seed 003's path shares)."""

from __future__ import annotations

import argparse
import json

from blocklab import theory
from blocklab.config import number
from blocklab.errors import UserError
from blocklab.options import split_list
from blocklab.specs import parse_degree


def add_parser(sub) -> None:
    p = sub.add_parser(
        "theory", help="h(d) and the degree proxy (seed 000), seed 001's bounds, seed 003's paths"
    )
    p.add_argument("--degrees", nargs="+", default=["2", "e", "3", "4", "5"])
    count = number(int, ge=1)
    p.add_argument("--budget", type=count, default=24576)
    p.add_argument("--width", type=count, default=32)
    p.add_argument(
        "--depths",
        type=count,
        nargs="+",
        default=[1, 2, 3, 4, 5, 6],
        help="depths L (seed 001/003)",
    )
    p.add_argument("--dx", type=count, default=64, help="width dx for seed 001's bounds (64)")
    p.add_argument("--heads", type=count, default=1, help="attention heads H per layer (1)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    degrees = [parse_degree(d) for d in split_list(",".join(args.degrees))]
    rows = [
        {
            "degree": d,
            "h": theory.h(d),
            "layers": theory.layers_at_budget(d, args.budget, args.width**2),
            "log10_degree_proxy": theory.degree_proxy_log10(d, args.budget, args.width**2),
        }
        for d in degrees
    ]
    dx, heads, depths = args.dx, args.heads, args.depths
    if dx <= heads:
        raise UserError(
            f"--dx must exceed --heads (seed 001 takes log3(dx - H)), got {dx} <= {heads}"
        )
    bounds = []
    for depth in depths:
        lower, upper = theory.sep_rank_bounds(depth, dx, heads)
        regime = theory.sep_rank_regime(depth, dx)
        bounds.append({"depth": depth, "regime": regime, "log3_lower": lower, "log3_upper": upper})
    deepest = max(depths)
    paths = {
        "depth": deepest,
        "heads": heads,
        "rows": [
            {"length": k, "skips": deepest - k, "count": count, "share": share}
            for k, (count, share) in enumerate(
                zip(
                    theory.path_counts(deepest, heads),
                    theory.path_shares(deepest, heads),
                    strict=True,
                )
            )
        ],
    }
    threshold = theory.depth_threshold(dx)
    if args.json:
        out = {"budget": args.budget, "width": args.width, "rows": rows, "dx": dx, "heads": heads}
        out.update(depths=depths, threshold=threshold, bounds=bounds, paths=paths)
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"h(d) = ln d / d (seed 000 eq. 5), maximal at d = e; degree proxy (d^(1/d))^(B/N_dx) "
        f"(eq. 17) at B = {args.budget}, N_dx = {args.width}^2"
    )
    print(f"{'d':>8} {'h(d)':>8} {'layers':>8} {'log10 proxy':>12}")
    for r in rows:
        print(
            f"{r['degree']:>8.4g} {r['h']:>8.4f} {r['layers']:>8.2f} "
            f"{r['log10_degree_proxy']:>12.3f}"
        )
    print(
        f"\nlog3 separation rank bounds, linearized self-attention of width dx = {dx}, "
        f"H = {heads} (seed 001 Theorems 1-2, eq. 7-8)"
    )
    print(f"depth threshold log3 dx = {threshold:.3f}: Theorem 1 below it, Theorem 2 above")
    print(f"{'L':>8} {'regime':>10} {'log3 lower':>12} {'log3 upper':>12}")
    for b in bounds:
        print(
            f"{b['depth']:>8} {b['regime']:>10} {b['log3_lower']:>12.3f} {b['log3_upper']:>12.3f}"
        )
    if any(b["log3_lower"] < 0 for b in bounds):
        print("(a negative lower value is a trivial bound: sep >= 1)")
    if any(b["regime"] == "threshold" for b in bounds):
        print("(threshold: neither theorem holds; the envelope of both is shown, not a bound)")
    print(
        f"\npaths at L = {deepest}, H = {heads}: (H+1)^L = {(heads + 1) ** deepest} "
        f"(seed 003 Theorem 2.1, skips as dummy heads)"
    )
    print("share through k attention layers and L - k skips: C(L, k) H^k / (H+1)^L")
    print(f"{'k':>8} {'skips':>8} {'count':>12} {'share':>10}")
    for r in paths["rows"]:
        print(f"{r['length']:>8} {r['skips']:>8} {r['count']:>12} {r['share']:>10.4g}")
    return 0

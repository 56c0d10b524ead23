"""`blocklab bench`: the matmul ceiling, sequential vs ensemble training speed, in one run."""

from __future__ import annotations

import argparse
import json

from blocklab.bench import CEILING_FROM, CEILING_TARGET, SPEEDUP_TARGETS, BenchConfig, run_bench
from blocklab.errors import UserError
from blocklab.sweep import device_name

_DEFAULTS = BenchConfig()


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="training speed: one network at a time vs an ensemble")
    p.add_argument("--widths", type=int, nargs="+", default=list(_DEFAULTS.widths))
    p.add_argument("--members", type=int, default=_DEFAULTS.members, help="ensemble size E (16)")
    p.add_argument("--depth", type=int, default=_DEFAULTS.depth, help="layers (4)")
    p.add_argument("--degree", type=int, default=_DEFAULTS.degree, help="polynomial degree (3)")
    p.add_argument("--batch-size", type=int, default=_DEFAULTS.batch_size, help="(128)")
    p.add_argument(
        "--seconds",
        type=float,
        default=_DEFAULTS.seconds,
        help="time of the shorter timed run (0.5)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=_DEFAULTS.repeats,
        help="timed runs per length, fastest kept (3)",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's, all cores)")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")


def cmd_bench(args: argparse.Namespace) -> int:
    device = device_name(args.device)
    for name in ("members", "depth", "degree", "batch_size", "repeats", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if min(args.widths) < 1 or not args.seconds > 0:
        raise UserError("--widths must be >= 1 and --seconds > 0")
    cfg = BenchConfig(
        members=args.members,
        depth=args.depth,
        degree=args.degree,
        batch_size=args.batch_size,
        widths=tuple(args.widths),
        seconds=args.seconds,
        repeats=args.repeats,
        device=device,
        threads=args.threads,
    )
    result = run_bench(cfg)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_table(result))
    return 1 if args.check and not result["meets_targets"] else 0


def _table(r: dict) -> str:
    lines = [
        f"{r['device']}, {r['threads']} torch threads; E = {r['members']} networks of degree "
        f"{r['degree']}, depth {r['depth']}, batch {r['batch_size']}; the fastest of "
        f"{r['repeats']} runs of each length",
        f"float32 matmul ceiling: {r['matmul_ceiling_gflops']:.1f} GFLOP/s",
        "",
        "width  sequential  (1 thread)  ensemble  speed-up  ensemble GFLOP/s  of ceiling",
        "       (model-steps per second)",
    ]
    for w in r["widths"]:
        single = w["sequential_1_thread_steps_per_s"]
        lines.append(
            f"{w['width']:>5}  {w['sequential_steps_per_s']:>10.0f}  "
            f"{'-' if single is None else f'{single:.0f}':>10}  "
            f"{w['ensemble_steps_per_s']:>8.0f}  {w['speedup']:>7.2f}x  "
            f"{w['ensemble_gflops']:>16.1f}  {w['fraction_of_ceiling']:>9.0%}"
        )
    goals = ", ".join(f">= {g:g}x at width {w}" for w, g in SPEEDUP_TARGETS.items())
    lines += ["", f"targets: speed-up {goals}; >= {CEILING_TARGET:.0%} of the ceiling from width "
              f"{CEILING_FROM}"]  # fmt: skip
    for t in r["targets"]:
        value = f"{t['value']:.2f}x" if t["what"] == "speedup" else f"{t['value']:.0%}"
        lines.append(f"  width {t['width']}: {t['what']} {value} {'met' if t['met'] else 'MISSED'}")
    return "\n".join(lines)

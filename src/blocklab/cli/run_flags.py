"""The run flags of an experiment command: where its work runs (`--workers`, and for trained
trials `--device`, `--ensemble`, `--executor`, `--executor-option`), and the
`engine.executors.Resources` they make. Building them imports no torch."""

from __future__ import annotations

import argparse
from pathlib import Path

from blocklab import config as cfgmod
from blocklab.engine.executors import ENSEMBLE, EXECUTORS, Resources, default_workers
from blocklab.options import parse_pairs


def workers_flag(p, what: str = "processes") -> None:
    """--workers: how many processes run the work (`executors.default_workers`)."""
    p.add_argument(
        "--workers",
        type=cfgmod.number(int, ge=1),
        default=default_workers(),  # os.cpu_count(): the help states it, never the number
        help=f"{what} (default: one per CPU core, at most 8, or $BLOCKLAB_WORKERS where set)",
    )


def pool_flags(p) -> None:
    """Where trained trials run (`executors.Resources`); `p` is a parser or an argument group."""
    count = cfgmod.number(int, ge=1)
    workers_flag(p)
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument(
        "--ensemble",
        type=count,
        default=ENSEMBLE,
        help=f"most trials of one architecture trained together ({ENSEMBLE}; 1: each alone)",
    )
    p.add_argument(
        "--executor",
        default="local",
        help=f"where the trials run: {', '.join(EXECUTORS)} (local: a process pool)",
    )
    p.add_argument(
        "--executor-option",
        action="append",
        metavar="KEY=VALUE",
        help="executor option, repeatable (ray: address=HOST:PORT; slurm: partition=P, "
        "time=MINUTES, folder=DIR, ...)",
    )


def resources(args: argparse.Namespace, imports: tuple[str, ...] = ()) -> Resources:
    """Where the trials run, from the pool flags (--workers alone: processes on the CPU); the
    slurm executor keeps its job files in the run directory unless told otherwise. The workers
    import the same plugins."""
    if not hasattr(args, "executor"):
        return Resources(args.workers, "cpu", plugins=imports)
    options = parse_pairs(args.executor_option or [], "executor")
    if args.executor == "slurm":
        options.setdefault("folder", str(Path(args.out) / "slurm"))
    return Resources(args.workers, args.device, args.ensemble, args.executor, options, imports)

"""Depth-ladder trials of one shape fitted one at a time (`trial.run_trial`, each unit's chains
alone: one after another on a CPU, batched on a GPU) against fitted together (`trial.run_ladders`:
every unit's chains one batched Levenberg-Marquardt fit per rung), for U units of other teachers
and seeds. The two ways run interleaved, in turns that alternate which goes first, so a machine
shared with other work slows both alike: read the ratios, not the seconds.

    python benchmarks/fit_units.py [--units 1 2 4 8] [--ladder 1 2] [--steps 32] [--restarts 2]
        [--arm 3] [--width 3] [--data-ratio 32] [--min-examples 1] [--repeats 3] [--threads 1]
        [--device cpu cuda]

Printed per device and U: seconds per unit each way (wall; on a CPU also process time, which
other work on the machine inflates less), alone / together (above 1: fitting together pays), and
whether every trial's iterations and certificates came out the same both ways.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time

import torch

from blocklab.engine import trial
from blocklab.models import parse_arm
from blocklab.specs import NetShape, TrainConfig, TrialSpec

OPTIONS = {"activation": "relu", "n_train": 256, "n_val": 256, "n_test": 256}  # the demo's target
TEACHERS = 4  # unit i fits teacher i mod 4 from seed i div 4: the task's data cache holds four


def machine() -> str:
    """One line: the CPU as lscpu names it, its cores, torch's version and threads."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        name = fields.get("Model name", "").strip()
    except (OSError, subprocess.CalledProcessError):
        name = platform.processor()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch_line = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    return f"{name or platform.machine()}, {cores} cores usable; {torch_line}"


def specs(args, units: int) -> list[TrialSpec]:
    cfg = TrainConfig(
        optimizer="lm",
        steps=args.steps,
        restarts=args.restarts,
        chains="best",
        data_ratio=args.data_ratio,
        min_examples=args.min_examples,
    )
    shape = NetShape(args.ladder[-1], args.width, norm="rms", scaled_residual=True)
    arm, ladder = parse_arm(args.arm), tuple(args.ladder)
    return [
        TrialSpec("teacher", dict(OPTIONS), arm, 0, shape, cfg, seed, teacher, ladder=ladder)
        for seed, teacher in (divmod(i, TEACHERS) for i in range(units))
    ]


def timed(fn, device: str) -> tuple[float, float, list]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def verdicts(records: list[dict]) -> list:
    """Each trial's iterations and certificate at every rung, what both ways must agree on."""
    return [
        [(s["metrics"]["iterations"], s["metrics"]["converged"]) for s in r["metrics"]["ladder"]]
        for r in records
    ]


def measure(args, device: str, units: int) -> dict:
    trials = specs(args, units)
    ways = {
        "alone": lambda: [trial.run_trial(s, device) for s in trials],
        "together": lambda: trial.run_ladders(trials, device),
    }
    for fn in ways.values():  # warm: the task's data, the kernels, the allocator
        fn()
    seen = {name: [] for name in ways}
    for r in range(args.repeats):
        for name in list(ways)[:: 1 if r % 2 == 0 else -1]:  # alternate which goes first
            seen[name].append(timed(ways[name], device))
    same = verdicts(seen["alone"][-1][2]) == verdicts(seen["together"][-1][2])
    failed = [x["status"] for runs in seen.values() for x in runs[-1][2] if x["status"] != "done"]
    wall = {n: min(w for w, _, _ in runs) / units for n, runs in seen.items()}
    cpu = {n: min(c for _, c, _ in runs) / units for n, runs in seen.items()}
    # the turns' own ratios, each read from two runs that shared the machine's load
    turns = [a[0] / t[0] for a, t in zip(seen["alone"], seen["together"], strict=True)]
    turn = statistics.median(turns)
    return {"wall": wall, "cpu": cpu, "turns": turn, "same": same, "failed": failed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--ladder", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=32, help="iterations per rung, at most")
    parser.add_argument("--restarts", type=int, default=2, help="chains per unit")
    parser.add_argument("--arm", default="3")
    parser.add_argument("--width", type=int, default=3)
    parser.add_argument("--data-ratio", type=float, default=32.0)
    parser.add_argument("--min-examples", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    default = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    parser.add_argument("--device", nargs="+", default=default)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine())
    for device in args.device:
        where = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
        print(
            f"{where}: arm {args.arm}, width {args.width}, ladder {args.ladder}, {args.restarts} "
            f"chains per unit, at most {args.steps} iterations a rung, data ratio "
            f"{args.data_ratio:g}, best of {args.repeats} interleaved turns"
        )
        print("    U  alone s/unit  together s/unit  alone/together  (cpu time)  (turns)  same")
        for units in args.units:
            m = measure(args, device, units)
            cpu = m["cpu"]["alone"] / m["cpu"]["together"]
            print(
                f"{units:5d}  {m['wall']['alone']:12.3f}  {m['wall']['together']:15.3f}  "
                f"{m['wall']['alone'] / m['wall']['together']:14.2f}  {cpu:10.2f}  "
                f"{m['turns']:7.2f}  {'yes' if m['same'] else 'NO'}"
                + (f"  failed: {m['failed']}" if m["failed"] else ""),
                flush=True,
            )


if __name__ == "__main__":
    main()

"""Where a training step of `blocklab bench`'s networks spends its time, under torch.profiler: E
members as one ensemble (`ensemble.train_ensemble`) and one by one (`train.train`), at one width.

    PYTHONPATH=src python benchmarks/step_profile.py [--width 256] [--lm] [--members 16]
        [--threads 1] [--steps 20] [--top 12] [--loops ensemble sequential]

The networks, data and loops are the bench's own (`throughput._Load`, `_time_ensemble`,
`_time_sequential`): an MLP row (degree 3, depth 4, batch 128) or with `--lm` a language-model row,
which is also why it runs on an older checkout's sources (PYTHONPATH=OLD/src) for a before and
after. Each loop is profiled over runs of n and 2n steps and the two subtracted, operator by
operator, so set-up (initialization, the optimizer's buffers) and evaluation drop out: what is
left is n steps' worth. Printed per loop: milliseconds per model-step, the matmul kernels' share
(bmm, mm, addmm, baddbmm), and the operators that take the most self CPU time per step.
"""

from __future__ import annotations

import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

try:
    from blocklab.bench import throughput
except ImportError:  # an older checkout, whose benchmark is the package `blocklab.bench` itself
    from blocklab import bench as throughput

MATMULS = frozenset({"aten::bmm", "aten::mm", "aten::addmm", "aten::baddbmm"})


def self_times(timer, load, steps: int) -> tuple[dict[str, float], float]:
    """Self CPU seconds per operator over one run of `steps` steps, and the run's wall time."""
    # the profiler's library writes start and stop lines to file descriptor 2: the bench's mute
    with throughput._quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        wall = timer(load, steps)
    times = collections.Counter()
    for e in prof.key_averages():
        times[e.key] += e.self_cpu_time_total / 1e6
    return times, wall


def per_step(timer, load, steps: int) -> tuple[dict[str, float], float]:
    """Self CPU milliseconds per model-step of each operator, and wall milliseconds per
    model-step, from runs of `steps` and 2 `steps` steps, subtracted."""
    timer(load, 3)  # warm-up
    short, short_wall = self_times(timer, load, steps)
    long, long_wall = self_times(timer, load, 2 * steps)
    model_steps = steps * load.cfg.members
    ops = {k: (long[k] - short.get(k, 0.0)) * 1e3 / model_steps for k in long}
    return ops, (long_wall - short_wall) * 1e3 / model_steps


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--lm", action="store_true", help="a language-model row, not an MLP's")
    p.add_argument("--members", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=20, help="n: runs of n and 2n steps (20)")
    p.add_argument("--top", type=int, default=12)
    p.add_argument(
        "--loops", nargs="+", choices=("ensemble", "sequential"), default=["ensemble", "sequential"]
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = throughput.BenchConfig(members=args.members)
    if args.lm:
        load = throughput._Load(
            cfg, args.width, throughput._lm_net, cfg.lm_batch_size, throughput._lm_data(cfg, 1024)
        )
    else:
        load = throughput._Load(
            cfg,
            args.width,
            throughput._net,
            cfg.batch_size,
            throughput._data(args.width, 4096, "cpu"),
        )
    timers = {"ensemble": throughput._time_ensemble, "sequential": throughput._time_sequential}
    kind = "language model" if args.lm else "MLP"
    print(f"{kind} width {args.width}, E = {args.members}, {args.threads} thread(s)")
    for name in args.loops:
        ops, wall = per_step(timers[name], load, args.steps)
        total = sum(ops.values())
        mm = sum(v for k, v in ops.items() if k in MATMULS)
        print(
            f"\n{name}: {wall:.3f} ms per model-step (wall), {total:.3f} ms self CPU; "
            f"matmul kernels {mm / total:.0%}"
        )
        print(f"  {'operator':<36} {'ms/step':>8} {'share':>6}")
        for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"  {k:<36} {v:>8.4f} {v / total:>6.1%}")


if __name__ == "__main__":
    main()

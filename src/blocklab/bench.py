"""How fast the machine trains small networks, all measured in one run.

(a) the float32 matmul ceiling: GFLOP/s of a large square matmul, the best of measurements
    taken before and after every width;
(b) model-steps per second for E small polynomial networks (degree 3, depth 4) trained one after
    another with `train.train` vs at once with `ensemble.train_ensemble`, per width, both with
    the same torch threads (on a CPU the sequential loop is also timed on one thread, since tiny
    steps can be faster there);
(c) the ensemble's achieved GFLOP/s (matmul work of forward and backward) as a fraction of (a).

The networks regress random targets from random inputs through the real trainers (AdamW,
clipping, schedule); validation and test splits are tiny so the steps dominate the time.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch
from torch import nn

from blocklab.ensemble import train_ensemble
from blocklab.models import Net, parse_arm
from blocklab.specs import TrainConfig
from blocklab.tasks.base import Split, TaskData
from blocklab.train import train

WIDTHS = (32, 64, 128, 256)
# ensemble speed-up over the sequential loop, per width; share of the matmul ceiling from a width
SPEEDUP_TARGETS = {32: 8.0, 64: 4.0}
CEILING_TARGET, CEILING_FROM = 0.45, 128


@dataclass(frozen=True)
class BenchConfig:
    members: int = 16
    depth: int = 4
    degree: int = 3
    batch_size: int = 128
    widths: tuple[int, ...] = WIDTHS
    seconds: float = 0.5  # aimed time of the shorter timed run; more steps give steadier figures
    repeats: int = 3  # timed runs per length, the fastest kept
    device: str = "cpu"
    threads: int | None = None  # torch threads; None: torch's default for this machine


def matmul_ceiling(device: str = "cpu", n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of the best of `repeats` n x n float32 matmuls."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    best = float("inf")
    for _ in range(repeats + 2):  # the first two warm up the kernels
        _sync(device)
        start = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _data(width: int, n: int, device: str) -> TaskData:
    g = torch.Generator().manual_seed(0)

    def split(k: int) -> Split:
        x, y = torch.randn(k, width, generator=g), torch.randn(k, 1, generator=g)
        return Split(x.to(device), y.to(device))

    return TaskData(split(n), split(64), split(64), "regression", 1)


def _net(cfg: BenchConfig, width: int, seed: int) -> Net:
    torch.manual_seed(seed)
    arm = parse_arm(str(cfg.degree))
    return Net(arm, cfg.depth, width, width, 1, bias=False, norm="layer").to(cfg.device)


def step_flops(net: nn.Module, batch: int) -> int:
    """Matmul FLOPs of one training step: 2 per multiply-add forward, twice that backward."""
    macs = sum(m.in_features * m.out_features for m in net.modules() if isinstance(m, nn.Linear))
    return 6 * batch * macs


def _time_sequential(cfg: BenchConfig, width: int, steps: int, data: TaskData) -> float:
    train_cfg = TrainConfig(steps=steps, batch_size=cfg.batch_size, eval_points=1)
    nets = [_net(cfg, width, seed) for seed in range(cfg.members)]
    _sync(cfg.device)
    start = time.perf_counter()
    for seed, net in enumerate(nets):
        train(net, data, train_cfg, seed, threshold=0.0)
    _sync(cfg.device)
    return time.perf_counter() - start


def _time_ensemble(cfg: BenchConfig, width: int, steps: int, data: TaskData) -> float:
    train_cfg = TrainConfig(steps=steps, batch_size=cfg.batch_size, eval_points=1)
    nets = [_net(cfg, width, seed) for seed in range(cfg.members)]
    e = cfg.members
    _sync(cfg.device)
    start = time.perf_counter()
    train_ensemble(nets, [data] * e, [train_cfg] * e, list(range(e)), [0.0] * e)
    _sync(cfg.device)
    return time.perf_counter() - start


def _steps_for(cfg: BenchConfig, width: int, data: TaskData, timer) -> int:
    """Steps per member that take about `cfg.seconds`, from a short probe run (which also warms
    up)."""
    probe = 5
    per_step = timer(cfg, width, probe, data) / probe
    return max(5, round(cfg.seconds / max(per_step, 1e-9)))


class _Timing:
    """One loop's model-steps per second at a width. Runs of n and 2n steps are timed and their
    difference taken, so set-up and evaluation, the same in both, drop out; of repeated runs the
    fastest of each length is kept (a shared machine only ever slows a run down, as `timeit`
    takes the minimum)."""

    def __init__(self, cfg: BenchConfig, width: int, data: TaskData, timer, threads=None):
        self.cfg, self.width, self.data, self.timer, self.threads = cfg, width, data, timer, threads
        with _threads(threads):
            self.n = _steps_for(cfg, width, data, timer)
        self.short = self.long = float("inf")

    def run(self) -> None:
        with _threads(self.threads):
            t = self.timer(self.cfg, self.width, self.n, self.data)
            self.short = min(self.short, t)
            t = self.timer(self.cfg, self.width, 2 * self.n, self.data)
            self.long = min(self.long, t)

    @property
    def rate(self) -> float:
        return self.cfg.members * self.n / max(self.long - self.short, 1e-9)


def run_bench(cfg: BenchConfig) -> dict:
    with _threads(cfg.threads):
        ceilings = [matmul_ceiling(cfg.device)]
        rows = []
        for width in cfg.widths:
            data = _data(width, 4096, cfg.device)
            flops = step_flops(_net(cfg, width, 0), cfg.batch_size)
            loops = {
                "sequential": _Timing(cfg, width, data, _time_sequential),
                "ensemble": _Timing(cfg, width, data, _time_ensemble),
            }
            if cfg.device == "cpu" and torch.get_num_threads() > 1:
                # tiny steps can run faster on one thread; shown beside, for a fair reading
                loops["single"] = _Timing(cfg, width, data, _time_sequential, threads=1)
            for _ in range(cfg.repeats):  # interleaved: a slow spell hits every loop alike
                for loop in loops.values():
                    loop.run()
            ceilings.append(matmul_ceiling(cfg.device))
            seq, ens = loops["sequential"].rate, loops["ensemble"].rate
            rows.append(
                {
                    "width": width,
                    "sequential_steps_per_s": seq,
                    "sequential_1_thread_steps_per_s": loops["single"].rate
                    if "single" in loops
                    else None,
                    "ensemble_steps_per_s": ens,
                    "speedup": ens / seq,
                    "ensemble_gflops": ens * flops / 1e9,
                    "flops_per_step": flops,
                }
            )
        threads = torch.get_num_threads()
    # the ceiling is measured before and after every width; the machine's best is the ceiling
    ceiling = max(ceilings)
    for row in rows:
        row["fraction_of_ceiling"] = row["ensemble_gflops"] / ceiling
    checks = targets(rows)
    return {
        "device": _device_name(cfg.device),
        "threads": threads,
        "members": cfg.members,
        "depth": cfg.depth,
        "degree": cfg.degree,
        "batch_size": cfg.batch_size,
        "repeats": cfg.repeats,
        "matmul_ceiling_gflops": ceiling,
        "widths": rows,
        "targets": checks,
        "meets_targets": all(c["met"] for c in checks),
    }


def targets(rows: list[dict]) -> list[dict]:
    """The stated targets against the measured rows: speed-up at small widths, share of the
    matmul ceiling at large ones."""
    out = []
    for row in rows:
        w = row["width"]
        if w in SPEEDUP_TARGETS:
            goal = SPEEDUP_TARGETS[w]
            out.append(
                {"width": w, "what": "speedup", "goal": goal, "value": row["speedup"]}
                | {"met": row["speedup"] >= goal}
            )
        if w >= CEILING_FROM:
            value = row["fraction_of_ceiling"]
            out.append(
                {"width": w, "what": "fraction_of_ceiling", "goal": CEILING_TARGET}
                | {"value": value, "met": value >= CEILING_TARGET}
            )
    return out


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    import platform

    return f"cpu ({platform.processor() or platform.machine()})"


@contextlib.contextmanager
def _threads(n: int | None):
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)

"""The throughput benchmark, `blocklab bench`: how fast the machine trains small networks, all
measured in one run.

(a) the float32 matmul ceiling: GFLOP/s of a large square matmul, the best of measurements
    taken before and after every width;
(b) model-steps per second for E small polynomial networks (degree 3, depth 4) trained one after
    another with `train.train` vs at once with `ensemble.train_ensemble`, per width, both with
    the same torch threads (on a CPU the sequential loop is also timed on one thread, since tiny
    steps can be faster there);
(c) the ensemble's achieved GFLOP/s (matmul work of forward and backward) as a fraction of (a),
    and the matmul share of its step: the time torch's profiler puts in matmul kernels over the
    step's wall time (the rest is elementwise work, normalization, the optimizer and Python);
(d) the same two loops for small transformer language models (token ids, learned positions,
    causal softmax attention, a ReLU 4x feed-forward, layer norm), per width: the networks of
    the depth-width experiment, which run on the ensemble's stacked path like the polynomial ones;
    their GFLOP/s count attention's two (T, T) products beside the linear maps;
(e) certified Levenberg-Marquardt fits per minute (`fitting.fit`, each fit `converged` over its
    iterations, as `fitting.converge` fits a trial's restarts): the restarts of a small degree-3
    network on the teacher task, fitted one after another vs as one batched computation
    (`fitting.batched.BatchedLevenbergMarquardt`), per depth;
(f) where one Levenberg-Marquardt iteration's time goes: residuals, Jacobian, J^T J and solve,
    per depth. (e) and (f) are timed in `bench.fits`.

The networks regress random targets from random inputs, or predict random next tokens, through
the real trainers (AdamW, clipping, schedule); validation and test splits are tiny so the steps
dominate the time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from blocklab.bench.fits import FIT_TASK, fit_rows, split_rows
from blocklab.blocks.softmax_attention import SoftmaxAttention
from blocklab.fitting.ensemble import train_ensemble
from blocklab.fitting.estimate import matmul_rate, sync
from blocklab.fitting.train import precision, train
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape, TrainConfig
from blocklab.tasks.base import Split, TaskData

WIDTHS = (32, 64, 128, 256)
LM_WIDTHS = (16, 32, 64)
FIT_DEPTHS = (2, 6)  # at width 4: P = 121 and 313
SPLIT_DEPTHS = (8, 24)  # at width 4: P = 409 and 1,177, N = 13,088 and 32,768
# ensemble speed-up over the sequential loop, per width; share of the matmul ceiling from a width


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
    # the language models of (d): the depth-width experiment's transformer, made small
    lm_widths: tuple[int, ...] = LM_WIDTHS
    lm_depth: int = 2
    lm_heads: int = 2
    lm_vocab: int = 256
    lm_seq_len: int = 32
    lm_batch_size: int = 32  # sequences per step (the depth-width experiment's quick batch)
    # the fits of (e): a degree sweep's small networks (degree `degree`, layer norm, residual)
    # on the teacher task, N = data_ratio (32) examples per parameter
    fit_depths: tuple[int, ...] = FIT_DEPTHS
    fit_width: int = 4
    fit_restarts: int = 4  # K fits of one network, timed one at a time and batched
    fit_iterations: int = 64  # per fit, the certificate read at half of them
    # (f): one Levenberg-Marquardt iteration's split, per depth, at fit_width
    split_depths: tuple[int, ...] = SPLIT_DEPTHS


def matmul_ceiling(device: str = "cpu", n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of the best of `repeats` n x n matmuls in the dtype the training steps' matmuls
    run in on `device` (`train.precision`): bf16 where they autocast to it, else float32."""
    dtype = torch.bfloat16 if precision(device) == "bf16" else torch.float32
    return matmul_rate(device, dtype, n, repeats)


def _data(width: int, n: int, device: str) -> TaskData:
    g = torch.Generator().manual_seed(0)

    def split(k: int) -> Split:
        x, y = torch.randn(k, width, generator=g), torch.randn(k, 1, generator=g)
        return Split(x.to(device), y.to(device))

    return TaskData(split(n), split(64), split(64), "regression", 1)


def _net(cfg: BenchConfig, width: int, seed: int) -> Net:
    torch.manual_seed(seed)
    arm = parse_arm(str(cfg.degree))
    return Net(arm, NetShape(cfg.depth, width, bias=False, norm="layer"), width, 1).to(cfg.device)


def _lm_data(cfg: BenchConfig, n: int) -> TaskData:
    """Random token sequences, each position's target the next id: the shapes of `text`."""
    g = torch.Generator().manual_seed(0)
    v, t = cfg.lm_vocab, cfg.lm_seq_len

    def split(k: int) -> Split:
        ids = torch.randint(v, (k, t + 1), generator=g)  # (k, T + 1)
        return Split(ids[:, :-1].to(cfg.device), ids[:, 1:].to(cfg.device))  # (k, T) each

    return TaskData(
        split(n), split(8), split(8), "classification", v,
        sequence=True, per_position=True, vocab=v,
    )  # fmt: skip


def _lm_net(cfg: BenchConfig, width: int, seed: int) -> Net:
    torch.manual_seed(seed)
    arm = parse_arm(f"softmax_attention(heads={cfg.lm_heads},causal=true)")
    v, t = cfg.lm_vocab, cfg.lm_seq_len
    net = Net(
        arm, NetShape(cfg.lm_depth, width, norm="layer", ff="relu4x"), v, v, seq_len=t, vocab=v
    )
    return net.to(cfg.device)


@dataclass(frozen=True)
class _Load:
    """What one row times: the networks at a width, their batch and their data."""

    cfg: BenchConfig
    width: int
    make: Callable[[BenchConfig, int, int], Net]
    batch_size: int
    data: TaskData

    def nets(self) -> list[Net]:
        return [self.make(self.cfg, self.width, seed) for seed in range(self.cfg.members)]

    def train_cfg(self, steps: int) -> TrainConfig:
        return TrainConfig(steps=steps, batch_size=self.batch_size, eval_points=1)


def step_flops(net: nn.Module, batch: int) -> int:
    """Matmul FLOPs of one training step: 2 per multiply-add forward, twice that backward."""
    macs = sum(m.in_features * m.out_features for m in net.modules() if isinstance(m, nn.Linear))
    return 6 * batch * macs


def lm_step_flops(net: nn.Module, sequences: int, seq_len: int) -> int:
    """A language model's `step_flops`: its linear maps at every token, and per sequence each
    softmax attention's two (T, T) products per head, the scores and the weighted values (all
    T^2 of them: the causal mask is applied to full products)."""
    attention = sum(
        2 * seq_len**2 * m.heads * m.head_dim
        for m in net.modules()
        if isinstance(m, SoftmaxAttention)
    )
    return step_flops(net, sequences * seq_len) + 6 * sequences * attention


def _time_sequential(load: _Load, steps: int) -> float:
    train_cfg, nets, device = load.train_cfg(steps), load.nets(), load.cfg.device
    sync(device)
    start = time.perf_counter()
    for seed, net in enumerate(nets):
        train(net, load.data, train_cfg, seed, threshold=0.0)
    sync(device)
    return time.perf_counter() - start


def _time_ensemble(load: _Load, steps: int) -> float:
    train_cfg, nets, device = load.train_cfg(steps), load.nets(), load.cfg.device
    e = len(nets)
    sync(device)
    start = time.perf_counter()
    train_ensemble(nets, [load.data] * e, [train_cfg] * e, list(range(e)), [0.0] * e)
    sync(device)
    return time.perf_counter() - start


def _steps_for(load: _Load, timer) -> int:
    """Steps per member that take about `cfg.seconds`, from a short probe run (which also warms
    up)."""
    probe = 5
    per_step = timer(load, probe) / probe
    return max(5, round(load.cfg.seconds / max(per_step, 1e-9)))


class _Timing:
    """One loop's model-steps per second at a width. Runs of n and 2n steps are timed and their
    difference taken, so set-up and evaluation, the same in both, drop out; of repeated runs the
    fastest of each length is kept (a shared machine only ever slows a run down, as `timeit`
    takes the minimum)."""

    def __init__(self, load: _Load, timer, threads=None):
        self.load, self.timer, self.threads = load, timer, threads
        with _threads(threads):
            self.n = _steps_for(load, timer)
        self.short = self.long = float("inf")

    def run(self) -> None:
        with _threads(self.threads):
            self.short = min(self.short, self.timer(self.load, self.n))
            self.long = min(self.long, self.timer(self.load, 2 * self.n))

    @property
    def rate(self) -> float:
        extra = self.long - self.short  # the time of n more steps
        if extra <= 0.1 * self.long:
            # runs too short for the difference to stand above timing noise: the long run alone,
            # set-up included, which can only understate the rate
            return self.load.cfg.members * 2 * self.n / self.long
        return self.load.cfg.members * self.n / extra


# the kernels that do a matmul's work; their self time excludes the composite ops that call them
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})


def matmul_share(load: _Load, steps: int) -> float:
    """Share of the ensemble's wall time spent inside matmul kernels over one profiled run of
    `steps` steps (set-up and evaluation included, a small part of a run of that length)."""
    from torch.profiler import ProfilerActivity, profile

    _time_ensemble(load, 5)  # warm-up
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        wall = _time_ensemble(load, steps)
    mm = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in MATMUL_OPS) / 1e6
    return min(1.0, mm / wall)


def _interleaved(loops: dict[str, _Timing], repeats: int) -> None:
    for _ in range(repeats):  # interleaved: a slow spell hits every loop alike
        for loop in loops.values():
            loop.run()


def lm_rows(cfg: BenchConfig) -> list[dict]:
    """(d): model-steps per second of the language models, one after another and as one
    ensemble, timed interleaved in this run; the speed-up is their ratio."""
    rows = []
    data = _lm_data(cfg, 1024)
    for width in cfg.lm_widths:
        load = _Load(cfg, width, _lm_net, cfg.lm_batch_size, data)
        loops = {"sequential": _Timing(load, _time_sequential)}
        loops["ensemble"] = _Timing(load, _time_ensemble)
        _interleaved(loops, cfg.repeats)
        seq, ens = loops["sequential"].rate, loops["ensemble"].rate
        flops = lm_step_flops(_lm_net(cfg, width, 0), cfg.lm_batch_size, cfg.lm_seq_len)
        rows.append(
            {
                "width": width,
                "sequential": seq,
                "ensemble": ens,
                "speedup": ens / seq,
                "ensemble_gflops": ens * flops / 1e9,
                "flops_per_step": flops,
                "precision": precision(cfg.device),
            }
        )
    return rows


def run_bench(cfg: BenchConfig) -> dict:
    with _threads(cfg.threads):
        ceilings = [matmul_ceiling(cfg.device)]
        rows = []
        for width in cfg.widths:
            load = _Load(cfg, width, _net, cfg.batch_size, _data(width, 4096, cfg.device))
            flops = step_flops(_net(cfg, width, 0), cfg.batch_size)
            loops = {
                "sequential": _Timing(load, _time_sequential),
                "ensemble": _Timing(load, _time_ensemble),
            }
            if cfg.device == "cpu" and torch.get_num_threads() > 1:
                # tiny steps can run faster on one thread; shown beside, for a fair reading
                loops["single"] = _Timing(load, _time_sequential, threads=1)
            _interleaved(loops, cfg.repeats)
            ceilings.append(matmul_ceiling(cfg.device))
            seq, ens = loops["sequential"].rate, loops["ensemble"].rate
            n = loops["ensemble"].n
            share = matmul_share(load, n) if cfg.device == "cpu" else None
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
                    "matmul_share": share,
                    "precision": precision(cfg.device),
                }
            )
        lm = lm_rows(cfg)
        fits = fit_rows(cfg)
        split = split_rows(cfg)
        threads = torch.get_num_threads()
    # the ceiling is measured before and after every width; the machine's best is the ceiling
    ceiling = max(ceilings)
    for row in rows + lm:
        row["fraction_of_ceiling"] = row["ensemble_gflops"] / ceiling
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
        "lm": {
            "depth": cfg.lm_depth,
            "heads": cfg.lm_heads,
            "vocab": cfg.lm_vocab,
            "seq_len": cfg.lm_seq_len,
            "batch_size": cfg.lm_batch_size,
        },
        "lm_widths": lm,
        "fit": {
            "task": FIT_TASK[0],
            "degree": cfg.degree,
            "width": cfg.fit_width,
            "restarts": cfg.fit_restarts,
            "iterations": cfg.fit_iterations,
            "data_ratio": TrainConfig().data_ratio,
        },
        "fit_depths": fits,
        "fit_split": split,
    }


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    import platform

    return f"cpu ({platform.processor() or platform.machine()})"


@contextlib.contextmanager
def _quiet_stderr():
    """The profiler's own library writes start and stop lines to file descriptor 2, past
    Python's sys.stderr: the descriptor is pointed at /dev/null while it runs."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _threads(n: int | None):
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)

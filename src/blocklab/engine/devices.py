"""Which device a run uses, and which GPU each of its pool workers takes.

`--device` is "auto" (CUDA when present), "cpu", "cuda" or "cuda:N". Under "cuda" the workers of
a local pool share the machine's GPUs, each taking the next in turn as it starts
(`processes.init_worker`): a small model's step waits on kernel launches, not arithmetic, so one
GPU serves several processes. Under "cuda:N" all of them use GPU N.
"""

from __future__ import annotations

import re

from blocklab.errors import UserError

# a GPU's speed over one CPU core on the degree sweep's ladder trials, what the estimates of a
# run's time on one GPU read (the measurement: docs/results/degree.md, 2026-11-26, an H200)
GPU_OVER_CORE = 3.1


def spread_out(core_seconds: float | None, cores: int, gpu: bool) -> float | None:
    """Wall seconds of `core_seconds` of fits on `cores` CPU cores, a trial to each, or on one
    GPU (`GPU_OVER_CORE`, trials one at a time); None where no cost is known."""
    if core_seconds is None:
        return None
    return core_seconds / GPU_OVER_CORE if gpu else core_seconds / max(1, cores)


def device_name(requested: str = "auto") -> str:
    """ "auto" (CUDA when present), "cpu", "cuda" or "cuda:N" -> the device to use; anything
    else, or a CUDA device that is not there, is a one-line error. Under "cuda" the workers of a
    local pool share the GPUs, each worker one (`processes.init_worker`); "cuda:N" puts them all
    on GPU N."""
    import torch  # here: `--help` imports this module, and must not wait for torch

    match = re.fullmatch(r"cuda(?::(\d+))?", requested)
    if requested not in ("auto", "cpu") and not match:
        raise UserError(f"--device must be auto, cpu, cuda or cuda:N, got {requested!r}")
    if match and not torch.cuda.is_available():
        raise UserError(f"--device {requested}: no CUDA device is available")
    if match and match.group(1) is not None and int(match.group(1)) >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise UserError(f"--device {requested}: this machine has {count} CUDA device(s)")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def next_slot(path: str) -> int:
    """The number of workers counted in the file `path` before this one (0 for the first),
    counted under an exclusive lock so workers starting at once get different numbers."""
    import fcntl

    with open(path, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        f.seek(0)
        slot = len(f.read())
        f.write("x")
        return slot


def worker_gpu(slot: int, gpus: int) -> int | None:
    """The GPU of the `slot`-th worker started: the GPUs in turn, so each holds an equal share of
    the workers; None on a machine with one GPU or none (every worker uses the default one)."""
    return slot % gpus if gpus > 1 else None

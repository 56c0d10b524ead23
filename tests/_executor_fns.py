"""Work for the executor tests, importable by name in spawned, Ray and submitit workers."""

import os
import signal
import time

import torch


def compute(item: int, device: str) -> dict:
    """Deterministic in the item; also reports what the worker saw."""
    generator = torch.Generator().manual_seed(item)
    x = torch.randn(16, 16, generator=generator, device=device)
    return {"value": float((x @ x.T).trace()), "threads": torch.get_num_threads()}


def die_on_one(item: int, device: str) -> dict:
    if item == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's out-of-memory killer would
    return compute(item, device)


def fail_on_one(item: int, device: str) -> dict:
    if item == 1:
        raise ValueError("item 1 is bad")
    return compute(item, device)


# long enough that a run waiting for these tasks stands out from any load on the machine
HOLD = 900


def slow_after_zero(item: int, device: str) -> dict:
    """Item 0 returns at once, the others would hold their worker for `HOLD` seconds."""
    if item != 0:
        time.sleep(HOLD)
    return compute(item, device)


def surroundings(item: int, device: str) -> dict:
    """What a worker started in: the test's mark in its environment, and its directory."""
    return {"mark": os.environ.get("BLOCKLAB_TEST_MARK"), "cwd": os.getcwd()}

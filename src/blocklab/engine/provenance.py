"""What a trial ran on: versions, commit, device and host, the CUDA runtime and driver on a GPU,
and the TF32 and determinism settings, stored with every trial (its precision is in its metrics)."""

from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

from blocklab import __version__


def _git_commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.lru_cache(maxsize=1)
def provenance(device: str = "cpu") -> dict[str, Any]:
    import numpy

    return {
        "blocklab": __version__,
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else device,
        "host": platform.node(),
        "platform": platform.platform(),
        "cuda": _cuda(device),
        # TF32 matmuls as the process starts (a `--precision tf32` step turns them on for itself)
        "tf32": {
            "matmul": torch.backends.cuda.matmul.allow_tf32,
            "cudnn": torch.backends.cudnn.allow_tf32,
        },
        "deterministic": torch.are_deterministic_algorithms_enabled(),
    }


def _cuda(device: str) -> dict[str, Any] | None:
    """The CUDA runtime, driver and device of a run on a GPU; None on the CPU."""
    if not device.startswith("cuda"):
        return None
    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    return {
        "runtime": torch.version.cuda,
        "driver": _driver(),
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_gb": round(props.total_memory / 2**30, 1),
        "bf16": torch.cuda.is_bf16_supported(),
        "gpus": torch.cuda.device_count(),  # under "cuda" a pool's workers take them in turn
    }


def _driver() -> int | None:
    """The CUDA driver's version as the driver reports it (e.g. 12040), where torch exposes it."""
    read = getattr(torch._C, "_cuda_getDriverVersion", None)
    return int(read()) if read is not None else None

"""What a trial ran on: versions, commit, device and host, stored with every trial."""

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
        "device": device if device != "cuda" else torch.cuda.get_device_name(0),
        "host": platform.node(),
        "platform": platform.platform(),
    }

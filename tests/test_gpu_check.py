"""benchmarks/gpu_check.py, the one command that checks an accelerator: it covers every training
experiment (its run on a device is a timing, not a test: docs/scale.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from blocklab.experiments import EXPERIMENTS

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_runs_every_training_experiments_tiny_form():
    check = _load()
    commands = {c.words for name in EXPERIMENTS.names() for c in EXPERIMENTS.get(name).commands} - {
        "demo"
    }  # the demo is the degree sweep in its demo form: the sweep's tiny form covers it
    trained = {w for w in commands if not w.startswith("seprank")}  # seprank trains nothing
    assert trained == set(check.TINY)
    args = check.parse(["--device", "cpu", "--no-forms", "--precision", "bf16"])
    assert (args.device, args.forms, args.precision) == ("cpu", False, "bf16")
    assert check.parse([]).device == "cuda"

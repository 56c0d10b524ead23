"""`--precision`: the GPU's bf16 step on the CPU too, so CI runs every training experiment's tiny
form in it; and a store never answers one precision with another."""

from __future__ import annotations

import pytest
import torch

import blocklab
from _scripts import load
from blocklab.cli import main
from blocklab.fitting.train import autocast, precision

DW = ["depth-width", "--depths", "1", "2", "--budgets", "800", "3000", "--seeds", "2"]
DW += ["--vocab", "300", "--seq-len", "8", "--n-train", "256", "--max-chars", "100000"]
DW += ["--steps", "6", "--batch-size", "16", "--eval-points", "2", "--quiet", "--workers", "1"]


def _tiny_forms() -> dict[str, list[str]]:
    """benchmarks/gpu_check.py's tiny form of every training experiment, one list for both."""
    module = load("gpu_check")
    # the degree sweep's fits are float64 second-order ones: --precision leaves them as they are
    return {k: v for k, v in module.TINY.items() if k != "degree-sweep"}


def test_the_setting_resolves_per_device():
    assert precision("cpu") == precision("cpu", "fp32") == precision("cpu", "tf32") == "float32"
    assert precision("cpu", "bf16") == "bf16"
    with autocast("cpu", "bf16"):
        assert torch.is_autocast_enabled("cpu")
    with autocast("cpu"):
        assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("name", list(_tiny_forms()))
def test_tiny_forms_finish_every_trial_in_bf16_on_the_cpu(name, tmp_path, capsys):
    argv = [*_tiny_forms()[name], "--quiet", "--workers", "1", "--device", "cpu"]
    assert main([*argv, "--precision", "bf16", "--out", str(tmp_path)]) == 0
    runs = blocklab.load_runs(tmp_path)
    assert len(runs) > 0 and (runs["status"] == "done").all()
    # needle's random-weight trials train nothing, so they record no precision
    assert set(runs["metrics.precision"].dropna()) == {"bf16"}


def test_a_store_is_not_reused_across_precisions(tmp_path, capsys, trials_only):
    out = ["--out", str(tmp_path)]
    trials_only(main, [*DW, *out])
    first = blocklab.load_runs(tmp_path)
    assert set(first["metrics.precision"]) == {"float32"}
    capsys.readouterr()
    trials_only(main, [*DW, *out, "--precision", "bf16"])
    err = capsys.readouterr().err
    assert f"{len(first)} stored trial(s) ran at another precision" in err
    assert "float32 where this run asks bf16" in err
    again = blocklab.load_runs(tmp_path)
    assert set(again["id"]) == set(first["id"]) and set(again["metrics.precision"]) == {"bf16"}
    # asked again at bf16, the store answers: nothing reruns
    trials_only(main, [*DW, *out, "--precision", "bf16"])
    assert "another precision" not in capsys.readouterr().err
    trials_only(main, [*DW, *out, "--precision", "fp32"])  # fp32 on the CPU: float32
    assert "bf16 where this run asks float32" in capsys.readouterr().err


def test_provenance_names_cuda_and_the_matmul_settings(tmp_path):
    from blocklab.engine.provenance import provenance

    prov = provenance("cpu")
    assert prov["cuda"] is None  # on the CPU
    assert set(prov["tf32"]) == {"matmul", "cudnn"} and isinstance(prov["deterministic"], bool)

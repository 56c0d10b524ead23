"""The accelerator path: seed 001's medium and full forms under `--device cuda`, cut to a few
steps and small budgets, train on the GPU, store cuda as their device and agree with the same
trials on the CPU to the tolerance of its bf16 autocast. Skipped where no CUDA device is
present; without one, `--device cuda` is a one-line error (tested here too)."""

from __future__ import annotations

import json

import pytest
import torch

import blocklab
from blocklab.cli import main

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")

# the forms' own settings (vocabulary, sequence length, batch, rate, depths) on a small corpus,
# two budgets and a few steps: the code path of the real run, minutes shorter
SHORT = ["--budgets", "20000", "60000", "--seeds", "2", "--steps", "6", "--eval-points", "2"]
SHORT += ["--max-chars", "300000", "--n-train", "512", "--quiet", "--json", "--workers", "1"]


def _run(capsys, out, *args) -> dict:
    assert main(["depth-width", "--out", str(out), *args, *SHORT]) == 0
    return json.loads(capsys.readouterr().out)


@needs_cuda
@pytest.mark.parametrize("form", ["--medium", "--full"])
def test_depth_width_forms_train_on_cuda_as_on_the_cpu(form, tmp_path, capsys):
    gpu = _run(capsys, tmp_path / "gpu", form, "--device", "cuda")
    cpu = _run(capsys, tmp_path / "cpu", form, "--device", "cpu")
    runs = {name: blocklab.load_runs(tmp_path / name) for name in ("gpu", "cpu")}
    assert set(runs["gpu"]["metrics.device"]) == {"cuda"}
    assert set(runs["cpu"]["metrics.device"]) == {"cpu"}
    assert (runs["gpu"]["status"] == "done").all()
    # same trials (the device is not part of a trial's id), the same initialization and data;
    # the GPU steps in bf16 autocast where it can, so six steps agree to about a percent
    assert set(runs["gpu"]["metrics.precision"]) <= {"bf16", "float32"}
    losses = {
        name: dict(zip(run["id"], run["metrics.test_loss"], strict=True))
        for name, run in runs.items()
    }
    assert losses["gpu"].keys() == losses["cpu"].keys()
    for key, loss in losses["gpu"].items():
        assert loss == pytest.approx(losses["cpu"][key], rel=3e-2)
    assert [s["n"] for s in gpu["summaries"]] == [s["n"] for s in cpu["summaries"]]


@pytest.mark.skipif(CUDA, reason="a CUDA device is present")
def test_cuda_without_a_device_is_one_line(tmp_path, capsys):
    code = main(["depth-width", "--out", str(tmp_path), "--device", "cuda", *SHORT])
    err = capsys.readouterr().err
    assert code == 2 and "no CUDA device is available" in err and err.count("\n") == 1


@pytest.mark.parametrize("device", ["cuda:0", "cuda:7", "gpu", "cuda:x", "cuda:"])
def test_a_device_that_is_not_there_or_not_a_device_is_one_line(device, tmp_path, capsys):
    """ "cuda:N" names one GPU; N past the machine's count, or on a machine with none, and any
    other word are one-line errors (exit 2) naming what is wrong."""
    if CUDA and device == "cuda:0":
        pytest.skip("a CUDA device is present")
    code = main(["depth-width", "--out", str(tmp_path), "--device", device, *SHORT])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    if device.startswith("cuda:") and device[5:].isdigit():
        assert ("no CUDA device" if not CUDA else "CUDA device(s)") in err
    else:
        assert "must be auto, cpu, cuda or cuda:N" in err


def test_each_pool_worker_takes_the_next_gpu_in_turn():
    """Under "cuda" on a machine of several GPUs, workers started one after another take them in
    turn; with one GPU they all use the default one (None: no device is set)."""
    from blocklab.engine.devices import worker_gpu

    assert [worker_gpu(slot, 2) for slot in range(5)] == [0, 1, 0, 1, 0]
    assert [worker_gpu(slot, 3) for slot in range(4)] == [0, 1, 2, 0]
    assert {worker_gpu(slot, 1) for slot in range(4)} == {None}


def test_workers_starting_at_once_count_themselves_in_turn(tmp_path):
    """The count behind the GPU each worker takes: 8 processes at once get 0..7, once each."""
    import multiprocessing

    from blocklab.engine.devices import next_slot

    path = str(tmp_path / "slots")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        slots = pool.map(next_slot, [path] * 8)
    assert sorted(slots) == list(range(8))

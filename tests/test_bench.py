"""`blocklab bench`: the figures are measured, consistent with each other, and checked against
the stated targets; bad input is one line and exit code 2."""

from __future__ import annotations

import json

import pytest
import torch

from blocklab import bench
from blocklab.cli import main
from blocklab.models import Net, parse_arm


def test_step_flops_count_every_linear_map():
    net = Net(parse_arm("3"), 4, 32, 32, 1, bias=False)
    # embedding 32x32, four fused degree-3 projections 32x96, readout 32x1
    macs = 32 * 32 + 4 * 32 * 96 + 32
    assert bench.step_flops(net, 128) == 6 * 128 * macs


def test_a_small_bench_measures_both_loops():
    cfg = bench.BenchConfig(members=3, widths=(8, 16), seconds=0.05, repeats=2, threads=1)
    r = bench.run_bench(cfg)
    assert r["threads"] == 1 and r["members"] == 3
    assert r["matmul_ceiling_gflops"] > 0
    assert [w["width"] for w in r["widths"]] == [8, 16]
    for w in r["widths"]:
        assert w["sequential_steps_per_s"] > 0 and w["ensemble_steps_per_s"] > 0
        assert w["speedup"] == pytest.approx(
            w["ensemble_steps_per_s"] / w["sequential_steps_per_s"]
        )
        gflops = w["ensemble_steps_per_s"] * w["flops_per_step"] / 1e9
        assert w["ensemble_gflops"] == pytest.approx(gflops)
        assert w["fraction_of_ceiling"] == pytest.approx(gflops / r["matmul_ceiling_gflops"])
        assert w["sequential_1_thread_steps_per_s"] is None  # one thread already
    assert torch.get_num_threads() >= 1  # the thread count is restored


def test_targets_are_read_against_the_rows():
    rows = [
        {"width": 32, "speedup": 8.5, "fraction_of_ceiling": 0.1},
        {"width": 64, "speedup": 3.9, "fraction_of_ceiling": 0.3},
        {"width": 128, "speedup": 2.0, "fraction_of_ceiling": 0.45},
        {"width": 256, "speedup": 1.5, "fraction_of_ceiling": 0.44},
    ]
    got = {(t["width"], t["what"]): t["met"] for t in bench.targets(rows)}
    assert got == {
        (32, "speedup"): True,
        (64, "speedup"): False,
        (128, "fraction_of_ceiling"): True,
        (256, "fraction_of_ceiling"): False,
    }


def test_bench_command_prints_json(capsys):
    argv = ["bench", "--widths", "8", "--members", "2", "--seconds", "0.05", "--threads", "1"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["widths"][0]["width"] == 8 and "meets_targets" in out
    assert main(argv) == 0
    assert "matmul ceiling" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [["--members", "0"], ["--widths", "0"], ["--seconds", "0"], ["--device", "tpu"]],
)
def test_bench_rejects_bad_input(argv, capsys):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("blocklab: error:")

"""`blocklab bench`: the figures are measured and consistent with each other, and the command
reports them alone (no goals); bad input is one line and exit code 2. The fit rows are taken at
tiny sizes (depth 1, width 2: P = 25, a few iterations): what is checked is their bookkeeping."""

from __future__ import annotations

import json

import pytest
import torch

from blocklab.bench import throughput
from blocklab.cli import bench as bench_cli
from blocklab.cli import main
from blocklab.fitting.ensemble import Ensemble
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape

pytestmark = pytest.mark.usefixtures("small_matmul_ceiling")  # see conftest


def test_step_flops_count_every_linear_map():
    net = Net(parse_arm("3"), NetShape(4, 32, bias=False, norm="layer"), 32, 1)
    # embedding 32x32, four fused degree-3 projections 32x96, readout 32x1
    macs = 32 * 32 + 4 * 32 * 96 + 32
    assert throughput.step_flops(net, 128) == 6 * 128 * macs


def test_a_language_models_flops_count_attentions_products():
    cfg = throughput.BenchConfig(lm_vocab=16, lm_seq_len=8)
    net = throughput._lm_net(cfg, 8, 0)
    # per layer q, k, v, o 8x8 and the feed-forward 8x32, 32x8; the readout 8x16
    per_token = 2 * (4 * 8 * 8 + 2 * 8 * 32) + 8 * 16
    # per layer and sequence: scores and weighted values, T^2 x 8 each (2 heads of 4)
    per_sequence = 2 * 2 * 8 * 8 * 8
    assert throughput.lm_step_flops(net, 4, 8) == 6 * (4 * 8 * per_token + 4 * per_sequence)


def test_a_small_bench_measures_both_loops():
    cfg = throughput.BenchConfig(
        members=3, widths=(8, 16), seconds=0.02, repeats=2, threads=1, lm_widths=(8,),
        lm_batch_size=4, lm_seq_len=8, lm_vocab=16, fit_depths=(1,), fit_width=2,
        fit_restarts=2, fit_iterations=4, split_depths=(1, 2),
    )  # fmt: skip
    r = throughput.run_bench(cfg)
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
        assert w["precision"] == "float32"  # and the ceiling measured in it
        # the profiled kernels carry the names counted: a renamed kernel would read as zero
        assert 0 < w["matmul_share"] <= 1
    assert [w["width"] for w in r["lm_widths"]] == [8]
    for w in r["lm_widths"]:
        assert set(w) == {
            "width", "sequential", "ensemble", "speedup", "precision", "ensemble_gflops",
            "flops_per_step", "fraction_of_ceiling",
        }  # fmt: skip
        assert w["precision"] == "float32"  # the CPU's default step
        assert w["sequential"] > 0 and w["ensemble"] > 0
        assert w["speedup"] == pytest.approx(w["ensemble"] / w["sequential"])
        gflops = w["ensemble"] * w["flops_per_step"] / 1e9
        assert w["ensemble_gflops"] == pytest.approx(gflops)
        assert w["fraction_of_ceiling"] == pytest.approx(gflops / r["matmul_ceiling_gflops"])
    assert r["lm"] == {"depth": 2, "heads": 2, "vocab": 16, "seq_len": 8, "batch_size": 4}
    assert r["fit"] == {
        "task": "teacher", "degree": 3, "width": 2, "restarts": 2, "iterations": 4,
        "data_ratio": 32.0,
    }  # fmt: skip
    [f] = r["fit_depths"]
    assert f["depth"] == 1 and f["examples"] == 32 * f["params"]
    assert f["sequential_fits_per_min"] > 0 and f["batched_fits_per_min"] > 0
    assert f["speedup"] == pytest.approx(f["batched_fits_per_min"] / f["sequential_fits_per_min"])
    assert 0 <= f["sequential_converged"] <= 2 and 0 <= f["batched_converged"] <= 2
    assert [s["params"] for s in r["fit_split"]] == [f["params"], f["params"] + 12]
    for s in r["fit_split"]:
        assert s["device"] == "cpu" and s["jacobian_path"] == "layers"
        assert min(s[k] for k in ("residuals_ms", "jacobian_ms", "normal_ms", "solve_ms")) > 0
        p, n = s["params"], s["examples"]
        # syrk's FLOPs, one triangle, over the matmul rate measured beside it
        assert s["gemm_fraction"] == pytest.approx(
            n * p * (p + 1) / s["normal_ms"] / 1e6 / s["gemm_gflops"]
        )
    assert torch.get_num_threads() >= 1  # the thread count is restored


def test_language_models_take_the_stacked_path():
    cfg = throughput.BenchConfig(lm_vocab=16, lm_seq_len=8)
    nets = [throughput._lm_net(cfg, 8, seed) for seed in range(2)]
    assert Ensemble(nets).path == "stacked"


def test_bench_command_prints_json(capsys):
    argv = ["bench", "--widths", "8", "--members", "2", "--seconds", "0.02", "--threads", "1"]
    argv += ["--repeats", "1", "--lm-widths", "8", "--lm-batch-size", "2"]
    fits = ["--fit-depths", "1", "--fit-width", "2", "--fit-restarts", "2"]
    fits += ["--fit-iterations", "2", "--split-depths", "1"]
    assert main([*argv, *fits, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["widths"][0]["width"] == 8
    assert not {"targets", "meets_targets"} & set(out)  # what was measured, not a goal
    assert [w["width"] for w in out["lm_widths"]] == [8] and out["lm"]["batch_size"] == 2
    assert [f["depth"] for f in out["fit_depths"]] == [1] and out["fit"]["restarts"] == 2
    assert main([*argv, *fits]) == 0
    text = capsys.readouterr().out
    assert "converged fits: K = 2 restarts" in text and "one Levenberg-Marquardt iteration" in text
    # each row says where the ensemble trained slower than one by one in that run (planted)
    out["widths"][0]["speedup"], out["lm_widths"][0]["speedup"] = 0.55, 1.5
    lines = bench_cli._table(out).splitlines()
    [mlp] = [line for line in lines if "0.55x" in line]
    [lm] = [line for line in lines if "1.50x" in line]
    assert mlp.endswith("ensemble slower than one by one") and "slower" not in lm
    assert [s["params"] for s in out["fit_split"]] == [out["fit_depths"][0]["params"]]
    # none: no language-model rows, no fit rows
    assert main([*argv[:-4], "--lm-widths", "--fit-depths", "--split-depths"]) == 0
    text = capsys.readouterr().out
    assert "matmul ceiling" in text and "language models:" not in text
    assert "converged fits" not in text and "Levenberg-Marquardt iteration" not in text
    assert "target" not in text and "MISSED" not in text


@pytest.mark.parametrize(
    "argv",
    [
        ["--members", "0"],
        ["--widths", "0"],
        ["--seconds", "0"],
        ["--device", "tpu"],
        ["--lm-widths", "0"],
        ["--lm-batch-size", "0"],
        ["--fit-depths", "0"],
        ["--fit-restarts", "0"],
        ["--fit-iterations", "0"],
    ],
)
def test_bench_rejects_bad_input(argv, capsys):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("blocklab: error:")


def test_a_difference_lost_in_noise_gives_the_long_runs_rate():
    """n more steps that time as nothing (or less) must not read as a rate of billions."""
    from types import SimpleNamespace

    timing = throughput._Timing.__new__(throughput._Timing)
    timing.load = SimpleNamespace(cfg=SimpleNamespace(members=4))
    timing.n, timing.short, timing.long = 10, 1.0, 0.99
    assert timing.rate == pytest.approx(4 * 20 / 0.99)
    timing.short, timing.long = 1.0, 1.5
    assert timing.rate == pytest.approx(4 * 10 / 0.5)

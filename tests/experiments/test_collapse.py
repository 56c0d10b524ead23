"""The rank-collapse experiment (seed 003, after Dong et al. 2021): config checks, the plan, the
verdict logic, a tiny stored and resumable run, the known answer at random init, and the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from blocklab.cli import main
from blocklab.engine import executors
from blocklab.experiments import collapse
from blocklab.experiments.collapse import CollapseConfig
from blocklab.experiments.collapse import analysis as stats
from blocklab.experiments.collapse import report as report
from blocklab.experiments.collapse.analysis import LOG_FLOOR
from blocklab.fitting import network
from blocklab.specs import TrainConfig
from blocklab.store import Store

SHORT = TrainConfig(steps=10, batch_size=32, eval_points=2)
TINY = dict(depth=3, width=8, seq_len=8, n_train=256, seeds=2, train=SHORT)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"depth": 0}, "depth must be >= 1"),
        ({"seeds": 0}, "seeds must be >= 1"),
        ({"alpha": 1.0}, "alpha"),
        ({"block": "softmax_atention"}, "did you mean 'softmax_attention'"),
        ({"block": "poly"}, "acts on each token alone"),
        ({"variants": ("pure", "skp")}, "did you mean 'skip'"),
        ({"variants": ("pure+skip",)}, "stands alone"),
        ({"variants": ("skip+mlp", "mlp+skip")}, "same network"),
        ({"variants": ("skip+skip",)}, "repeats"),
        ({"variants": ()}, "variants needs at least 1"),
        ({"task": "teacher"}, "not a sequence task"),
        ({"seq_len": 3}, "q < seq_len"),  # qsa's own check, q = 4
        ({"block": "mixer", "heads": 2}, "heads"),
    ],
)
def test_config_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CollapseConfig(**kwargs)


def test_plan_maps_variants_to_switches():
    cfg = CollapseConfig(variants=("pure", "skip", "mlp", "norm", "skip+mlp+norm"), **TINY)
    planned = collapse.plan(cfg)
    assert len(planned) == 5 * 2
    switches = {
        keys["variant"]: (
            spec.shape.residual,
            spec.shape.ff,
            spec.shape.norm,
            spec.shape.activation,
        )
        for keys, spec in planned
    }
    assert switches == {
        "pure": (False, "none", "none", "none"),
        "skip": (True, "none", "none", "none"),
        "mlp": (False, "relu4x", "none", "none"),
        "norm": (False, "none", "layer", "none"),
        "skip+mlp+norm": (True, "relu4x", "layer", "none"),
    }
    for _, spec in planned:
        assert spec.measures == ("collapse",)
        assert (spec.shape.depth, spec.shape.width, spec.task) == (3, 8, "qsa")
        assert spec.task_options == {"seq_len": 8, "n_train": 256}
    seeds = {}
    for keys, spec in planned:
        seeds.setdefault(keys["variant"], []).append(spec.seed)
    assert all(s == [0, 1] for s in seeds.values())  # paired: the same seeds everywhere


def test_variants_of_a_seed_share_their_init():
    """The paired tests rely on it: a seed gives every variant the same embedding and blocks."""
    cfg = CollapseConfig(variants=("pure", "skip+mlp+norm"), **TINY)
    nets = {}
    for keys, spec in collapse.plan(cfg):
        if spec.seed == 0:
            data = network.task_data(spec.task, spec.task_options, 0)
            torch.manual_seed(spec.seed)
            nets[keys["variant"]] = network.build_model(spec, data)
    a, b = nets["pure"], nets["skip+mlp+norm"]
    assert torch.equal(a.embed.weight, b.embed.weight)
    for la, lb in zip(a.layers, b.layers, strict=True):
        assert torch.equal(la.block.q.weight, lb.block.q.weight)
        assert torch.equal(la.block.o.weight, lb.block.o.weight)


def test_log_ratio_clips_exact_collapse_at_the_floor():
    logs = stats.log_ratio([1.0, 1e-3, 0.0])
    assert logs[0] == 0 and math.isclose(logs[1], -3) and logs[2] == LOG_FLOOR
    assert stats.slope(np.array([0.0, -1.0, -2.0])) == pytest.approx(-1.0)
    assert stats.depth_mean(np.array([0.0, -1.0, -3.0])) == pytest.approx(-2.0)


def _synthetic(variant_curves):
    """curves() output from {variant: [per-seed (L + 1,) log10 curves]}, init stage only."""
    return {
        (v, "init", "composite"): {s: np.asarray(c, float) for s, c in enumerate(cs)}
        for v, cs in variant_curves.items()
    }


def test_verdicts_follow_the_tests():
    cfg = CollapseConfig(variants=("pure", "skip", "mlp", "norm"), seeds=4)
    noise = [0.0, 0.01, -0.02, 0.015]
    logs = _synthetic(
        {
            "pure": [[0, -2 + e, -4 + e, -6 + e] for e in noise],
            "skip": [[0, 0.1 + e, 0.1, 0.1] for e in noise],  # clearly above pure
            "mlp": [[0, -2 - e, -4 + e, -6] for e in noise],  # the same as pure
            "norm": [[0, 0.5 * e, e, -e] for e in noise],  # flat: no trend, above pure
        }
    )
    tested = {(f.variant, f.test): f for f in stats.findings(cfg, logs)}
    assert tested[("pure", "slope")].direction == -1
    assert tested[("pure", "slope")].agrees is stats.Agreement.YES
    assert tested[("norm", "paired")].cause == "norm" and tested[("norm", "paired")].direction == 1
    assert tested[("mlp", "paired")].agrees is stats.Agreement.NOT_SHOWN
    found = {f["setting"]: f for f in report.finding_dicts(list(tested.values()), {})}
    assert found["pure: trend with depth"]["verdict"] == "falls with depth"
    assert found["pure: trend with depth"]["agrees"] == "yes"
    assert found["norm: trend with depth"]["verdict"] == "no significant trend"
    assert found["skip vs pure"]["verdict"] == "above pure"
    assert found["skip vs pure"]["agrees"] == "yes"
    assert found["mlp vs pure"]["verdict"] == "no significant difference"
    # layer norm is predicted not to help: measured above pure disagrees
    assert found["norm vs pure"]["verdict"] == "above pure"
    assert found["norm vs pure"]["agrees"] == "no"
    assert "skip: trend with depth" not in found  # skips are compared, not trend-tested
    for f in found.values():
        assert f["p"] <= f["p_holm"] <= 1


def test_one_seed_is_untestable_and_says_so():
    cfg = CollapseConfig(variants=("pure", "skip"), seeds=1, depth=3)
    found = stats.findings(cfg, _synthetic({"pure": [[0, -2, -4, -6]], "skip": [[0, 0, 0, 0]]}))
    assert [(f.variant, f.test) for f in found] == [("pure", "slope"), ("skip", "paired")]
    assert all(f.agrees is stats.Agreement.UNTESTED and math.isnan(f.p_holm) for f in found)
    rows = report.finding_dicts(found, {})
    assert {(r["verdict"], r["agrees"]) for r in rows} == {
        ("untestable (fewer than 2 seeds)", "not tested")
    }
    assert rows[0]["measured"] == "slope -2.00 decades/layer; log10 ratio at layer 3: -6.00"
    assert rows[1]["predicted"].startswith("above pure: the skip keeps short paths")


def test_bound_check_can_fail():
    def rec(seed, median, bound):
        c = {"median": median, "bound_log10_median": bound}
        return {
            "seed": seed,
            "status": "done",
            "measures": {"collapse": {"init": {"composite": c}}},
        }

    ok = stats.bound_check([rec(0, [1.0, 0.5, 0.0], [0.3, 1.0])], 2)
    assert ok["init"]["violations"] == [] and ok["init"]["vacuous_layers"] == [1, 2]
    (f,) = report.bound_dicts({"init": ok["init"]})
    assert f["verdict"].startswith("holds") and "vacuous" in f["verdict"]
    bad = stats.bound_check([rec(0, [1.0, 0.5, 0.1], [-2.0, -4.0])], 2)
    assert bad["init"]["violations"] == [{"seed": 0, "layer": 1}, {"seed": 0, "layer": 2}]
    (f,) = report.bound_dicts({"init": bad["init"]})
    assert f["verdict"].startswith("VIOLATED") and f["agrees"] == "no"


def test_tiny_run_is_stored_reported_and_resumes(tmp_path):
    cfg = CollapseConfig(variants=("pure", "skip", "norm"), **TINY)
    store = Store(tmp_path)
    trials = collapse.run(cfg, store, resources=executors.Resources(device="cpu"), progress=False)
    assert not trials.failed and len(trials.rows) == 3 * 2
    result = report.analyze(cfg, trials)
    assert result.rows == trials.rows and result.failed == []
    stamps = {r["id"]: r["finished_at"] for r in store.records(experiment="collapse")}
    assert len(stamps) == 6
    layers = {s["layer"] for s in result.summaries}
    assert layers == set(range(cfg.depth + 1))
    assert {(s["variant"], s["stage"]) for s in result.summaries} == {
        (v, st) for v in cfg.variants for st in ("init", "trained")
    }
    assert result.paths["shares"] == pytest.approx([1 / 8, 3 / 8, 3 / 8, 1 / 8])
    assert set(result.bound) == {"init", "trained"}  # pure single-head softmax: defined
    assert all(f["verdict"] for f in result.findings)
    tests = [f for f in result.findings if f["p"] is not None]
    assert len(tests) == 2 * (2 + 2)  # per stage: trends of pure, norm; skip, norm vs pure
    checks = [f for f in result.findings if f["test"] == "check"]
    assert len(checks) == 2 and all(f["verdict"].startswith("holds") for f in checks)

    text = report.write(tmp_path, cfg, trials).path.read_text()
    assert "## Prediction and measurement" in text and "seed 003 bound" in text
    for name in ("collapse_ratio_vs_layer.png", "collapse_path_shares.png"):
        assert (tmp_path / name).stat().st_size > 0

    again = collapse.run(cfg, store, resources=executors.Resources(device="cpu"), progress=False)
    assert {r["id"]: r["finished_at"] for r in store.records(experiment="collapse")} == stamps
    assert report.analyze(cfg, again).summaries == result.summaries


def test_pure_attention_collapses_at_init_and_skip_keeps_it_up(tmp_path):
    """A known answer, at the quick form's shape (depth 6, width 32, T = 16): pure
    attention's ratio falls far below 1 with depth at random init; with skips it stays near 1.
    Ignoring the residual connection would make both collapse."""
    cfg = CollapseConfig(variants=("pure", "skip"), n_train=256, seeds=3, train=SHORT)
    trials = collapse.run(
        cfg, Store(tmp_path), resources=executors.Resources(device="cpu"), progress=False
    )
    result = report.analyze(cfg, trials)
    last = {
        (r["variant"], r["seed"]): r["measures"]["collapse"]["init"]["composite"]["median"][-1]
        for r in result.rows
    }
    assert len(last) == 6
    for seed in range(3):
        assert last[("pure", seed)] < 1e-3, last
        assert 0.7 < last[("skip", seed)] < 1.5, last
    found = {(f["part"], f["setting"]): f for f in result.findings}
    assert found[("init", "pure: trend with depth")]["verdict"] == "falls with depth"
    assert found[("init", "skip vs pure")]["verdict"] == "above pure"


# --- command line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--depth", "0"],
        ["--block", "softmax_atention"],
        ["--block", "poly"],
        ["--variants", "pure", "skp"],
        ["--width", "x"],
    ],
)
def test_cli_bad_input_is_one_line(args, capsys, tmp_path):
    code = main(["collapse", *args, "--out", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("blocklab: error:") and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()  # nothing is created for bad input


@pytest.mark.slow
def test_cli_end_to_end_json(tmp_path, capsys):
    args = ["collapse", "--depth", "3", "--width", "8", "--seq-len", "8", "--n-train", "256"]
    args += ["--seeds", "2", "--variants", "pure", "skip", "--steps", "10", "--batch-size", "32"]
    args += ["--eval-points", "2", "--workers", "2", "--quiet", "--json", "--out", str(tmp_path)]
    assert main(args) == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) >= {"findings", "summaries", "paths", "bound", "failed", "report", "config"}
    assert payload["failed"] == [] and payload["config"]["depth"] == 3
    assert all(f["verdict"] for f in payload["findings"])
    assert (tmp_path / "report.md").exists() and (tmp_path / "collapse_path_shares.png").exists()
    n = len(Store(tmp_path).records())
    assert n == 4
    assert main(args) == 0  # a rerun resumes: nothing new is trained
    assert len(Store(tmp_path).records()) == n
    assert json.loads(capsys.readouterr().out)["summaries"] == payload["summaries"]


@pytest.mark.slow
def test_networks_that_never_trained_are_flagged_in_every_summary(tmp_path, capsys):
    """A learning rate of 1e-12 leaves the networks as they were drawn: their loss never moves
    and their accuracy stays at chance, and the text, the status, report.md and the page say so."""
    args = ["collapse", "--depth", "2", "--width", "8", "--seq-len", "8", "--n-train", "128"]
    args += ["--seeds", "2", "--variants", "pure", "--steps", "4", "--lr", "1e-12"]
    args += ["--batch-size", "32", "--eval-points", "2", "--workers", "1", "--quiet"]
    assert main([*args, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("AT CHANCE after training in 1 of 1 settings: pure (test accuracy ")
    status = out.strip().splitlines()
    assert "LOSS NEVER MOVED in 2 of 2 trials: pure" in out
    line = json.loads((tmp_path / "run.json").read_text())["status"]["line"]
    assert line.startswith("FINDINGS: AT CHANCE after training in 1 of 1 settings: pure ")
    assert "; LOSS NEVER MOVED in 2 of 2 trials: pure; " in line and status[-1] in line
    report = (tmp_path / "report.md").read_text()
    assert f"**{line}**" in report and "At chance: pure: " in report
    assert "Loss never moved: pure (2 of 2 trials)." in report
    assert "AT CHANCE after training" in (tmp_path / "index.html").read_text()

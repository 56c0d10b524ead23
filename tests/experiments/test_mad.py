"""`blocklab mad`: the blocks it runs and how (causal, at the budget), the suite's statistics on
rows whose answers are known, the published findings read from the numbers, the bottleneck
readout that compression needs, and the command end to end."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch

from _specs import small_trial
from blocklab.cli import main
from blocklab.engine import trial
from blocklab.errors import UserError
from blocklab.experiments import mad
from blocklab.experiments.mad.analysis import suite
from blocklab.experiments.mad.report import suite as mad_report
from blocklab.models import Net, block_params, parse_arm
from blocklab.specs import NetShape, TrainConfig


def test_the_default_blocks_are_every_causal_token_mixer():
    blocks = mad.default_blocks()
    expected = {"softmax_attention", "linear_attention", "linearized_attention", "poly_attention"}
    expected |= {"tensor_attention", "mixer", "quadratic_mixing"}
    assert expected <= set(blocks)
    # per-token blocks, and a wrapper that needs a factory, are not in it
    assert not {"mlp", "poly", "module", "mixing_module"} & set(blocks)


def test_blocks_run_causal_or_are_refused():
    arm = mad.causal_arm("softmax_attention(heads=2)")
    assert arm.kwargs == {"heads": 2, "causal": True}
    assert mad.causal_arm("mixer").kwargs == {"causal": True}
    for text in ("mlp", "softmax_attention(causal=false)"):
        with pytest.raises(UserError):
            mad.causal_arm(text)


def test_nominal_degrees_count_the_multiplied_projections():
    degree = {b: mad.nominal_degree(mad.causal_arm(b), 8) for b in mad.default_blocks()}
    assert degree["softmax_attention"] == degree["linear_attention"] == 3
    assert degree["linearized_attention"] == 3 and degree["tensor_attention"] == 5
    assert degree["poly_attention"] == 5  # n = 2: (q k)^2 v
    assert degree["mixer"] == 1 and degree["quadratic_mixing"] == 2


def test_every_block_gets_the_width_nearest_the_budget():
    cfg = mad.MadConfig(tasks=("icr", "compression"), budget=12000)
    for (block, task, level), (arm, shape, opts) in mad.plan(cfg).items():
        seq_len = mad.ladder(task, cfg.levels)[level].get("seq_len")
        cost = block_params(arm, cfg.depth, shape.width, False, shape.ff, seq_len)
        step = block_params(arm, cfg.depth, shape.width + 1, False, shape.ff, seq_len) - cost
        assert abs(cost - cfg.budget) <= step, (block, task, level)
        assert opts["n_train"] == cfg.n_train and arm.kwargs["causal"] is True


def _rows(table):
    """Rows from {(block, task, level): [accuracy per seed]}."""
    return [
        {"block": b, "task": t, "level": lv, "seed": s, "status": "done", "test_metric": acc}
        for (b, t, lv), accs in table.items()
        for s, acc in enumerate(accs)
    ]


def test_scores_average_cells_and_bootstrap_within_them():
    table = {("a", "x", 0): [1.0, 1.0], ("a", "y", 0): [0.5, 0.7], ("b", "x", 0): [0.2, 0.2]}
    table[("b", "y", 0)] = [0.2, 0.2]
    scores = suite.scores(_rows(table), {"a": 3, "b": 1})
    assert scores["a"]["score"] == pytest.approx((1.0 + 0.6) / 2)
    assert 0.75 <= scores["a"]["ci_low"] <= scores["a"]["score"] <= scores["a"]["ci_high"] <= 0.85
    assert scores["b"]["ci_low"] == scores["b"]["ci_high"] == pytest.approx(0.2)  # no spread
    assert scores["a"]["degree"] == 3
    results = {(r["block"], r["task"]): r for r in suite.results(_rows(table))}
    assert results[("a", "x")]["ci_high"] == 1.0 and results[("a", "y")]["n"] == 2
    assert results[("a", "y")]["ci_low"] >= 0  # the t-interval, clipped where it passes 0


def test_correlation_and_paired_tests_read_the_scores():
    table = {(b, f"t{i}", 0): [acc + 0.01 * i] * 2 for i in range(8) for b, acc in
             (("low", 0.2), ("mid", 0.5), ("high", 0.8))}  # fmt: skip
    scores = suite.scores(_rows(table), {"low": 1, "mid": 2, "high": 3})
    corr = suite.correlation(scores)
    assert corr["rho"] == pytest.approx(1.0) and corr["against"] == "degree"
    # h(d) = ln d / d rises from 1 to e: degrees 1, 2, 3 rank alike under h
    assert suite.correlation(scores, "h(degree)")["rho"] == pytest.approx(1.0)
    pairs = {(p["a"], p["b"]): p for p in suite.paired(_rows(table), alpha=0.05)}
    assert pairs[("high", "low")]["better"] == "high" and pairs[("high", "low")]["cells"] == 8
    assert pairs[("high", "low")]["p_holm"] < 0.05
    assert suite.correlation({"a": {"degree": 1, "score": 0.5}})["rho"] is None


def test_a_block_without_a_finished_cell_has_no_aggregate():
    lost = {"block": "a", "task": "y", "level": 0, "seed": 0, "status": "diverged"}
    rows = _rows({("a", "x", 0): [0.5, 0.6]}) + [{**lost, "test_metric": None}]
    assert suite.scores(rows, {})["a"]["score"] is None


def _trials(table, degrees):
    return SimpleNamespace(rows=_rows(table), degrees=degrees, failed=[], lr_choice={})


def test_published_findings_follow_the_numbers():
    cfg = mad.MadConfig(tasks=("icr", "mqar"))
    att, lin = "softmax_attention", "linear_attention"
    table = {(att, "icr", 0): [1.0, 0.99], (att, "icr", 1): [0.97, 0.95]}
    table |= {(lin, "mqar", 0): [0.9, 0.92, 0.91], (lin, "mqar", 1): [0.4, 0.45, 0.42]}
    table |= {(att, "mqar", 0): [1.0, 1.0, 1.0], (att, "mqar", 1): [0.98, 0.99, 1.0]}
    found = {f["claim"]: f for f in mad_report.published(cfg, _trials(table, {att: 3, lin: 3}))}
    status = {c: f["status"] for c, f in found.items()}
    assert status["attention solves in-context recall at every difficulty level"] == "agrees"
    degrade = [c for c in status if c.startswith("linear attention degrades")][0]
    assert status[degrade] == "agrees" and "0.423" in found[degrade]["evidence"]
    assert status["attention beats linear attention on MQAR at equal size"] == "agrees"
    assert sum(s == "not tested here" for s in status.values()) == 2
    # the same claims against numbers that contradict them
    table[(att, "icr", 1)] = [0.5, 0.6]
    table[(lin, "mqar", 1)] = [0.9, 0.92, 0.91]
    both = _trials(table, {att: 3, lin: 3})
    found = {f["claim"]: f["status"] for f in mad_report.published(cfg, both)}
    assert found["attention solves in-context recall at every difficulty level"] == "disagrees"
    assert found[degrade] == "disagrees"
    # without linear attention its claims are not tested
    only = {k: v for k, v in table.items() if k[0] == att}
    found = {f["claim"]: f["status"] for f in mad_report.published(cfg, _trials(only, {att: 3}))}
    assert found[degrade] == "not tested here"


def test_a_test_that_cannot_run_on_one_seed_tests_nothing():
    """One seed per level leaves the one-sided Welch tests without a spread: their claims are
    not tested here, with the reason, never "disagrees"."""
    cfg = mad.MadConfig(tasks=("icr", "mqar"), seeds=1)
    att, lin = "softmax_attention", "linear_attention"
    table = {(lin, "mqar", 0): [0.9], (lin, "mqar", 1): [0.4], (att, "mqar", 1): [1.0]}
    found = {f["claim"]: f for f in mad_report.published(cfg, _trials(table, {att: 3, lin: 3}))}
    for claim in (
        "linear attention degrades on MQAR as key-value pairs grow at fixed width",
        "attention beats linear attention on MQAR at equal size",
    ):
        assert found[claim]["status"] == "not tested here", claim
        assert "2 seeds or more" in found[claim]["evidence"]


def test_a_bottleneck_reads_every_position_from_the_last():
    arm = parse_arm("softmax_attention(causal=true)")
    net = Net(arm, NetShape(1, 8, norm="layer"), 16, 16, seq_len=6, vocab=16, bottleneck=True)
    x = torch.randint(16, (3, 6))
    out = net(x)
    assert out.shape == (3, 6, 16)
    # every position's output is read from the last state: changing the last token alone changes
    # the first position's output, which a per-position readout under causal attention cannot
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % 16
    assert not torch.allclose(net(y)[:, 0], out[:, 0])
    with pytest.raises(UserError):
        Net(
            arm,
            NetShape(1, 8, norm="layer"),
            16,
            16,
            seq_len=6,
            vocab=16,
            bottleneck=True,
            pooled=True,
        )


def test_compression_trains_alike_in_an_ensemble_and_alone():
    train = TrainConfig(steps=15, batch_size=16, lr=3e-3, eval_points=3)
    opts = {"seq_len": 8, "n_train": 128, "n_val": 32, "n_test": 32}

    def spec(seed):
        arm, shape = mad.causal_arm("mixer"), NetShape(1, 8, norm="layer")
        return small_trial(arm, seed, train, task="compression", options=opts, shape=shape)

    specs = [spec(0), spec(1)]
    together = trial.run_group(specs, "cpu")
    for s, record in zip(specs, together, strict=True):
        assert record["metrics"]["ensemble"] == {"members": 2, "path": "stacked"}
        alone = trial.run_trial(s, "cpu")["metrics"]
        assert record["metrics"]["test_metric"] == pytest.approx(alone["test_metric"], abs=1e-6)
        assert record["metrics"]["test_loss"] == pytest.approx(alone["test_loss"], rel=1e-4)


@pytest.mark.slow
def test_mad_end_to_end(tmp_path, capsys):
    args = ["mad", "--tasks", "icr", "mqar", "--blocks", "softmax_attention", "mixer"]
    args += ["--seeds", "2", "--n-train", "128", "--budget", "3000", "--lr-grid", "3e-3", "1e-2"]
    args += ["--steps", "10", "--batch-size", "16", "--eval-points", "2", "--out", str(tmp_path)]
    assert main([*args, "--quiet", "--workers", "1", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    cells = {(r["block"], r["task"], r["level"]) for r in payload["results"]}
    assert cells == {(b, t, lv) for b in ("softmax_attention", "mixer") for t in ("icr", "mqar")
                     for lv in (0, 1)}  # fmt: skip
    assert all(r["n"] == 2 and 0 <= r["ci_low"] <= r["mean"] <= r["ci_high"] <= 1
               for r in payload["results"])  # fmt: skip
    assert set(payload["scores"]) == {"softmax_attention", "mixer"}
    learning = {(c["block"], c["task"], c["level"]): c for c in payload["learning"]}
    assert set(learning) == cells and all(0 < c["chance"] < 0.5 for c in learning.values())
    line = payload["status"]["line"]
    assert ("AT CHANCE" in line) == any(c["at_chance"] for c in learning.values())
    assert payload["scores"]["mixer"]["degree"] == 1
    assert set(payload["correlation"]) == {"rho", "p", "against"}
    assert {f["status"] for f in payload["published"]} <= {"agrees", "disagrees", "not tested here"}
    assert set(payload["lr_choice"]) == {f"{b}/{t}" for b in ("softmax_attention", "mixer")
                                         for t in ("icr", "mqar")}  # fmt: skip
    assert (tmp_path / "mad_heat_map.png").exists()
    assert (tmp_path / "mad_accuracy_vs_level.png").exists()
    report = (tmp_path / "report.md").read_text()
    assert "Aggregate score per block" in report and "Paired tests" in report
    edges = [k for k, c in payload["lr_choice"].items() if c["at_edge"]]
    assert f"Learning rates: {len(edges)} of 4 (block, task) choices at an edge" in report
    # the time: every final trial and every rate the search tried beside the chosen one
    t = payload["trial_time"]
    others = [sec for c in payload["lr_choice"].values() for r, sec in c["seconds"].items()
              if r != f"{c['lr']:g}"]  # fmt: skip
    assert t["trainings"] == 16 + len(others) and t["search"] == pytest.approx(sum(others))
    assert sum(t["by_block"].values()) == pytest.approx(t["total"])
    assert sum(t["by_task"].values()) == pytest.approx(t["total"]) and t["search"] < t["total"]
    assert (
        f"Trial time (the trainings' own seconds, summed over processes): {t['total']:.0f} s"
        in report
    )


def test_trial_time_counts_the_search_once():
    rows = [
        {"block": "a", "task": "x", "seconds": 2.0},
        {"block": "b", "task": "x", "seconds": 5.0},
    ]
    rows.append({"block": "a", "task": "y", "seconds": 1.0})
    # the chosen rate's search trial is the seed-0 row: only the other rates add time
    choice = {"a/x": {"lr": 0.01, "seconds": {"0.003": 3.0, "0.01": 2.0, "0.03": 4.0}}}
    choice["b/x"] = {"lr": 0.003, "seconds": {"0.003": 5.0, "0.01": None}}
    t = suite.trial_time(rows, choice)
    assert t["total"] == 15.0 and t["search"] == 7.0 and t["trainings"] == 5
    assert t["by_block"] == {"a": 10.0, "b": 5.0} and list(t["by_task"].items()) == [
        ("x", 14.0), ("y", 1.0)]  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [["mad", "--tasks", "qsa"], ["mad", "--blocks", "mlp"], ["mad", "--tasks", "icrr"]]
    + [["mad", "--budget", "0"], ["mad", "--blocks", "softmax_attention(causal=false)"]],
)
def test_bad_mad_input_is_one_line(args, capsys, tmp_path):
    assert main([*args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1


def test_config_round_trip():
    cfg = mad.MadConfig.full()
    assert cfg.levels == 5 and dataclasses.replace(cfg, levels=2).levels == 2

"""The language-model path: token networks, the depth-width sweep and the advisor's command."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from blocklab.analysis import depth_width as dw
from blocklab.cli import main
from blocklab.engine import trial
from blocklab.errors import UserError
from blocklab.experiments import depth_width
from blocklab.experiments.depth_width import analysis as claims
from blocklab.experiments.depth_width import report as report
from blocklab.fitting import network, train
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape
from blocklab.tasks.base import Split

ARM = parse_arm("softmax_attention(heads=2,causal=true)")


def lm(depth=2, width=8, vocab=50, seq_len=6) -> Net:
    return Net(
        ARM,
        NetShape(depth, width, norm="layer", ff="relu4x"),
        0,
        vocab,
        seq_len=seq_len,
        vocab=vocab,
    )


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BLOCKLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_token_network_shapes_and_counts():
    net = lm(depth=3, width=8, vocab=50, seq_len=6)
    out = net(torch.randint(0, 50, (4, 6)))  # (B, T) ids
    assert out.shape == (4, 6, 50)
    counts = net.param_counts()
    assert counts["blocks"] == 12 * 3 * 8**2  # seed 001's 12 L dx^2, bias-free
    assert counts["embed"] == 50 * 8 + 6 * 8  # token table and learned positions


def test_token_network_is_causal_and_uses_positions():
    torch.manual_seed(0)
    net = lm().eval()
    x = torch.randint(0, 50, (2, 6))
    y = x.clone()
    y[:, 4] = (y[:, 4] + 1) % 50
    a, b = net(x), net(y)  # (B, T, V)
    assert torch.allclose(a[:, :4], b[:, :4])  # the past never sees the future
    assert not torch.allclose(a[:, 4:], b[:, 4:])
    same = torch.full((1, 6), 7)  # one token everywhere: only the positions tell them apart
    out = net(same)[0]
    assert not torch.allclose(out[0], out[5])
    loss = out.sum()
    loss.backward()
    assert net.pos.grad is not None and net.pos.grad.abs().sum() > 0


def test_token_network_refuses_vector_inputs():
    with pytest.raises(UserError):
        Net(ARM, NetShape(1, 8, norm="layer"), 0, 50, vocab=50)


def test_evaluation_batches_bound_memory_and_keep_results(monkeypatch):
    torch.manual_seed(0)
    net = lm()
    split = Split(torch.randint(0, 50, (37, 6)), torch.randint(0, 50, (37, 6)))
    whole = train.evaluate(net, split, "classification")
    monkeypatch.setattr(train, "EVAL_OUTPUTS", 6 * 50 * 4)  # 4 sequences per batch
    assert train.evaluate(net, split, "classification") == pytest.approx(whole, rel=1e-5)


def test_measures_refuse_token_inputs():
    data = network.task_data("text", SMALL_TEXT, 0)
    spec = depth_width.plan(CONFIG)[0][1]
    spec = dataclasses.replace(spec, measures=("collapse",))
    with pytest.raises(UserError, match="token"):
        trial.take_measures(spec, network.build_model(spec, data), data)


def test_widths_follow_the_budget():
    for budget in (3000, 1e5, 3e6):
        for depth in (1, 2, 5):
            w = depth_width.width_for(budget, depth, 2)
            assert w % 2 == 0
            # nearest even width: no other even width comes closer to the budget's dx
            exact = math.sqrt(budget / (12 * depth))
            assert abs(w - exact) <= 1 + 1e-9
    assert depth_width.width_for(1, 4, 2) == 2  # at least one dimension per head


SMALL_TEXT = {"vocab": 300, "seq_len": 8, "n_train": 256, "max_chars": 100_000}
CONFIG = depth_width.DepthWidthConfig(
    depths=(1, 2),
    budgets=(800, 3000),
    seeds=2,
    vocab=300,
    seq_len=8,
    n_train=256,
    max_chars=100_000,
    train=train.TrainConfig(steps=6, batch_size=16, eval_points=2),
)


def test_plan_covers_depths_budgets_and_seeds():
    planned = depth_width.plan(CONFIG)
    shapes = {(s.shape.depth, s.shape.width) for _, s in planned}
    assert shapes == {(d, depth_width.width_for(b, d, 2)) for d in (1, 2) for b in (800, 3000)}
    assert len(planned) == len(shapes) * 2
    sizes = [s.budget for _, s in planned]
    assert sizes == sorted(sizes, reverse=True)  # the largest first, for two workers' sake
    for keys, s in planned:
        assert s.budget == keys["budget"] == 12 * s.shape.depth * s.shape.width**2
        assert s.shape.ff == "relu4x" and s.shape.norm == "layer" and s.shape.residual
        assert s.task == "text" and s.task_options == SMALL_TEXT


def test_the_medium_form_holds_the_quick_forms_trials():
    """A medium run in the quick form's directory resumes from its trials, and adds depths."""
    quick, medium = depth_width.DepthWidthConfig(), depth_width.DepthWidthConfig.medium()
    ids = {cfg: {s.id for _, s in depth_width.plan(cfg)} for cfg in (quick, medium)}
    assert ids[quick] < ids[medium]
    assert len(medium.depths) >= 4 > len(quick.depths) and min(medium.budgets) < min(quick.budgets)


def test_fit_needs_two_depths():
    def search(depth, width):
        t = dw.Transition(depth, depth + 1, width, 2.0, 12 * depth * width**2)
        worse = dw.Comparison(t.n_params, width, 3.0, 0.01, 2.9, 0.01, 0.004, True)
        return dw.TransitionSearch(depth, depth + 1, t, dw.FOUND, (worse,))

    none = dw.TransitionSearch(3, 4, None, dw.NEVER_WORSE, ())
    fit, why = claims.fit_found([search(1, 20.0), none])
    assert fit is None and "1 transition" in why
    fit, why = claims.fit_found([search(1, 20.0), search(2, 30.0), none])
    assert why is None and fit.n_points == 2 and fit.b == pytest.approx(math.log(1.5))
    paper_width, paper_error = dw.transition_width(1)
    assert claims.transitions_json([search(1, 20.0), none]) == [
        {
            "depth_shallow": 1,
            "depth_deep": 2,
            "width": 20.0,
            "width_error": 2.0,
            "params": 4800.0,
            "p": 0.004,
            "paper_width": paper_width,
            "paper_width_error": paper_error,
        }
    ]
    # eq. 11 at L = 1: e^(5.039 + 0.0555) = 163, the error from the paper's covariance
    assert paper_width == pytest.approx(163.1, abs=0.1)
    assert paper_error == pytest.approx(163.1 * (9.4e-4 + 1.7e-6 - 7.48e-5) ** 0.5, rel=1e-3)


def test_the_quick_form_is_powered_for_its_planned_comparison():
    """4 seeds per point find the planned 0.09 nats at level 0.01 with power >= 0.99; 2 would
    not, and a run's power is reported at its own pooled seed std too."""
    cfg = depth_width.DepthWidthConfig()
    summaries = [{"n": 4, "std": 0.03}, {"n": 4, "std": 0.02}, {"n": 1, "std": float("nan")}]
    power = claims.power_json(cfg, summaries)
    assert {"effect", "sd", "n", "power"} <= set(power)
    assert (power["effect"], power["sd"], power["n"]) == (0.09, 0.017, 4) and power["power"] > 0.99
    assert power["measured_sd"] == pytest.approx((0.0013 / 2) ** 0.5)
    assert power["power_at_measured_sd"] < power["power"]  # its pooled std is above the planned
    two = claims.power_json(dataclasses.replace(cfg, seeds=2), summaries)
    assert two["power"] < 0.6


@pytest.mark.slow
def test_depth_width_command_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["depth-width", "--out", str(out), "--quiet", "--workers", "1", "--json"]
    args += ["--depths", "1", "2", "--budgets", "800", "3000", "--seeds", "2"]
    args += ["--vocab", "300", "--seq-len", "8", "--n-train", "256", "--max-chars", "100000"]
    args += ["--steps", "6", "--batch-size", "16", "--eval-points", "2"]
    assert main(args) == 0
    payload = json.loads(capsys.readouterr().out)
    assert len(payload["summaries"]) == 4 and all(s["n"] == 2 for s in payload["summaries"])
    assert all(s["mean"] > 0 for s in payload["summaries"])  # test losses in nats per token
    assert [f["part"] for f in payload["findings"]][0] == "transition"
    # one entry per transition the findings report as found
    found = [f for f in payload["findings"] if f["measured"].startswith("transition at")]
    assert len(payload["transitions"]) == len(found)
    for t in payload["transitions"]:
        assert {"depth_shallow", "depth_deep", "width", "width_error", "params", "p"} <= set(t)
        assert t["p"] < 0.01  # the level the command defaults to
    assert payload["power"]["n"] == 2 and 0 < payload["power"]["power"] < 1
    assert "Depth-to-width" in (out / "report.md").read_text()
    for fig in ("depth_width_loss.png", "depth_width_fit.png", "depth_width_projection.png"):
        assert (out / fig).stat().st_size > 0
    # the fit file exists exactly when the run found a fit
    assert (out / "fit.json").exists() == (payload["fit"] is not None)
    # a rerun resumes: every trial is already stored, the findings are the same
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["summaries"] == payload["summaries"]


def test_advise_prints_the_papers_advice(capsys):
    assert main(["advise", "--params", "1T", "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)["advice"]
    depth, width = dw.optimal_shape(1e12)
    assert advice["depth"] == depth and advice["width"] == pytest.approx(width)
    assert advice["extrapolated"] is True
    assert main(["advise", "--params", "1.3B", "--depth", "100"]) == 0
    text = capsys.readouterr().out
    assert f"depth L = {dw.optimal_shape(1.3e9).depth} " in text
    n, dn = dw.n_transition(100)
    assert f"N_transition(100) = {n:.4g}" in text and f"({100 * dn / n:.1f}%" in text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1T", 1e12),
        ("175B", 175e9),
        ("760m", 760e6),
        ("300k", 3e5),
        ("1_000_000", 1e6),
        ("2e9", 2e9),
    ],
)
def test_advise_reads_counts(text, value, capsys):
    assert main(["advise", "--params", text, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["advice"]["n_params"] == value


def test_advise_uses_a_fit_from_a_run(tmp_path, capsys):
    fit = dw.fit_transitions([1, 2, 3], [20, 40, 80], [2, 3, 5], source="a small run")
    (tmp_path / "fit.json").write_text(json.dumps(fit.to_dict()))
    assert main(["advise", "--params", "1e6", "--fit", str(tmp_path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["fit"]["source"] == "a small run"
    assert got["advice"]["depth"] == dw.advise(1e6, fit).depth != dw.advise(1e6).depth


@pytest.mark.parametrize(
    "args",
    [
        ["advise"],
        ["advise", "--params", "lots"],
        ["advise", "--params", "-5"],
        ["advise", "--params", "inf"],
        ["advise", "--depth", "0"],
        ["advise", "--params", "1e9", "--fit", "/nonexistent/dir"],
    ],
)
def test_advise_bad_input_is_one_line(args, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("blocklab: error:") and err.count("\n") == 1


def test_advise_refuses_a_broken_fit_file(tmp_path, capsys):
    bad = tmp_path / "fit.json"
    for text in ("{not json", json.dumps({"a": 1.0})):
        bad.write_text(text)
        assert main(["advise", "--params", "1e9", "--fit", str(bad)]) == 2
        assert capsys.readouterr().err.count("\n") == 1
    flat = dw.fit_transitions([1, 2], [50, 40], [2, 2]).to_dict()  # width falls with depth
    bad.write_text(json.dumps(flat))
    assert main(["advise", "--params", "1e9", "--fit", str(bad)]) == 2
    assert "b =" in capsys.readouterr().err


def test_best_depth_per_budget_matches_budgets_by_what_was_asked():
    def summary(depth, nominal, mean):
        width = depth_width.width_for(nominal, depth, 2)
        return {"depth": depth, "nominal": nominal, "budget": 12 * depth * width**2, "mean": mean}

    rows = [summary(1, 3000, 4.0), summary(2, 3000, 4.2), summary(1, 30000, 3.5)]
    rows += [summary(2, 30000, 3.4), summary(3, 30000, 3.45), summary(3, 90000, 3.0)]
    for r in rows:
        r["n"] = 3
    best = claims.best_depths(rows)
    # 90000 has one depth only: nothing to compare
    assert best == [
        {"budget": 3000, "depth": 1, "loss": 4.0},
        {"budget": 30000, "depth": 2, "loss": 3.4},
    ]


def test_report_draws_a_found_fit(tmp_path, monkeypatch):
    summaries, searches = [], []
    for depth in (1, 2, 3):
        for nominal in (3000, 30000):
            width = depth_width.width_for(nominal, depth, 2)
            summaries.append(
                {"depth": depth, "width": width, "nominal": nominal, "mean": 4.0, "std": 0.1}
                | {"budget": 12 * depth * width**2, "n": 3, "diverged": 0, "accuracy": 0.2}
                | {"total_params": 2 * 12 * depth * width**2}
            )
    for depth, width in ((1, 20.0), (2, 30.0)):
        t = dw.Transition(depth, depth + 1, width, 2.0, 12 * depth * width**2)
        worse = dw.Comparison(t.n_params, width, 4.1, 0.01, 4.0, 0.01, 0.002, True)
        searches.append(dw.TransitionSearch(depth, depth + 1, t, dw.FOUND, (worse,)))
    fit, error = claims.fit_found(searches)
    cfg = depth_width.DepthWidthConfig(depths=(1, 2, 3), budgets=(3000, 30000))
    best = claims.best_depths(summaries)
    trials = depth_width.DepthWidthTrials([{"status": "done"}], [], {"source": "test"})
    result = report.Result(
        trials.rows,  # a report needs one finished trial
        summaries,
        searches,
        fit,
        error,
        best,
        report.findings(claims.claims(searches, fit, best, report.design_sizes(cfg)), fit, best),
        [],
        {"source": "test"},
        claims.power_json(cfg, summaries),
        claims.transitions_json(searches),
    )
    # the analysis of these hand-made summaries, as the report receives it
    monkeypatch.setattr(report, "analyze", lambda cfg, trials: result)
    text = report.write(tmp_path, cfg, trials).path.read_text()
    assert f"b = {fit.b:.4f}" in text and "transition at dx = 20 +- 2" in text
    assert "p = 0.002 at N = 4.8e+03" in text and "dx = 163 +- 5" in text  # beside eq. 11
    assert "with probability 0.9993" in text  # the planned power, in the notes
    assert (tmp_path / "depth_width_fit.png").stat().st_size > 0

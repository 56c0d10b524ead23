"""The attention experiments: equal-parameter plans, the needle's random-weight criterion, and
tiny end-to-end runs through the command line (stored, reported, resumable)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import pytest
import torch
from scipy import stats

from blocklab.analysis.power import seeds_for, t_test_power
from blocklab.cli import main
from blocklab.experiments import _trials, needle, sanford_match, sanford_qsa
from blocklab.experiments.degree_sweep import SHAPE
from blocklab.experiments.needle import analysis as needle_analysis
from blocklab.experiments.needle import report as needle_report
from blocklab.experiments.sanford_qsa import analysis as qsa
from blocklab.experiments.sanford_qsa import report as qsa_report
from blocklab.models import parse_arm
from blocklab.specs import NetShape, TrainConfig

SHORT = TrainConfig(steps=20, batch_size=32, eval_points=2)


def test_qsa_plan_matches_parameters():
    cfg = sanford_qsa.QsaConfig(qs=(2,), dims=(2, 8), seeds=2, n_train=64, train=SHORT)
    planned = sanford_qsa.plan(cfg)
    assert len(planned) == 2 * 2 * 2  # dims x (attention, fully connected) x seeds
    totals = {}
    for keys, spec in planned:
        totals[(keys["m"], keys["model"])] = _trials.total_params(
            "qsa", spec.task_options, spec.arm, spec.shape
        )
    for m in (2, 8):
        att, flat = totals[(m, "attention")], totals[(m, "fully connected")]
        # the nearest width: one width step of the flat net changes its count by ~N F + N d
        assert abs(flat - att) / att < 0.1, (m, att, flat)


@pytest.mark.parametrize("width", [6, 12, 24])
def test_match_arms_cost_the_same(width):
    shape = NetShape(depth=1, width=width, norm="layer", ff="relu4x")
    counts = {
        model: _trials.total_params("match3", {"n_train": 64}, arm, shape)
        for model, arm in sanford_match.match_arms(width)
    }
    assert len(set(counts.values())) == 1, counts


def test_match_widths_must_allow_equal_cost():
    with pytest.raises(ValueError, match="multiples of 3"):
        sanford_match.MatchConfig(widths=(8,))


def test_a_row_names_each_count_once_and_its_keys_win():
    """Every training experiment's row: the budgeted count `block_params`, every parameter
    `total_params`, the embedding and readout `other_params`; the experiment's keys come last."""
    arm = parse_arm("softmax_attention")
    spec = _trials.spec("qsa", {"seq_len": 6, "n_train": 64}, arm, NetShape(), SHORT, 1)
    counts = {"embed": 10, "blocks": 60, "readout": 5, "total": 80}
    rec = {"status": "done", "metrics": {"params": counts, "metric": "accuracy"}, "curves": {}}
    row = _trials.row(spec, rec, model="attention", budget=7)
    assert (row["block_params"], row["total_params"], row["other_params"]) == (60, 80, 15)
    assert "params" not in row and "layer_params" not in row
    assert row["model"] == "attention" and row["budget"] == 7 and row["teacher"] is None
    assert row["metric"] == "accuracy" and row["curve_step"] == [] and row["seed"] == 1


def test_best_threshold_accuracy():
    y = torch.tensor([0, 0, 1, 1])
    assert needle.best_threshold_accuracy(torch.tensor([0.0, 1, 2, 3]), y) == 1.0
    assert needle.best_threshold_accuracy(torch.tensor([3.0, 2, 1, 0]), y) == 1.0  # reversed
    assert needle.best_threshold_accuracy(torch.tensor([0.0, 2, 1, 3]), y) == 0.75
    assert needle.best_threshold_accuracy(torch.zeros(4), y) == 0.5


def test_needle_random_weights_are_deterministic_and_favour_softmax():
    cfg = needle.NeedleConfig(draws=30, samples=40)
    long = needle.random_setting(cfg, 128, 3.0)
    assert long == needle.random_setting(cfg, 128, 3.0)
    # the needle's weight under the identity kernel is tau1 / T ~ 2% at T = 128, under exp ~14%
    assert long["softmax"] > long["linearized"]


def test_needle_verdicts_follow_the_tests():
    cfg = needle.NeedleConfig(seq_lens=(8,), tau1s=(3.0,), trained_seq_lens=(), draws=100)

    def row(model, k):
        return {"model": model, "seq_len": 8, "tau1": 3.0, "successes": k, "fraction": k / 100}

    def tests(rows):
        return needle_analysis.tests(cfg, rows, [])

    rows = [row("softmax", 90), row("linear", 10), row("linearized", 88)]
    found = {f["model"]: f for f in needle_report.findings(cfg, tests(rows))}
    assert found["linear"]["verdict"] == "softmax better" and found["linear"]["p_holm"] < 1e-10
    assert found["linearized"]["verdict"] == "no significant difference"
    rows = [row("softmax", 10), row("linear", 90), row("linearized", 10)]
    found = {f["model"]: f for f in needle_report.findings(cfg, tests(rows))}
    assert found["linear"]["verdict"] == "linear better"


def test_needle_status_leads_with_the_tally_then_where_softmax_differs():
    cfg = needle.NeedleConfig(seq_lens=(8, 32), tau1s=(2.0, 3.0), draws=100)

    def t(part, model, seq_len, tau1, better):
        return {"part": part, "model": model, "seq_len": seq_len, "tau1": tau1, "better": better}

    tested = [t("random weights", "linear", n, x, None) for n in (8, 32) for x in (2.0, 3.0)]
    tested[3]["better"] = tested[2]["better"] = "softmax"
    tested += [t("random weights", "linearized", 8, 2.0, "linearized")]
    tested += [
        t("trained", "linearized", 64, 3.0, "softmax"),
        t("trained", "linear", 64, 3.0, None),
    ]
    line = needle_report.status(cfg, tested).line
    assert line == (
        "FINDINGS: softmax better in 3 of 7 settings, worse in 1, no significant difference in "
        "the other 3 (Holm p < 0.05); worse than linearized: random weights at T=8 (tau1=2); "
        "better than linearized: trained at T=64; better than linear: random weights at T=32 "
        "(tau1=2, 3)"
    )
    many = [t("random weights", "linear", n, 2.0, "softmax") for n in (2, 4, 8, 16, 32, 64)]
    assert needle_report.status(cfg, many, shown=2).line.endswith(
        "at T=2 (tau1=2), T=4 (tau1=2) and 4 more"
    )


def test_needle_analysis_adds_the_intervals_and_tests_the_counts():
    """The run returns success counts only; the report's analysis adds each share's interval
    and the tests."""
    cfg = needle.NeedleConfig(seq_lens=(8,), tau1s=(3.0,), trained_seq_lens=(), draws=100)
    counts = (("softmax", 90), ("linear", 10), ("linearized", 88))
    random = [
        {"model": m, "seq_len": 8, "tau1": 3.0, "successes": k, "draws": 100} for m, k in counts
    ]
    result = needle_report.analyze(cfg, needle.NeedleTrials([], [], random))
    by = {r["model"]: r for r in result.random}
    assert by["softmax"]["fraction"] == 0.9 and by["softmax"]["lo"] < 0.9 < by["softmax"]["hi"]
    assert by["linear"]["hi"] < by["linearized"]["lo"]
    assert result.summaries == [] and result.rows == [] and result.failed == []
    verdicts = {f["model"]: f["verdict"] for f in result.findings}
    assert verdicts == {"linear": "softmax better", "linearized": "no significant difference"}


def test_qsa_findings_read_the_threshold_crossing():
    cfg = sanford_qsa.QsaConfig(qs=(1, 4), dims=(2, 4, 8), seq_len=16)

    def s(q, m, mean):
        return {"q": q, "m": m, "model": "attention", "mean": mean, "n": 3}

    summaries = [s(1, 2, 0.95), s(1, 4, 0.97), s(1, 8, 0.99)]
    summaries += [s(4, 2, 0.2), s(4, 4, 0.5), s(4, 8, 0.93)]
    found = qsa_report.findings(cfg, qsa.thresholds(cfg, summaries))
    assert [f["first_m"] for f in found[:2]] == [2, 8]
    assert "non-decreasing" in found[-1]["measured"] and "NOT" not in found[-1]["measured"]


def test_qsa_status_labels_each_first_m_with_its_q():
    cfg = sanford_qsa.QsaConfig(qs=(1, 2, 4), dims=(2, 4, 8), seq_len=16)

    def s(q, m, mean):
        return {"q": q, "m": m, "model": "attention", "mean": mean, "n": 3}

    summaries = [s(1, 2, 0.95), s(2, 2, 0.5), s(2, 4, 0.95), s(4, 8, 0.5)]
    line = qsa_report.status(cfg, qsa.thresholds(cfg, summaries)).line
    assert line == (
        "FINDINGS: first m reaching 90% (of m up to 8): q=1: 2, q=2: 4, q=4: none; "
        "non-decreasing in q; the successes respect m >= q/log2 N"
    )
    summaries = [s(1, 4, 0.95), s(2, 2, 0.95)]
    line = qsa_report.status(cfg, qsa.thresholds(cfg, summaries)).line
    assert "q=1: 4, q=2: 2, q=4: none; NOT non-decreasing in q" in line


# --- end to end through the CLI -----------------------------------------------------------

TINY_TRAIN = ["--steps", "20", "--batch-size", "32", "--eval-points", "2", "--quiet", "--json"]


def _run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _trials_in(path):
    with sqlite3.connect(path / "blocklab.sqlite") as conn:
        return conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0]


@pytest.mark.slow
def test_sanford_qsa_end_to_end(tmp_path, capsys):
    args = ["sanford", "qsa", "--qs", "1", "2", "--dims", "2", "4", "--seeds", "2"]
    args += ["--seq-len", "6", "--n-train", "256", "--out", str(tmp_path), *TINY_TRAIN]
    code, out, _ = _run(capsys, *args)
    assert code == 0
    payload = json.loads(out)
    assert {(s["q"], s["m"], s["model"]) for s in payload["summaries"]} == {
        (q, m, model) for q in (1, 2) for m in (2, 4) for model in ("attention", "fully connected")
    }
    assert all(s["n"] + s["diverged"] == 2 for s in payload["summaries"])
    assert [f["q"] for f in payload["findings"]] == [1, 2, "all"]
    line = payload["status"]["line"]
    assert "first m reaching 90% (of m up to 4): q=1: " in line and ", q=2: " in line
    # every (q, m, model) read for learning, and the status flags what it finds
    learning = payload["learning"]
    assert [(c["q"], c["m"], c["model"]) for c in learning] == [
        (s["q"], s["m"], s["model"]) for s in payload["summaries"]
    ]
    assert ("AT CHANCE" in line) == any(c["at_chance"] for c in learning)
    report = (tmp_path / "report.md").read_text()
    assert "## Prediction and measurement" in report and "m >= q/log2 N" in report
    assert (tmp_path / "qsa_accuracy_vs_m.png").stat().st_size > 0
    n = _trials_in(tmp_path)
    assert n == 16
    code, out2, _ = _run(capsys, *args)  # a rerun resumes: nothing new is trained
    assert code == 0 and _trials_in(tmp_path) == n
    assert json.loads(out2)["summaries"] == payload["summaries"]


@pytest.mark.slow
def test_sanford_match_end_to_end(tmp_path, capsys):
    args = ["sanford", "match", "--widths", "6", "--seeds", "2", "--n-train", "512"]
    args += ["--seq-len", "5", "6", "--lr-grid", "3e-3", "1e-2", "--lr-extend", "0"]
    args += ["--n-test", "256", "--out", str(tmp_path), *TINY_TRAIN]
    code, out, _ = _run(capsys, *args)
    assert code == 0
    payload = json.loads(out)
    findings = payload["findings"]
    assert {(f["task"], f["seq_len"], f["model"]) for f in findings} == {
        (t, n, m) for t in ("match2", "match3") for n in (5, 6) for m in ("standard", "tensor")
    }
    sizes = {s["model"]: s["total_params"] for s in payload["summaries"] if s["task"] == "match3"}
    assert sizes["standard"] == sizes["tensor"]
    assert all(s["params"] == s["total_params"] for s in payload["summaries"])  # pinned key
    # every construction, at both lengths, measured on fresh data
    built = {(c["task"], c["block"], c["seq_len"]): c for c in payload["constructions"]}
    assert set(built) == {
        (t, b, n)
        for t, b in (("match2", "softmax_attention"), ("match2", "tensor_attention"))
        + (("match3", "tensor_attention"),)
        for n in (5, 6)
    }
    assert all(c["accuracy"] == 1.0 and c["n_test"] == 256 for c in built.values())
    assert {c["width"] for c in built.values() if c["task"] == "match3"} == {5}
    constructed = {(f["task"], f["model"]): f["constructed"] for f in findings}
    assert constructed[("match3", "standard")] is None and constructed[("match3", "tensor")] == 1
    # a rate chosen per (task, N, width, block) from the grid, and the trials ran at it
    assert len(payload["lr_choice"]) == len(findings)
    assert all(c["lr"] in (3e-3, 1e-2) for c in payload["lr_choice"].values())
    assert all(0 <= s["plateaued"] <= 1 for s in payload["summaries"])
    assert [w for w in payload["solving_widths"] if w["task"] == "match3"]
    report = (tmp_path / "report.md").read_text()
    assert "modulus M = 9" in report and "does not solve" in report
    assert "constructed: tensor attention solves Match3 at m = 5" in report
    assert "standard attention has no construction for Match3" in report
    # a paired test per task, N and width, each task its own Holm family
    tests = payload["tests"]
    assert {(t["task"], t["seq_len"]) for t in tests} == {
        (t, n) for t in ("match2", "match3") for n in (5, 6)
    }
    assert all(t["n"] == 2 and t["p_holm"] >= t["p"] for t in tests)
    assert payload["power"]["n"] == 2 and payload["power"]["comparisons"] == 2
    line = payload["status"]["line"]
    assert line.startswith("FINDINGS: ") and "Match2, 2 widths: " in line
    learning = {(c["task"], c["seq_len"], c["width"], c["model"]): c for c in payload["learning"]}
    assert set(learning) == {(f["task"], f["seq_len"], f["width"], f["model"]) for f in findings}
    assert all(c["chance"] > 0.4 for c in learning.values())  # binary labels, near balanced
    assert ("AT CHANCE" in line) == any(c["at_chance"] for c in learning.values())
    # one rate fixes the search, so a --lr would say nothing: it is refused, in one line
    code, _, err = _run(capsys, *args, "--lr", "1e-3")
    assert code == 2 and "lr_grid" in err and err.count("\n") == 1


@pytest.mark.slow
def test_needle_end_to_end(tmp_path, capsys):
    args = ["needle", "--seq-lens", "4", "32", "--tau1s", "3", "--draws", "10", "--samples", "20"]
    args += ["--trained-seq-lens", "8", "--seeds", "2", "--out", str(tmp_path), *TINY_TRAIN]
    code, out, _ = _run(capsys, *args)
    assert code == 0
    payload = json.loads(out)
    parts = [(f["part"], f["model"]) for f in payload["findings"]]
    assert parts == [
        (part, model)
        for model in ("linearized", "linear")
        for part in ("random weights", "random weights", "trained")
    ]
    assert all(f["p_holm"] is None or 0 <= f["p_holm"] <= 1 for f in payload["findings"])
    line = payload["status"]["line"]
    assert "softmax better in " in line and " of 6 settings, worse in " in line
    learning = payload["learning"]
    assert [(c["seq_len"], c["model"], c["chance"]) for c in learning] == [
        (8, m, 0.5) for m in ("softmax", "linear", "linearized")
    ]
    assert ("AT CHANCE" in line) == any(c["at_chance"] for c in learning)
    assert "Prediction and measurement" in (tmp_path / "report.md").read_text()
    n = _trials_in(tmp_path)  # 2 random settings + 3 models x 2 seeds
    assert n == 8
    code, _, _ = _run(capsys, *args)
    assert code == 0 and _trials_in(tmp_path) == n


@pytest.mark.parametrize(
    "args",
    [
        ["sanford", "qsa", "--qs", "16"],
        ["sanford", "qsa", "--dims", "0"],
        ["sanford", "match", "--widths", "7"],
        ["sanford", "match", "--tasks", "match4"],
        ["sanford", "nope"],
        ["needle", "--tau1s", "0.5"],
        ["needle", "--draws", "0"],
    ],
)
def test_bad_experiment_input_is_one_line(args, capsys, tmp_path):
    code, out, err = _run(capsys, *args, "--out", str(tmp_path))
    assert code == 2
    assert err.startswith("blocklab: error:") and err.count("\n") == 1, err


def test_degree_sweep_accepts_attention_arms():
    from blocklab.experiments.degree_sweep import DegreeSweepConfig, plan
    from blocklab.specs import TrainConfig

    cfg = DegreeSweepConfig(
        task="match2",
        train=TrainConfig(optimizer="adam"),  # a classification task
        degrees=(),
        baselines=(
            "quadratic_mixing",
            "linearized_attention",
            "poly_attention(n=2)",
            "tensor_attention",
            "softmax_attention",
        ),
        budgets=(2048,),
        budget_tol=0.02,
        shape=replace(SHAPE, width=16),
    )
    shapes = plan.shapes(cfg)
    degrees = {label: arm.degree for (_, label), (arm, _) in shapes.items()}
    assert degrees == {
        "quadratic_mixing": 2,
        "linearized_attention": 3,
        "poly_attention(n=2)": 5,
        "tensor_attention": None,
        "softmax_attention": None,
    }
    for _, shape in shapes.values():
        assert abs(shape.deviation) <= 0.02
    with pytest.raises(Exception, match="sequence"):
        plan.shapes(DegreeSweepConfig(task="teacher", baselines=("softmax_attention",)))
    assert parse_arm("poly_attention(n=2)").degree == 5


def test_match_tests_are_paired_and_holm_corrected_within_each_task():
    from blocklab.experiments.sanford_match import MatchConfig
    from blocklab.experiments.sanford_match import analysis as match
    from blocklab.experiments.sanford_match import report as report

    cfg = MatchConfig(widths=(6, 12), seeds=4)
    tensor = {6: [0.80, 0.82, 0.79, 0.85], 12: [0.70, 0.71, 0.69, 0.72]}
    standard = {6: [0.70, 0.71, 0.69, 0.74], 12: [0.70, 0.70, 0.70, 0.71]}
    summaries = [
        {"task": task, "seq_len": 6, "width": w, "model": model, "mean": sum(v[w]) / 4}
        | {"values": dict(enumerate(v[w] if task == "match3" else [1.0] * 4))}
        for task in ("match2", "match3")
        for model, v in (("tensor", tensor), ("standard", standard))
        for w in (6, 12)
    ]
    tests = {(t["task"], t["width"]): t for t in match.tests(cfg, summaries)}
    p6, p12 = (stats.ttest_rel(tensor[w], standard[w]).pvalue for w in (6, 12))
    assert tests[("match3", 6)]["p"] == pytest.approx(p6)
    # Holm over Match3's two widths only: Match2's equal accuracies (p = 1) do not dilute them
    assert tests[("match3", 6)]["p_holm"] == pytest.approx(min(1, 2 * min(p6, p12)))
    assert p6 < p12 and tests[("match3", 12)]["p_holm"] == pytest.approx(max(2 * p6, p12))
    assert tests[("match2", 6)]["p"] == 1.0
    assert report.separation(cfg, list(tests.values())) == [
        "Match2, 2 widths: none differs (Holm p < 0.05, 4 seeds)",
        "Match3, 2 widths: tensor ahead at 6 (Holm p < 0.05, 4 seeds)",
    ]
    power = match.power_json(cfg, list(tests.values()))
    expected = t_test_power(0.08, 0.043, 4, 0.05 / 2 / 2, paired=True).power
    assert power["power"] == pytest.approx(expected) and power["comparisons"] == 2
    assert power["measured_sd"] > 0 and power["power_at_measured_sd"] is not None
    # the default seeds are the fewest with power >= 0.9 at the quick form's four widths
    quick = MatchConfig()
    level = quick.alpha / len(quick.widths) / 2
    assert quick.seeds == seeds_for(quick.planned_effect, quick.planned_sd, level, 0.9, paired=True)

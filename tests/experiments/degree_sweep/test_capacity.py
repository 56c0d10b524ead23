"""The degree experiment's capacity analysis: design checks gate the verdict; the JSON contract."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from blocklab.cli import main
from blocklab.experiments import degree_sweep
from blocklab.experiments.degree_sweep import SHAPE, plan
from blocklab.experiments.degree_sweep.analysis import capacity, design
from blocklab.experiments.degree_sweep.analysis.arms import compare
from blocklab.experiments.degree_sweep.report.capacity import capacity_json, detail
from blocklab.experiments.degree_sweep.report.status_line import status_line
from blocklab.specs import TrainConfig
from blocklab.store import Store
from blocklab.theory import h

DEGREE = {"d=2": 2.0, "d=3": 3.0, "d=4": 4.0, "mlp": None}
BUDGETS = (1000, 2000, 4000, 8000)
# true curves L = a P^-alpha: d=3 best; d=2 needs 1.2x its parameters, d=4 1.1x, mlp 2x
SCALE = {"d=3": 1.0, "d=2": 1.2, "d=4": 1.1, "mlp": 2.0}


def _row(arm, budget, teacher, seed, loss, plateau=0.001, status="done", width=8):
    return {
        "task": "teacher",
        "budget": budget,
        "arm": arm,
        "degree": DEGREE[arm],
        "seed": seed,
        "teacher": teacher,
        "status": status,
        "metric": "mse",
        "higher_is_better": False,
        "test_metric": loss,
        "test_loss": loss,
        "plateau_improvement": plateau,
        "block_params": budget,
        "width": width,
    }


def _rows(seeds=6, teachers=1, noise=0.01, rise=None, plateau=0.001, moved=None):
    rng = np.random.default_rng(0)
    rows = []
    for t in range(teachers):
        for s in range(seeds):
            shared = rng.normal(0, noise)  # a (teacher, seed) effect every arm shares
            for arm, k in SCALE.items():
                for b in BUDGETS:
                    loss = 0.02 + 5.0 * (b / k) ** -0.5
                    if rise == (arm, b):
                        loss *= 2.0  # an undertrained point: worse at a larger budget
                    loss *= math.exp(shared + rng.normal(0, noise / 3))
                    width = 6 if moved == (arm, b) else 8  # the solver moved this width
                    rows.append(_row(arm, b, t, s, loss, plateau, width=width))
    return rows


def _choice(edge=False):
    return {
        f"{b}/{a}": {"lr": 1e-2, "tried": [3e-3, 1e-2, 3e-2], "at_edge": edge and a == "d=2"}
        for a in SCALE
        for b in BUDGETS
    }


def _analyze(rows, choice=None, budgets=BUDGETS, tol=0.03, width=8):
    return capacity.analyze(
        rows,
        choice or _choice(),
        list(budgets),
        tol=tol,
        n_boot=200,
        paired=compare(rows),
        width=width,
    )


def _check(result, name):
    return next(c for c in result.checks if c.name == name)


def test_a_sound_run_passes_its_checks_and_states_a_verdict():
    result = _analyze(_rows())
    assert result.passed and result.decision.outcome is capacity.Outcome.VERDICT
    m = result.model.multipliers
    assert m["d=2"].value == pytest.approx(1.2, rel=0.05)
    assert m["mlp"].low > 1.5
    assert m["d=2"].low > 1.0  # resolved: d=3 needs fewer parameters
    verdict, line = status_line(result)
    assert verdict and line.startswith("VERDICT: m(d=2) = 1.2")
    assert "d=2 needs more parameters than d=3" in line and "predicted 1.057" in line
    assert "m_2 / m_4 = 1.09" in line


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("plateau", {"rows": {"plateau": 0.2}}),
        ("curve", {"rows": {"rise": ("d=4", 8000)}}),
        ("lr_not_at_edge", {"choice": True}),
        ("budget_span", {"budgets": BUDGETS[:2] + BUDGETS[3:]}),
        ("width_matched", {"rows": {"moved": ("d=3", 1000)}}),
    ],
)
def test_a_failed_design_check_withholds_the_verdict(name, kwargs):
    rows = _rows(**kwargs.get("rows", {}))
    if "budgets" in kwargs:
        rows = [r for r in rows if r["budget"] in kwargs["budgets"]]
    result = _analyze(rows, _choice(kwargs.get("choice", False)), kwargs.get("budgets", BUDGETS))
    failed = [c.name for c in result.checks if not c.passed]
    assert failed == [name]
    assert result.decision.outcome is capacity.Outcome.NO_VERDICT
    assert [c.name for c in result.decision.failed] == [name]
    assert capacity_json(result)["verdict"] is None
    verdict, line = status_line(result)
    assert not verdict and line.startswith(f"NO VERDICT: design checks failed: {name};")


def test_the_curve_check_fails_on_a_rising_curve():
    """d=4's loss rising by 65% from its smallest budget to its largest (the flat curves of a
    width-3 LayerNorm run): the check must fail and say which arm."""
    rows = _rows()
    for r in rows:
        if r["arm"] == "d=4":
            r["test_loss"] = r["test_metric"] = 0.027 * (1.65 ** (BUDGETS.index(r["budget"]) / 3))
    check = _check(_analyze(rows), "curve")
    assert not check.passed and "d=4" in check.flat
    fall = {a: f for a, _, _, _, _, f in check.falls}
    assert fall["d=4"] == pytest.approx(1 / 1.65, rel=1e-6) and fall["d=3"] > 2
    assert "d=4 0.606x" in detail(check)


def test_a_sound_run_with_wide_intervals_is_inconclusive_with_the_run_size_it_needs():
    # 15% noise a cell: every check's band clears its threshold, the multipliers' do not
    result = _analyze(_rows(seeds=3, noise=0.15))
    assert result.passed
    assert result.decision.outcome is capacity.Outcome.INCONCLUSIVE
    verdict, line = status_line(result)
    assert not verdict and line.startswith("INCONCLUSIVE: m")
    assert "resolution +-" in line and "the predicted effect is 5.7%" in line
    assert "+-3% needs about" in line and "(this run: 3)" in line
    need = result.decision.units_for_3pct
    assert need > 3 and f"about {need} (teacher, seed) units" in line


def test_width_check_names_the_moved_arm_and_ignores_depth_mode():
    rows = _rows(moved=("d=3", 1000))
    check = _check(_analyze(rows), "width_matched")
    assert check.moved == (("d=3", 1000, 6),) and "d=3 at 1000 (width 6)" in detail(check)
    assert _check(_analyze(rows, width=None), "width_matched").passed  # depth mode solves widths
    assert _check(_analyze(_rows(), width=7), "width_matched").passed  # one unit is allowed


@pytest.mark.parametrize(("width", "slack"), [(3, 0), (4, 0), (5, 1), (8, 1), (32, 1)])
def test_one_unit_of_width_is_allowed_only_where_it_is_at_most_a_fifth(width, slack):
    assert design.width_slack(width) == slack
    rows = [{"arm": "d=3", "budget": 45, "width": width + 1}]
    assert design.width_check(rows, width).passed is (slack == 1)


def test_without_a_reference_fit_there_is_no_verdict():
    result = _analyze([r for r in _rows() if r["arm"] != "d=3"])
    assert result.model is None and result.decision.outcome is capacity.Outcome.NO_VERDICT
    verdict, line = status_line(result)
    assert not verdict and line.startswith("NO VERDICT: design checks failed: ")
    assert "resolution" in line


def test_teachers_split_the_spread():
    """Within-teacher spread reads the seeds of one teacher, between-teacher the teachers'
    means: a shift per teacher shows in the second only."""
    rows = _rows(seeds=4, teachers=3, noise=0.0)
    for r in rows:
        r["test_loss"] *= 1.0 + 0.1 * r["teacher"] + 0.001 * r["seed"]
    s = _analyze(rows).stats["d=3"][1000]
    assert s["teachers"] == 3 and s["n"] == 12
    assert s["within_teacher_std"] < 0.05 * s["between_teacher_std"]


def test_json_contract():
    payload = json.loads(json.dumps(degree_sweep_plain(capacity_json(_analyze(_rows())))))
    assert payload["budgets"] == list(BUDGETS)
    names = [c["name"] for c in payload["design_checks"]]
    assert {"plateau", "curve", "lr_not_at_edge", "resolution"} <= set(names)
    assert payload["multipliers"]["d=3"] == {"m": 1.0, "ci_low": 1.0, "ci_high": 1.0}
    assert set(payload["multipliers"]["d=2"]) == {"m", "ci_low", "ci_high"}
    assert set(payload["m2_over_m4"]) == {"ratio", "ci_low", "ci_high"}
    assert payload["alpha"] > 0 and len(payload["alpha_ci"]) == 2
    assert set(payload["shape_test"]) >= {"shared_alpha_preferred", "p"}
    keys = {"name", "passed", "outcome", "figure", "threshold", "band", "method", "detail"}
    assert all(set(c) == keys for c in payload["design_checks"])
    assert all(c["passed"] == (c["outcome"] == "passed") for c in payload["design_checks"])
    assert isinstance(payload["verdict"], str)
    arm = payload["arms"]["d=2"]
    assert set(arm["budgets"]["1000"]) >= {"mean", "std", "ci_low", "ci_high", "plateaued_fraction"}
    assert set(arm["fit"]) == {"L_inf", "a", "alpha", "ci"}
    assert set(arm["efficiency_vs_d3"]) >= {"multiplier", "ci_low", "ci_high", "predicted"}
    assert arm["efficiency_vs_d3"]["predicted"] == pytest.approx(h(3) / h(2))
    assert payload["arms"]["mlp"]["efficiency_vs_d3"]["predicted"] is None
    assert payload["arms"]["d=3"]["efficiency_vs_d3"]["multiplier"] == 1.0


def degree_sweep_plain(payload):
    from blocklab.formatting import plain

    return plain(payload)


def _one_arm(lr_grid, steps, **kw):
    """d=3 alone at one tiny budget: the learning-rate search with nothing else to train."""
    return degree_sweep.DegreeSweepConfig(
        task_options={"n_in": 4, "n_train": 256, "n_val": 64, "n_test": 64},
        degrees=("3",),
        baselines=(),
        budgets=(192,),
        seeds=1,
        lr_grid=lr_grid,
        train=TrainConfig(steps=steps, batch_size=32, eval_points=4),
        **kw,
        shape=replace(SHAPE, width=4),
    )


def _search(cfg, shapes, tmp_path, higher: bool):
    """The degree sweep's learning-rate search: per (budget, arm), seed 0 and teacher 0."""
    from blocklab.experiments import _trials

    at = {key: functools.partial(plan.spec, cfg, *shapes[key], seed=0) for key in shapes}
    store, name = Store(tmp_path), degree_sweep.EXPERIMENT
    return _trials.search_lr(at, cfg.lr_grid, cfg.lr_extend, store, name, None, False, higher)


def test_lr_search_extends_past_an_edge(tmp_path):
    """Rates far too small put the best at the top edge: the grid grows past it, once per
    allowed extension, and a choice still at the edge says so."""
    cfg = _one_arm(lr_grid=(1e-7, 1e-6), lr_extend=2, steps=20)
    shapes = plan.shapes(cfg)
    choice = _search(cfg, shapes, tmp_path, higher=False)
    c = choice[(192, "d=3")]
    assert c["tried"] == pytest.approx([1e-7, 1e-6, 1e-5, 1e-4])
    assert c["at_edge"] and c["lr"] == pytest.approx(1e-4)


def test_tied_rates_choose_the_middle_and_do_not_extend(tmp_path, monkeypatch):
    """Accuracy 1 at every rate (a task solved at all of them) is no reason to search past an
    edge: the choice is the middle rate, and nothing more runs."""
    from blocklab.engine import sweep
    from blocklab.experiments import _trials

    calls = []

    def run(specs, *args, **kw):
        calls.append(len(specs))
        return {s.id: {"status": "done", "metrics": {"val_metric": 1.0}} for s in specs}

    monkeypatch.setattr(sweep, "run", run)
    cfg = _one_arm(lr_grid=(1e-3, 3e-3, 1e-2), lr_extend=2, steps=10)
    shapes = plan.shapes(cfg)
    choice = _search(cfg, shapes, tmp_path, higher=True)
    c = choice[(192, "d=3")]
    assert calls == [3] and c["lr"] == 3e-3 and not c["at_edge"]
    # a unique best at an edge still extends
    val = {1e-3 / 3: 0.95, 1e-3: 0.9, 3e-3: 0.8, 1e-2: 0.7}

    def scored(specs, *args, **kw):
        return {s.id: {"status": "done", "metrics": {"val_metric": val[s.train.lr]}} for s in specs}

    monkeypatch.setattr(sweep, "run", scored)
    at = {"k": lambda lr: plan.spec(cfg, *shapes[(192, "d=3")], lr, 0)}
    got = _trials.search_lr(at, (1e-3, 3e-3, 1e-2), 1, Store(tmp_path), "x", None, False, True)
    assert got["k"]["tried"] == pytest.approx([1e-3 / 3, 1e-3, 3e-3, 1e-2])
    assert got["k"]["lr"] == pytest.approx(1e-3 / 3) and got["k"]["at_edge"]


def test_a_single_rate_is_kept_and_reported_at_the_edge(tmp_path):
    """One rate is the user's fixed rate: nothing is searched around it, and the design check
    says the choice was not searched."""
    cfg = _one_arm(lr_grid=(1e-7,), steps=10)
    choice = _search(cfg, plan.shapes(cfg), tmp_path, higher=False)
    assert choice[(192, "d=3")]["tried"] == [1e-7] and choice[(192, "d=3")]["at_edge"]


UNDERTRAINED = [
    "--task-option", "n_in=4", "--task-option", "n_train=256", "--task-option", "n_val=64",
    "--task-option", "n_test=128", "--budgets", "192", "384", "768", "1536", "--width", "4",
    "--degrees", "3", "--baselines", "--steps", "12", "--seeds", "2", "--lr-grid", "1e-3", "3e-3",
    "1e-2", "--lr-extend", "0", "--workers", "1", "--n-boot", "50", "--quiet", "--optimizer",
    "adam",
]  # fmt: skip


def test_an_undertrained_run_prints_no_verdict(tmp_path, capsys):
    """12 steps cannot reach a plateau: the check fails and neither output states a verdict."""
    out = str(tmp_path / "short")
    assert main(["degree-sweep", "--out", out, "--json", *UNDERTRAINED]) == 0
    payload = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in payload["design_checks"]}
    assert not checks["plateau"]["passed"] and payload["verdict"] is None
    assert payload["budgets"] == [192, 384, 768, 1536]
    assert set(payload["arms"]) == {"d=3"}
    assert main(["degree-sweep", "--out", out, *UNDERTRAINED]) == 0  # resumed from the store
    text = capsys.readouterr().out
    assert "- FAILED: plateau" in text and "\nNO VERDICT: " in text
    assert "--steps 24" in text and "--steps 12" not in text  # the next command: twice the steps
    report = (tmp_path / "short" / "report.md").read_text()
    assert "NO VERDICT" in report and "FAILED: plateau" in report


def test_teachers_need_a_task_whose_data_follow_the_seed(tmp_path, capsys):
    argv = ["--task", "mnist1d", "--teachers", "2", "--optimizer", "adam"]  # adam: classification
    code = main(["degree-sweep", "--out", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert code == 2 and "fixed dataset" in err and len(err.strip().splitlines()) == 1


def test_the_plateau_check_states_its_criterion():
    def plateau(rows):
        checks = capacity.design_checks(rows, _choice(), list(BUDGETS), 0.03)
        return next(c for c in checks if c.name == "plateau")

    rows = _rows(seeds=2)
    cosine = plateau(rows)
    assert cosine.rule == "cosine" and "last quarter of training" in detail(cosine)
    wsd = plateau([{**r, "schedule": "wsd"} for r in rows])
    assert wsd.rule == "wsd" and "run of half the steps" in detail(wsd)


def test_budget_tol_lets_depth_mode_meet_budgets_no_width_meets_within_2_percent():
    from blocklab.errors import UserError

    budgets = (292, 584, 1168, 2336)
    strict = degree_sweep.DegreeSweepConfig(
        mode="depth", budgets=budgets, budget_tol=0.02, shape=replace(SHAPE, depth=2)
    )
    with pytest.raises(UserError, match="within 2%"):
        plan.shapes(strict)
    cfg = degree_sweep.DegreeSweepConfig(
        mode="depth", budgets=budgets, budget_tol=0.15, shape=replace(SHAPE, depth=2)
    )
    shapes = plan.shapes(cfg)
    assert {s.depth for _, s in shapes.values()} == {2}
    assert all(abs(s.deviation) <= 0.15 for _, s in shapes.values())
    assert any(abs(s.deviation) > 0.02 for _, s in shapes.values())

"""A fit's cost known before it starts (`engine.fit_plan`): the estimate, the optimizer chosen from
it, the line that says so, and the refusal of a plan no optimizer can hold in memory."""

from __future__ import annotations

import dataclasses
import io

import pytest

from blocklab.cli.main import main
from blocklab.engine import fit_plan
from blocklab.errors import UserError
from blocklab.experiments import _degree_plan
from blocklab.experiments.degree_sweep import SHAPE, DegreeSweepConfig, _spec


def _specs(width: int | None = None, **kw) -> list:
    shape = SHAPE if width is None else dataclasses.replace(SHAPE, width=width)
    cfg = DegreeSweepConfig(shape=shape, **kw)
    shapes = _degree_plan.plan(cfg)
    if cfg.staged:
        return [s for _, s in _degree_plan.ladders(cfg, shapes, _spec)]
    return [_spec(cfg, arm, shape, cfg.train.lr, 0) for arm, shape in shapes.values()]


def test_the_estimate_reads_the_networks_count_and_grows_as_n_p_squared():
    small, big = (
        fit_plan.estimate(s, rate=50.0)
        for s in _specs(degrees=("3",), baselines=(), depths=(1, 8), seeds=1, ladder="off")
    )
    assert big.params > small.params and big.examples == 64 * big.params  # data_ratio 64
    assert small.examples == 4096 > 64 * small.params  # min_examples
    ratio = (big.examples * big.params**2) / (small.examples * small.params**2)
    assert big.lm_seconds / small.lm_seconds == pytest.approx(ratio, rel=0.05)
    assert big.lm_bytes >= 8 * big.examples * big.params  # the Jacobian alone
    assert big.lbfgs_seconds < big.lm_seconds and big.lbfgs_bytes < big.lm_bytes


def test_the_demos_fits_stay_levenberg_marquardt_and_the_line_says_their_cost():
    out = io.StringIO()
    specs = _specs()
    chosen = fit_plan.choose(specs, "cpu", 2, out=out, rate=30.0, memory=8 * 2**30)
    assert chosen == specs
    line = out.getvalue()
    assert line.startswith("fits: Levenberg-Marquardt for 12 trial(s), the largest P = ")
    assert "L-BFGS" not in line and "at 30 GFLOP/s" in line


def test_fits_past_the_limit_go_to_lbfgs_and_the_line_says_why():
    # the degree sweep's old sizes: P up to about 16,400 at width 16
    specs = _specs(degrees=("2", "3"), baselines=(), budgets=(2048, 16384), width=16,
                   seeds=1, ladder="off")  # fmt: skip
    out = io.StringIO()
    chosen = fit_plan.choose(specs, "cpu", 1, out=out, rate=30.0, memory=16 * 2**30)
    # at P of about 2,100 and N = 32,768 an LM iteration is about 1.4e11 FLOP twice: 10 s at 30
    assert {s.budget: s.train.optimizer for s in chosen} == {2048: "lbfgs", 16384: "lbfgs"}
    line = out.getvalue()
    assert line.startswith("fits: L-BFGS for 4 trial(s) of P = ") and "would take about" in line
    # a device 3,000x faster with room for the 4.3 GB Jacobian keeps all on Levenberg-Marquardt
    chosen = fit_plan.choose(specs, "cpu", 1, out=None, rate=1e5, memory=64 * 2**30)
    assert {s.train.optimizer for s in chosen} == {"lm"}
    # where time does not decide, memory does: 6 GB per worker holds the Jacobian at 2,048 only
    chosen = fit_plan.choose(specs, "cpu", 1, out=None, rate=1e5, memory=6 * 2**30)
    assert {s.budget: s.train.optimizer for s in chosen} == {2048: "lm", 16384: "lbfgs"}


def test_a_plan_that_no_optimizer_holds_in_memory_is_refused():
    specs = _specs(degrees=("3",), baselines=(), depths=(8,), seeds=1, ladder="off")
    with pytest.raises(UserError, match=r"needs about .* a worker has .*--budgets"):
        fit_plan.choose(specs, "cpu", 1, out=None, rate=30.0, memory=2**20)
    lbfgs = [dataclasses.replace(s, train=dataclasses.replace(s.train, optimizer="lbfgs"))
             for s in specs]  # fmt: skip
    with pytest.raises(UserError):
        fit_plan.choose(lbfgs, "cpu", 1, out=None, rate=30.0, memory=2**20)
    # an Adam trial is not a fit: nothing to estimate
    adam = [dataclasses.replace(s, train=dataclasses.replace(s.train, optimizer="adam"))
            for s in specs]  # fmt: skip
    assert fit_plan.choose(adam, "cpu", 1, out=None, memory=2**20) == adam


def test_the_command_refuses_it_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(fit_plan, "worker_memory", lambda device, workers: 2**20)
    argv = ["degree-sweep", "--degrees", "3", "--baselines", "--depths", "1", "2", "4", "8"]
    assert main([*argv, "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs about" in err and "Traceback" not in err


def test_a_referee_that_would_compare_lbfgs_with_itself_is_dropped(monkeypatch):
    cfg = DegreeSweepConfig(degrees=("3",), baselines=(), depths=(1, 8), seeds=1, ladder="off")
    shapes = _degree_plan.plan(cfg)
    planned = [({}, _spec(cfg, arm, shape, cfg.train.lr, 0)) for arm, shape in shapes.values()]
    planned += [({"referee": True}, s) for s in _degree_plan.referees(cfg, shapes, _spec)]
    assert len(planned) == 4

    def chosen(rate: float):
        monkeypatch.setattr(fit_plan, "gemm64", lambda device: rate)
        return _degree_plan.optimizers(planned, None, progress=False)

    # fast: both cells on Levenberg-Marquardt, each with its L-BFGS referee
    assert [(bool(k), s.train.optimizer) for k, s in chosen(1e5)] == [
        (False, "lm"), (False, "lm"), (True, "lbfgs"), (True, "lbfgs")
    ]  # fmt: skip
    # slow: the depth-8 cell moves to L-BFGS and loses its referee, the depth-1 cell keeps both
    # at 1 GFLOP/s an iteration takes t seconds, so at t / 2 GFLOP/s it takes 2 s: a rate
    # between the two cells' puts the limit between them
    t1, t8 = sorted(fit_plan.estimate(s, 1.0).lm_seconds for k, s in planned if not k)
    kept = chosen((t1 * t8) ** 0.5 / 2)
    by = [(bool(k), s.shape.depth, s.train.optimizer) for k, s in kept]
    assert (False, 8, "lbfgs") in by and (True, 8, "lbfgs") not in by
    assert (False, 1, "lm") in by and (True, 1, "lbfgs") in by

"""A fit's cost known before it starts (`fitting.estimate`): the estimate, the optimizer chosen from
it, the line that says so, and the refusal of a plan no optimizer can hold in memory."""

from __future__ import annotations

import dataclasses
import io
import math
import re

import pytest
import torch

from blocklab.cli.main import main
from blocklab.errors import UserError
from blocklab.experiments.degree_sweep import SHAPE, DegreeSweepConfig, experiment, plan
from blocklab.fitting import estimate as fit_plan
from blocklab.fitting import timing


def _specs(width: int | None = None, **kw) -> list:
    shape = SHAPE if width is None else dataclasses.replace(SHAPE, width=width)
    cfg = DegreeSweepConfig(shape=shape, **kw)
    cells = plan.shapes(cfg)
    if cfg.staged:
        return [s for _, s in plan.ladders(cfg, cells)]
    return [plan.spec(cfg, arm, shape, cfg.train.lr, 0) for arm, shape in cells.values()]


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
    chosen = fit_plan.choose(specs, "cpu", 2, out=out, rate=30.0, memory=8 * 2**30,
                             step=lambda net: 1e-3, lm_step=lambda net: 0.25)  # fmt: skip
    assert chosen == specs
    line = out.getvalue()
    assert line.startswith("fits: Levenberg-Marquardt for 12 trial(s), the largest P = ")
    assert "L-BFGS" not in line and "at 30 GFLOP/s" in line
    assert "an iteration about 0.25 s timed here" in line and "runs its 1,024 iterations" in line


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
    cells = plan.shapes(cfg)
    planned = plan.trials(cfg, cells, dict.fromkeys(cells, cfg.train.lr))
    assert len(planned) == 4

    def chosen(rate: float):
        monkeypatch.setattr(fit_plan, "gemm64", lambda device: rate)
        return experiment.optimizers(planned, None, None, progress=False)

    # fast: both cells on Levenberg-Marquardt, each with its L-BFGS referee, the largest first
    assert [(bool(k), s.shape.depth, s.train.optimizer) for k, s in chosen(1e5)] == [
        (False, 8, "lm"), (True, 8, "lbfgs"), (False, 1, "lm"), (True, 1, "lbfgs")
    ]  # fmt: skip
    # slow: the depth-8 cell moves to L-BFGS and loses its referee, the depth-1 cell keeps both
    # at 1 GFLOP/s an iteration takes t seconds, so at t / 2 GFLOP/s it takes 2 s: a rate
    # between the two cells' puts the limit between them
    t1, t8 = sorted(fit_plan.estimate(s, 1.0).lm_seconds for k, s in planned if not k)
    kept = chosen((t1 * t8) ** 0.5 / 2)
    by = [(bool(k), s.shape.depth, s.train.optimizer) for k, s in kept]
    assert (False, 8, "lbfgs") in by and (True, 8, "lbfgs") not in by
    assert (False, 1, "lm") in by and (True, 1, "lbfgs") in by


def _bound(line: str) -> int:
    """The seconds of the line's 'about 1m05s on 2 worker(s)'."""
    m, s = re.search(r"about (?:(\d+)m)?(\d+)s on \d+ worker", line).groups()
    return 60 * int(m or 0) + int(s)


def test_the_bound_counts_each_restarts_warm_start_at_the_first_rung():
    specs = _specs()  # the demo's: ladders, 2 restarts, a 1,000-step warm start under wsd
    cold = [dataclasses.replace(s, train=dataclasses.replace(s.train, warm_start=0)) for s in specs]
    timed = []

    def step(spec):  # a second a step: the warm starts dwarf the fits' bound
        timed.append(spec)
        return 1.0

    lines = []
    for given in (specs, cold):
        out = io.StringIO()
        fit_plan.choose(given, "cpu", 2, out=out, rate=30.0, memory=8 * 2**30, step=step,
                        lm_step=lambda net: 1e-3, parallel=2.0)  # fmt: skip
        lines.append(out.getvalue())
    # each warm start trains its chain's first network, timed once per architecture
    assert all(not s.ladder for s in timed)
    assert {s.arm.label: s.shape.depth for s in timed} == {s.arm.label: s.ladder[0] for s in specs}
    assert len(timed) == len({s.arm.label for s in specs})
    train = specs[0].train
    # wsd adds the decay of the run of half the warm start's steps (`train.half_run`)
    assert fit_plan.warm_steps(train) > train.warm_start
    warm = len(specs) * train.restarts * fit_plan.warm_steps(train) * 1.0
    assert _bound(lines[0]) - _bound(lines[1]) == pytest.approx(warm / 2, abs=2)
    assert "AdamW warm starts (" in lines[0] and "warm start" not in lines[1]
    cosine = dataclasses.replace(train, schedule="cosine")
    assert fit_plan.warm_steps(cosine) == train.warm_start
    assert fit_plan.warm_steps(dataclasses.replace(train, warm_start=0)) == 0


def test_a_warm_start_step_is_timed_on_the_network_it_trains():
    spec = fit_plan._bottom(_specs(degrees=("3",), baselines=())[0])
    assert 0 < timing.adam_step(spec, steps=2) < math.inf


def test_the_bound_counts_each_rungs_iteration_timed_or_read_off_the_line_between():
    specs = _specs()  # the demo's: 4 arms, each a ladder of depths 1, 2, 4, 8
    cold = [dataclasses.replace(s, train=dataclasses.replace(s.train, warm_start=0)) for s in specs]
    timed = []

    def lm_step(net):  # a depth-1 iteration 10 s, a depth-8 one 80 s: the FLOPs are nothing
        timed.append(net)
        return 10.0 * net.shape.depth

    rungs = fit_plan.rung_seconds(cold, 30.0, lm_step)
    # each ladder's first and last rungs timed, once per architecture
    assert sorted((s.arm.label, s.shape.depth) for s in timed) == sorted(
        (s.arm.label, d) for s in specs for d in (1, 8) if s.seed == 0
    )
    for row in rungs.values():
        (f0, t0), (f1, t1) = ((row[i][0].lm_seconds, row[i][1]) for i in (0, -1))
        assert (t0, t1) == (10.0, 80.0)
        for est, seconds in row[1:-1]:  # the rungs between, on the line in their FLOPs
            assert seconds == pytest.approx(10 + 70 * (est.lm_seconds - f0) / (f1 - f0))
            assert 10 < seconds < 80
    total = sum(
        s.train.steps * s.train.restarts * sum(t for _, t in rungs[fit_plan._key(s)]) for s in cold
    )
    lines = []
    for parallel in (2.0, 1.25):  # two workers on two free cores, then on a loaded machine
        out = io.StringIO()
        fit_plan.choose(cold, "cpu", 2, out=out, rate=30.0, memory=8 * 2**30, lm_step=lm_step,
                        parallel=parallel)  # fmt: skip
        lines.append(out.getvalue())
        assert _bound(lines[-1]) == round(total / parallel)
    assert "an iteration about 80 s timed here" in lines[0]
    assert "as fast as" not in lines[0] and "(as fast as 1.2 on the cores free now)" in lines[1]
    # an iteration timed below its FLOPs at the rate counts its FLOPs
    slow = fit_plan.rung_seconds(cold[:1], 1e-3, lambda net: 1e-9)
    assert all(t == e.lm_seconds > 1e-9 for row in slow.values() for e, t in row)


def test_a_levenberg_marquardt_iteration_is_timed_on_the_fits_network():
    spec = _specs(degrees=("2",), baselines=(), depths=(1,), seeds=1, ladder="off")[0]
    assert 0 < timing.lm_iteration(spec) < math.inf


def test_the_workers_run_at_once_as_far_as_the_cores_allow():
    assert fit_plan.parallelism("cpu", 1) == 1
    threads = torch.get_num_threads()
    assert 1 <= fit_plan.parallelism("cpu", 2) <= 2
    assert torch.get_num_threads() == threads  # the threads given back

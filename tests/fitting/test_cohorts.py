"""Depth ladders of one shape fitted together (`fitting.cohorts`: every unit's chains members of
one batched Levenberg-Marquardt fit per rung, each on its own training set) against each ladder
fitted alone (`ladder.fit_ladder`, the plain reference): the same steps, certificates and best
chains exactly where rounding cannot reach them, the losses to rounding; which trials a sweep
fits together; and each trial's record."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest
import torch

from blocklab.engine import sweep, trial
from blocklab.engine.executors import Resources
from blocklab.fitting import cohorts as fit_units
from blocklab.fitting import converge, ladder, network
from blocklab.fitting.batched import BatchedLevenbergMarquardt
from blocklab.fitting.fit import LevenbergMarquardt
from blocklab.jacobian import FlatParams, NotByLayers
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape, TrainConfig, TrialSpec, batches
from blocklab.store import Store
from blocklab.tasks import make_task

# the degree sweep's demo target (a relu teacher on 2 inputs) at test sizes
OPTIONS = {"activation": "relu", "n_train": 256, "n_val": 64, "n_test": 64}
SHAPE = NetShape(1, 3, norm="rms", scaled_residual=True)  # its width-3 network, at each depth
THRESHOLD = 10.0
# a tolerance a doubling of 8 to 16 iterations passes or fails by a wide margin either way: the
# certificates come out mixed, which a test of their decisions needs
FIT = TrainConfig(optimizer="lm", steps=16, restarts=2, data_ratio=8, converge_tol=0.5)


def _data(teacher: int):
    return make_task("teacher", **OPTIONS).make(teacher)


def _maker(arm: str, rounding: int = 0):
    """A ladder's `make_model`; with `rounding`, every parameter moved by one float64 ulp
    (`network.rounded` on the float64 network), the least change rounding makes to a fit."""

    def make(depth: int, seed: int) -> Net:
        torch.manual_seed(seed)
        net = Net(parse_arm(arm), replace(SHAPE, depth=depth), 2, 1)
        if rounding:
            network.rounded(net.double(), seed, rounding)
        return net

    return make


@pytest.fixture
def curves(monkeypatch) -> list[list[float]]:
    """Every fit's losses, iteration by iteration, one list per fit in the order they start.
    The tests index them as one attempt per rung: the refit rule, which these tiny validation
    sets (64 examples) can trip for real, is off here (`test_fit_records` tests it alone and
    batched)."""
    monkeypatch.setattr(ladder, "REFIT_RATIO", math.inf)
    seen: list[list[float]] = []
    real = converge._on_step

    def spy(*args):
        on_step, losses = real(*args), []
        seen.append(losses)
        return lambda i, loss: losses.append(loss) or on_step(i, loss)

    monkeypatch.setattr(converge, "_on_step", spy)
    return seen


def _alone_and_together(units, cfg, depths, curves, arm="3"):
    """Each unit's ladder alone, then all of them together: (rungs, curves) per unit each way.
    Alone a unit's fits start rung by rung, chain by chain; together rung by rung, unit by unit,
    chain by chain."""
    alone = []
    for teacher, seed in units:
        curves.clear()
        rungs = ladder.fit_ladder(depths, _maker(arm), _data(teacher), cfg, seed, THRESHOLD)
        alone.append((rungs, list(curves)))
    curves.clear()
    together = fit_units.fit_ladders(
        depths,
        [_maker(arm)] * len(units),
        [_data(t) for t, _ in units],
        cfg,
        [s for _, s in units],
        [THRESHOLD] * len(units),
    )
    k, n = cfg.restarts, len(units)
    paired = [
        (rungs, [curves[d * n * k + u * k + r] for d in range(len(depths)) for r in range(k)])
        for u, rungs in enumerate(c.rungs for c in together)
    ]
    return alone, paired


def _rejected(losses: list[float]) -> list[int]:
    """The iterations whose step was rejected: a rejected step leaves the loss as it was, bit
    for bit, and an accepted one lowers it."""
    return [i for i in range(1, len(losses)) if losses[i] == losses[i - 1]]


def _differences(alone, together, rel: float) -> list[str]:
    """What a unit fitted together does otherwise than alone: exactly, each fit's iterations,
    rejected steps, certificate and the rung's best chain; to `rel`, every iteration's loss, the
    final losses and (amplified, as a gain's rounding is) the certificates' gains."""
    out = []
    for u, ((a_rungs, a_curves), (b_rungs, b_curves)) in enumerate(
        zip(alone, together, strict=True)
    ):
        for a_curve, b_curve in zip(a_curves, b_curves, strict=True):
            if len(a_curve) != len(b_curve) or _rejected(a_curve) != _rejected(b_curve):
                out.append(f"unit {u}: steps {_rejected(a_curve)} != {_rejected(b_curve)}")
            elif a_curve != pytest.approx(b_curve, rel=rel):
                out.append(f"unit {u}: losses {a_curve[-1]} != {b_curve[-1]}")
        for a, b in zip(a_rungs, b_rungs, strict=True):
            for ca, cb in zip(a.result.restarts, b.result.restarts, strict=True):
                if (ca["iterations"], ca["converged"]) != (cb["iterations"], cb["converged"]):
                    out.append(f"unit {u} depth {a.depth}: certificate {ca} != {cb}")
                if cb["train_loss"] != pytest.approx(ca["train_loss"], rel=rel):
                    out.append(f"unit {u} depth {a.depth}: loss {ca} != {cb}")
                # a gain is a difference of two losses over the second: its relative error is
                # theirs times (1 + gain) / gain, under 100 for every gain here (above 0.01)
                if cb["gain"] != pytest.approx(ca["gain"], rel=100 * rel, abs=1e-12):
                    out.append(f"unit {u} depth {a.depth}: gain {ca['gain']} != {cb['gain']}")
            best = [c["train_loss"] for c in a.result.restarts]
            together_best = [c["train_loss"] for c in b.result.restarts]
            if best.index(min(best)) != together_best.index(min(together_best)):
                out.append(f"unit {u} depth {a.depth}: another best chain")
    return out


# Fitted together, each member's step takes the lone fit's residuals and, on a CPU, its normal
# matrix (`BatchedLevenbergMarquardt.ONE_BY_ONE`), but its damping, factorization and sums in
# batched tensor arithmetic against Python floats: each step differs in its last bits, and 32
# iterations in mid-descent (two rungs of 16) grow that to about 1e-10 of the loss here. With
# J^T J by a batched matmul (a GPU's way, forced here on the CPU) they grow to about 1e-7, as
# far as a one-ulp change of the float64 initialization takes them (`test_deep_ladders...`
# measures it). 1e-6 holds either way with a margin for other kernels, and stays far below what
# a member fitted on another's data or started from another's weights misses by (order one)
SHALLOW_REL = 1e-6


@pytest.mark.parametrize(("arm", "one_by_one"), [("2", True), ("3", True), ("3", False)])
def test_units_fitted_together_take_each_units_own_steps_and_certificates(
    arm, one_by_one, curves, monkeypatch
):
    """Two teachers x two seeds, two chains each, warmed by Adam, two rungs: together they take
    exactly the steps, certificates and best chains they take alone, the losses to
    `SHALLOW_REL`, and each rung's record says it ran batched; with the members' normal
    matrices formed one by one (a CPU's way) or by one batched matmul (a GPU's)."""
    if not one_by_one:
        monkeypatch.setattr(BatchedLevenbergMarquardt, "ONE_BY_ONE", ())
    units = [(teacher, seed) for teacher in (0, 1) for seed in (0, 1)]
    cfg = replace(FIT, warm_start=10)
    alone, together = _alone_and_together(units, cfg, (1, 2), curves, arm)
    assert not _differences(alone, together, SHALLOW_REL)
    # the premises: certificates of both kinds, and steps rejected (each fit's own damping)
    chains = [c for rungs, _ in alone for r in rungs for c in r.result.restarts]
    assert {c["converged"] for c in chains} == {True, False}
    assert min(c["gain"] for c in chains) > 0.01  # the gains' tolerance (`_differences`)
    assert all(_rejected(c) for _, fits in alone for c in fits)
    for (a_rungs, _), (b_rungs, _) in zip(alone, together, strict=True):
        for a, b in zip(a_rungs, b_rungs, strict=True):
            assert (a.result.batched, b.result.batched) == (False, True)
            assert a.result.examples == b.result.examples and a.exact_start == b.exact_start
            assert b.result.test_loss == pytest.approx(a.result.test_loss, rel=SHALLOW_REL)


def test_units_read_in_each_others_rows_do_not_match(curves):
    """The planted bad case of the comparison above: the same fits, each unit's result read
    against another unit's lone fit, differ at once."""
    units = [(0, 0), (1, 0)]
    alone, together = _alone_and_together(units, FIT, (1,), curves)
    assert not _differences(alone, together, SHALLOW_REL)
    assert _differences(alone, together[::-1], SHALLOW_REL)


@pytest.mark.parametrize("one_by_one", [True, False])
@pytest.mark.parametrize("path", ["layers", "examples"])
def test_each_member_fits_its_own_training_set(path, one_by_one, monkeypatch):
    """Members of one network, each with its own training set (two teachers), take the steps
    each takes alone on its set, by either Jacobian and either way of forming their normal
    matrices; given each other's sets, they do not."""
    if not one_by_one:
        monkeypatch.setattr(BatchedLevenbergMarquardt, "ONE_BY_ONE", ())
    if path == "examples":  # as a network with a parameter outside an nn.Linear takes it

        def refuse(self, theta):
            raise NotByLayers

        monkeypatch.setattr(FlatParams, "jacobian_by_layers", refuse)
    sets = [converge.training_set(_data(t), 128, 0) for t in (0, 1)]
    make = _maker("3")

    def alone(split) -> list[float]:
        losses: list[float] = []
        LevenbergMarquardt(make(2, 0).double(), split.x, split.y).run(
            12, lambda i, loss: losses.append(loss) or True
        )
        return losses

    def together(order: list[int]) -> list[list[float]]:
        seen: list[list[float]] = []

        def on_step(i: int, losses: list[float]) -> None:
            seen.append(losses)  # None: every member goes on

        models = [make(2, 0).double() for _ in order]
        xs, ys = [sets[k].x for k in order], [sets[k].y for k in order]
        fitter = BatchedLevenbergMarquardt(models, xs, ys)
        fitter.run(12, on_step)
        assert fitter.path == path and fitter.x.shape == (2, 128, 2)  # (R, N, in)
        return [[step[k] for step in seen] for k in range(len(order))]

    lone = [alone(sets[k]) for k in (0, 1)]
    for got, want in zip(together([0, 1]), lone, strict=True):
        assert _rejected(got) == _rejected(want)
        assert got == pytest.approx(want, rel=SHALLOW_REL)
    for got, want in zip(together([1, 0]), lone, strict=True):  # the planted bad case
        assert got != pytest.approx(want, rel=SHALLOW_REL)
    with pytest.raises(ValueError, match="one shape"):
        xs, ys = [sets[0].x, sets[1].x[:64]], [sets[0].y, sets[1].y[:64]]
        BatchedLevenbergMarquardt([make(1, 0), make(1, 1)], xs, ys)


# Deep fits: four rungs of 16 iterations amplify rounding until neither way can promise its
# losses' bits, so the yardstick is measured here: the spread one ulp gives, each lone ladder
# refitted from its initialization moved by one float64 ulp (`network.rounded`): its median a few
# 1e-6 of the loss, its largest 1e-4 to 1e-1 (a chain led to another basin). Fitted together
# (chains continuing the best fit below, as the degree sweep's do), the final losses differ from
# alone by far less: a median near 1e-9, with one thread or two, on two teachers or three; with
# J^T J by a batched matmul (a GPU's way) about a third of the spread's median, and a largest
# below the spread's. DEEP_FACTOR leaves a hundredfold margin over the latter for other
# kernels; a unit's result read against another unit's fit misses the median by a share of
# order one, far beyond it
DEEP_FACTOR = 100


def test_deep_ladders_fitted_together_end_within_the_spread_of_a_rounding(curves):
    units = [(teacher, seed) for teacher in (0, 1) for seed in (0, 1)]
    cfg = replace(FIT, chains="best")
    depths = (1, 2, 3, 4)
    alone, together = _alone_and_together(units, cfg, depths, curves)
    moved = [
        ladder.fit_ladder(depths, _maker("3", rounding=1), _data(t), cfg, s, THRESHOLD)
        for t, s in units
    ]

    def top(rungs) -> list[float]:
        return [c["train_loss"] for c in rungs[-1].result.restarts]

    def spread(others) -> list[float]:
        return [
            abs(b - a) / a
            for (rungs, _), other in zip(alone, others, strict=True)
            for a, b in zip(top(rungs), top(other), strict=True)
        ]

    rounding = spread(moved)
    assert statistics.median(rounding) > 0  # the premise: a fit this deep amplifies one ulp
    ran = spread([rungs for rungs, _ in together])
    assert statistics.median(ran) <= DEEP_FACTOR * statistics.median(rounding)
    assert max(ran) <= DEEP_FACTOR * max(rounding)
    misread = spread([rungs for rungs, _ in together[1:] + together[:1]])  # the planted case
    assert statistics.median(misread) > DEEP_FACTOR * statistics.median(rounding)


def _spec(arm="3", seed=0, teacher=0, ladder=(1, 2), **train) -> TrialSpec:
    cfg = replace(FIT, steps=8, **train)
    shape = replace(SHAPE, depth=ladder[-1] if ladder else 2)
    return TrialSpec(
        "teacher", dict(OPTIONS), parse_arm(arm), 0, shape, cfg, seed, teacher, ladder=ladder
    )


def test_a_sweep_groups_ladders_of_one_shape_and_only_where_told(monkeypatch):
    shapes = [_spec(arm, s, t, ladder) for arm in ("2", "3") for ladder in ((1, 2), (1, 3))
              for t in (0, 1) for s in (0, 1)]  # fmt: skip
    # L-BFGS, a fresh fit without a ladder, a trial taking measures: each alone
    others = [_spec(optimizer="lbfgs"), _spec(ladder=()), replace(_spec(), measures=("collapse",))]
    specs = shapes + others
    ids = [s.id for s in specs]
    # on the CPU they stay alone by default
    assert not fit_units.batch_units("cpu") and fit_units.batch_units("cuda")
    units = batches(specs, ensemble=16, workers=1, fits=fit_units.batch_units("cpu"))
    assert all(len(u) == 1 for u in units)
    monkeypatch.setattr(fit_units, "ON_CPU", True)
    units = batches(specs, ensemble=16, workers=1, fits=fit_units.batch_units("cpu"))
    grouped = sorted(sorted((s.arm.label, s.ladder) for s in u) for u in units if len(u) > 1)
    # one group per (arm, ladder), of its four (teacher, seed) units; the others alone
    assert [len(g) for g in grouped] == [4] * 4 and all(len(set(g)) == 1 for g in grouped)
    assert sorted(len(u) for u in units if len(u) == 1) == [1] * len(others)
    assert [len(u) for u in batches(specs, ensemble=2, workers=1, fits=True)].count(2) == 8
    assert [s.id for s in specs] == ids  # grouping leaves every trial's id as it was


def test_a_group_stores_each_trial_as_alone_and_fails_as_a_whole(monkeypatch):
    specs = [_spec(teacher=t, seed=s) for t, s in ((0, 0), (1, 1))]
    records = trial.run_group(specs, "cpu")
    for spec, got in zip(specs, records, strict=True):
        want = trial.run_trial(spec, "cpu")
        assert (got["id"], got["status"], got["config"]) == (want["id"], "done", want["config"])
        assert got["metrics"]["units"] == {"units": 2, "members": 4}
        assert set(got["metrics"]) - set(want["metrics"]) == {"units"}
        for a, b in zip(want["metrics"]["ladder"], got["metrics"]["ladder"], strict=True):
            ma, mb = a["metrics"], b["metrics"]
            assert (ma["iterations"], ma["converged"]) == (mb["iterations"], mb["converged"])
            assert (ma["batched"], mb["batched"]) == (False, True)
            assert mb["train_loss"] == pytest.approx(ma["train_loss"], rel=SHALLOW_REL)

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(trial, "fit_ladders", broken)  # the whole group fails; retried next run
    failed = trial.run_group(specs, "cpu")
    assert [r["status"] for r in failed] == ["failed"] * 2
    assert all("out of memory" in r["error"] for r in failed)


def test_a_sweep_told_to_fit_units_together_on_the_cpu_stores_them_so(tmp_path, monkeypatch):
    monkeypatch.setattr(fit_units, "ON_CPU", True)
    specs = [_spec(teacher=t) for t in (0, 1)]
    done = sweep.run(specs, Store(tmp_path), "t", resources=Resources(workers=1), progress=False)
    assert [done[s.id]["metrics"]["units"]["units"] for s in specs] == [2, 2]

"""Training loop: convergence, repeatability, steps-to-threshold, divergence, schedule."""

import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn

import blocklab.fitting.train
from _specs import small_trial
from blocklab.fitting.monitor import plateau_improvement
from blocklab.fitting.train import evaluate, half_run, lr_factor, train, wsd_half_run
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape, TrainConfig
from blocklab.tasks.base import Split, TaskData

STEPS = 150
CFG = TrainConfig(steps=STEPS, batch_size=64, lr=1e-2, eval_points=10)


def splits(x, y, n_train=512, n_val=128):
    return (
        Split(x[:n_train], y[:n_train]),
        Split(x[n_train : n_train + n_val], y[n_train : n_train + n_val]),
        Split(x[n_train + n_val :], y[n_train + n_val :]),
    )


def regression_data() -> TaskData:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(768, 6, generator=gen)
    y = x @ torch.randn(6, 2, generator=gen) / 6**0.5  # a linear target, no noise
    return TaskData(*splits(x, y), kind="regression", n_out=2)


def classification_data() -> TaskData:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(768, 6, generator=gen)
    y = (x @ torch.randn(6, 3, generator=gen)).argmax(-1)  # linearly separable, 3 classes
    return TaskData(*splits(x, y), kind="classification", n_out=3)


def small_net(data: TaskData, seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net(parse_arm("mlp"), NetShape(1, 16, norm="none"), 6, data.n_out)


def run(cfg=CFG, threshold=0.1, seed=0, data=None, model=None):
    data = data or regression_data()
    return train(model or small_net(data), data, cfg, seed=seed, threshold=threshold)


@pytest.fixture(scope="module")
def result():
    return run()


def test_regression_converges(result):
    curve = result.curves["val_loss"]
    assert result.status == "done" and result.diverged_step is None
    assert curve[-1] < 0.1 * curve[0]
    for value in (result.val_metric, result.test_metric, result.test_loss):
        assert value is not None and math.isfinite(value)
    assert result.val_metric == pytest.approx(curve[-1])  # regression metric is the MSE
    assert result.seconds > 0


def test_curves(result):
    c = result.curves
    assert len(c["step"]) == len(c["val_loss"]) == len(c["train_loss"]) > 2
    assert c["step"][0] == 0 and c["step"][-1] == STEPS
    assert c["step"] == sorted(set(c["step"]))
    assert all(math.isfinite(v) for v in c["val_loss"] + c["train_loss"][1:])


def same_curves(a, b) -> bool:
    # train_loss starts with NaN (no steps yet), and NaN != NaN
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


def test_same_seed_same_result(result):
    again = run()
    assert same_curves(again.curves, result.curves)
    assert again.test_metric == result.test_metric


def test_other_seed_other_batches(result):
    assert not same_curves(run(seed=1).curves, result.curves)


def test_steps_to_threshold_reads_the_curve(result):
    c = result.curves
    threshold = 0.5 * c["val_loss"][0]
    expected = next(s for s, v in zip(c["step"], c["val_loss"], strict=True) if v <= threshold)
    got = run(threshold=threshold)
    assert got.steps_to_threshold == expected > 0
    assert got.threshold == threshold
    assert run(threshold=-1.0).steps_to_threshold is None


class NanAfter(nn.Module):
    """Wraps a model; its output turns NaN after `calls` training forwards."""

    def __init__(self, model: nn.Module, calls: int = 5):
        super().__init__()
        self.model, self.calls, self.seen = model, calls, 0

    def forward(self, x):
        if self.training:
            self.seen += 1
        y = self.model(x)
        return y * math.nan if self.seen > self.calls else y


def test_nan_output_is_diverged():
    data = regression_data()
    res = run(data=data, model=NanAfter(small_net(data)))
    assert res.status == "diverged"
    assert res.diverged_step == 6  # the 6th training forward is the first NaN
    assert res.test_metric is None and res.val_metric is None and res.test_loss is None


def test_huge_lr_is_diverged():
    cfg = TrainConfig(steps=50, batch_size=64, lr=1e4, clip=1e9, blowup=10, eval_points=5)
    res = run(cfg=cfg)
    assert res.status == "diverged"
    assert res.diverged_step is not None and 1 < res.diverged_step <= 50
    assert res.test_metric is None


def test_classification_reaches_high_accuracy():
    data = classification_data()
    model = small_net(data)
    cfg = TrainConfig(steps=200, batch_size=64, lr=1e-2, eval_points=5)
    res = train(model, data, cfg, seed=0, threshold=0.3)
    assert res.status == "done"
    assert res.test_metric > 0.9
    with torch.no_grad():
        accuracy = (model(data.test.x).argmax(-1) == data.test.y).float().mean().item()
    assert res.test_metric == pytest.approx(accuracy)  # the metric is accuracy, not a loss
    assert evaluate(model, data.test, "classification")[1] == pytest.approx(accuracy)


def test_lr_factor_warmup_then_decay():
    steps, warmup = 100, 0.1
    cfg = TrainConfig(steps=steps, warmup=warmup)
    factors = [lr_factor(s, cfg) for s in range(steps)]
    assert factors[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])  # linear warmup
    assert max(factors) == pytest.approx(1.0)
    decay = factors[9:]
    assert all(a >= b for a, b in zip(decay, decay[1:], strict=False))
    assert factors[-1] < 1e-3
    assert lr_factor(steps, cfg) == pytest.approx(0.0, abs=1e-12)


def test_lr_factor_without_warmup_starts_at_one():
    assert lr_factor(0, TrainConfig(steps=100, warmup=0.0)) == 1.0


def test_wsd_holds_the_peak_then_decays_linearly_to_zero():
    cfg = TrainConfig(steps=100, warmup=0.1, schedule="wsd", decay=0.2)
    factors = [lr_factor(s, cfg) for s in range(101)]
    assert factors[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert factors[10:81] == [1.0] * 71  # held until the last 20 steps
    assert factors[80:] == pytest.approx([(100 - s) / 20 for s in range(80, 101)])


def test_cosine_reads_the_fall_over_the_last_quarter():
    steps = list(range(0, 101, 5))
    flat = [1.0] * len(steps)
    falling = [2.0 - s / 100 for s in steps]
    assert plateau_improvement(steps, flat) == pytest.approx(0.0)
    # smoothed over 3 evaluations: 1.25 around step 75, 1.05 at the end
    assert plateau_improvement(steps, falling) == pytest.approx((1.25 - 1.05) / 1.05)
    assert plateau_improvement(steps[:5], falling[:5]) is None  # too short to tell


WSD = TrainConfig(steps=200, batch_size=64, lr=1e-2, eval_points=10, schedule="wsd", warmup=0.0)


def test_the_half_run_is_a_run_of_half_the_steps():
    """Without warmup the branch is exactly a wsd run of half the steps on the same batches:
    its validation loss is that run's final one."""
    data = regression_data()
    full = run(WSD, data=data)
    half = run(TrainConfig(**{**WSD.__dict__, "steps": 100}), data=data)
    assert full.half_val_loss == pytest.approx(half.curves["val_loss"][-1], rel=1e-5)
    end = full.curves["val_loss"][-1]
    assert full.plateau_improvement == pytest.approx((full.half_val_loss - end) / end)
    assert full.half_val_loss > end  # twice the steps still helped this small run


def test_the_half_run_leaves_the_full_run_as_it_was(monkeypatch):
    """The branch puts weights, optimizer state and batches back: the full run is the same to
    the bit with and without it."""
    cfg = TrainConfig(**{**WSD.__dict__, "warmup": 0.05})
    with_branch = run(cfg)
    monkeypatch.setattr(blocklab.fitting.train, "half_run", lambda cfg: None)
    without = run(cfg)
    assert with_branch.half_val_loss is not None and without.half_val_loss is None
    for key in ("step", "train_loss", "val_loss"):  # the first train loss is NaN in both
        np.testing.assert_array_equal(with_branch.curves[key], without.curves[key])
    assert with_branch.test_loss == without.test_loss


def test_the_wsd_branch_replays_its_batches_stops_when_not_finite_and_puts_back():
    """The one branch both loops take (`wsd_half_run`): at the branch step alone, on the batches
    the run reads next (which it then reads again), at the half run's rates; it stops at the
    first step that is not finite, and the state goes back even when scoring fails."""
    cfg = TrainConfig(steps=40, schedule="wsd", decay=0.25, warmup=0.0)
    first, end, half = half_run(cfg)
    state, taken, records = {"steps": 0}, [], []

    def branch(step, draw, finite=lambda n: True, score=lambda: state["steps"]):
        def step_at(batch, factor):
            taken.append((batch, factor))
            state["steps"] += 1
            return finite(state["steps"])

        return wsd_half_run(
            half_run(cfg),
            step,
            draw,
            snapshot=lambda: dict(state),
            restore=state.update,
            step_at=step_at,
            score=score,
            record=records.append,
        )

    draw = iter(range(100))
    assert branch(first - 1, draw) is draw and branch(first + 1, draw) is draw
    assert not taken and not records
    draw = branch(first, draw)
    rates = [lr_factor(s, half) for s in range(first, end)]
    assert taken == list(zip(range(end - first), rates, strict=True))
    assert records == [end - first] and state == {"steps": 0}
    assert list(itertools.islice(draw, 3)) == [0, 1, 2]  # the run reads them after the branch
    taken.clear()
    branch(first, iter(range(100)), finite=lambda n: n < 2)
    assert len(taken) == 2 and records[-1] is None and state == {"steps": 0}

    def fails():
        raise RuntimeError("scoring failed")

    with pytest.raises(RuntimeError, match="scoring failed"):
        branch(first, iter(range(100)), score=fails)
    assert state == {"steps": 0}


def test_wsd_warmup_must_end_before_the_half_run_decays():
    with pytest.raises(ValueError, match="half the steps"):
        TrainConfig(schedule="wsd", warmup=0.45, decay=0.2)
    TrainConfig(schedule="wsd", warmup=0.4, decay=0.2)  # the branch starts right after warmup


def test_a_cosine_trial_keeps_its_id_and_wsd_changes_it():

    def spec(train):
        return small_trial("2", 0, train)

    cosine = spec(TrainConfig())
    assert "schedule" not in cosine.config()["train"]  # ids made before wsd existed stand
    assert spec(TrainConfig(decay=0.3)).id == cosine.id  # decay is read by wsd alone
    assert spec(TrainConfig(schedule="wsd")).id != cosine.id
    assert spec(TrainConfig(schedule="wsd", decay=0.3)).id != spec(TrainConfig(schedule="wsd")).id


@pytest.mark.parametrize(
    "kw",
    [
        *({"steps": 0}, {"batch_size": 0}, {"eval_points": 0}, {"lr": 0.0}, {"warmup": 1.0}),
        *({"schedule": "linear"}, {"decay": 0.0}, {"schedule": "wsd", "warmup": 0.5, "decay": 0.5}),
    ],
)
def test_train_config_validates(kw):
    with pytest.raises(ValueError):
        TrainConfig(**kw)

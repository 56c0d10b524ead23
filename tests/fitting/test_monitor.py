"""A trial's monitor on hand-made losses: the divergence rule, the checkpoints and their training
loss, the step at which the threshold was reached, the plateau measure and the result."""

import math

import pytest

from blocklab.fitting.monitor import TrialMonitor, diverges, eval_steps
from blocklab.specs import TrainConfig

CFG = TrainConfig(steps=100, eval_points=4, blowup=10.0)
NAN, INF = float("nan"), float("inf")


def monitor(cfg=CFG, threshold=0.5) -> TrialMonitor:
    return TrialMonitor(cfg, threshold)


def test_the_rule_takes_finite_losses_within_blowup_times_the_start():
    assert not diverges(2.0, 2.0, 10.0)
    assert not diverges(19.9, 2.0, 10.0)  # grown, but under 10 times the start
    assert not diverges(0.0, 2.0, 10.0)


@pytest.mark.parametrize(
    "loss, start, norm",
    [
        (NAN, 2.0, 1.0),
        (INF, 2.0, 1.0),
        (-INF, 2.0, 1.0),
        (20.1, 2.0, 1.0),  # above 10 times the start
        (1.0, 2.0, NAN),  # a finite loss whose gradient is not
        (1.0, 2.0, INF),
        (0.011, 0.0, 1.0),  # a start of 0 is floored, not a bar every loss clears
    ],
)
def test_the_rule_calls_non_finite_or_blown_up_steps_diverged(loss, start, norm):
    assert diverges(loss, start, 10.0, norm)


def test_the_floor_keeps_a_start_near_zero_from_calling_noise_a_blow_up():
    assert not diverges(0.009, 1e-6, 10.0)


def test_step_stops_at_the_first_diverged_step_and_reads_blowup_from_the_config():
    m = monitor()
    assert m.step(1, 2.0) and m.step(2, 19.0) and not m.diverged
    assert not m.step(3, 21.0)  # 10.5 times the first loss, the start
    assert m.diverged
    result = m.result(0.9, (0.1, 0.9), 1.0)  # final scores of a diverged trial are ignored
    assert (result.status, result.diverged_step, result.test_metric) == ("diverged", 3, None)
    assert result.plateau_improvement is None and result.half_val_loss is None


def test_a_nan_loss_diverges_at_its_step():
    m = monitor()
    m.step(1, 1.0)
    assert not m.step(2, NAN)
    assert m.result(None, None, 0.0).diverged_step == 2


def test_a_non_finite_gradient_norm_diverges():
    m = monitor()
    assert not m.step(1, 1.0, INF)
    assert m.result(None, None, 0.0).diverged_step == 1


def test_non_finite_final_scores_diverge_at_the_last_step():
    m = monitor()
    m.step(1, 1.0)
    result = m.result(NAN, (1.0, NAN), 0.0)
    assert (result.status, result.diverged_step) == ("diverged", CFG.steps)


def test_checkpoints_average_the_training_losses_since_the_last_one():
    m = monitor()
    assert (
        [s for s in range(CFG.steps + 1) if m.due(s)] == eval_steps(100, 4) == [0, 25, 50, 75, 100]
    )
    m.checkpoint(0, 1.0)
    for step, loss in enumerate([1.0, 0.8, 0.6], start=1):
        m.step(step, loss)
    m.checkpoint(3, 0.7)
    m.step(4, 0.2)
    m.checkpoint(4, 0.4)
    m.checkpoint(5, 0.3)
    assert m.curves["step"] == [0, 3, 4, 5]
    assert m.curves["val_loss"] == [1.0, 0.7, 0.4, 0.3]
    train = m.curves["train_loss"]
    assert math.isnan(train[0]) and math.isnan(train[3])  # no training step before them
    assert train[1:3] == pytest.approx([0.8, 0.2])
    result = m.result(0.3, (0.3, 0.9), 2.0)
    assert result.status == "done" and result.diverged_step is None
    assert result.steps_to_threshold == 4  # the first validation loss at or below 0.5


def test_the_plateau_under_cosine_is_the_fall_over_the_last_quarter():
    m = monitor(TrainConfig(steps=100, eval_points=20, schedule="cosine"))
    for step in range(0, 101, 5):
        m.checkpoint(step, 2.0 - step / 100)
    # smoothed over 3 evaluations: 1.25 around step 75, 1.05 at the end
    assert m.result(1.0, (1.0, 1.0), 0.0).plateau_improvement == pytest.approx(0.2 / 1.05)


def test_the_plateau_under_wsd_is_what_the_half_run_lost():
    wsd = TrainConfig(steps=100, eval_points=4, schedule="wsd", warmup=0.0)
    m = monitor(wsd)
    m.checkpoint(0, 2.0)
    m.checkpoint(100, 1.0)
    assert m.plateau() is None  # no half run recorded
    m.record_half_run(1.1)
    result = m.result(1.0, (1.0, 1.0), 0.0)
    assert result.plateau_improvement == pytest.approx(0.1)
    assert result.half_val_loss == 1.1
    m.record_half_run(None)  # the half run went non-finite
    assert m.plateau() is None


def test_the_device_rule_agrees_with_the_host_rule_value_for_value():
    """`diverging` (tensors, never read back) calls the same steps diverged as `diverges`, at
    the blow-up boundary too: float32 losses just under and just over 10 times the start."""
    import torch

    from blocklab.fitting.monitor import diverging

    start = torch.tensor(0.3, dtype=torch.float32)
    bar = float(start) * 10.0
    below, above = (torch.tensor(bar).nextafter(torch.tensor(d)) for d in (0.0, 1e9))
    cases = [(2.0, 2.0, 1.0), (19.9, 2.0, 1.0), (0.0, 2.0, 1.0), (0.009, 0.0, 1.0)]
    cases += [(loss, start, norm) for loss, start, norm in [(NAN, 2.0, 1.0), (INF, 2.0, 1.0)]]
    cases += [(20.1, 2.0, 1.0), (1.0, 2.0, NAN), (1.0, 2.0, INF), (0.011, 0.0, 1.0)]
    cases += [(float(below), float(start), 1.0), (float(above), float(start), 1.0)]
    losses, starts, norms = (
        torch.tensor(c, dtype=torch.float32) for c in zip(*cases, strict=False)
    )
    on_device = diverging(losses, starts, 10.0, norms).tolist()
    on_host = [diverges(*(float(torch.tensor(v, dtype=torch.float32)) for v in (l, s)), 10.0, n)
               for l, s, n in cases]  # fmt: skip
    assert on_device == on_host
    assert on_host[-2:] == [False, True]  # the boundary is inside the cases

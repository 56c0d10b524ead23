"""An ensemble step on the device: one optimizer pass for members at different rates, a
diverged member frozen (left out of the kernel's calls, or put back by a mask), and on the
"mask" path, a GPU's, no host reads between checkpoints."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from _specs import small_trial
from blocklab.engine import trial
from blocklab.fitting import ensemble, monitor, stacked_adamw
from blocklab.fitting.ensemble import StackedAdamW
from blocklab.fitting.monitor import eval_steps
from blocklab.specs import TrainConfig


@pytest.mark.parametrize("path", stacked_adamw.PATHS)
def test_one_pass_at_each_members_rate_is_torchs_adamw_and_a_frozen_member_stays_put(path):
    torch.manual_seed(0)
    shapes = [(3, 4, 5), (3, 5)]  # (E, ...) for E = 3
    lrs, clip, wd = [1e-2, 3e-3, 1e-1], 0.5, 0.01
    stacked = [torch.randn(s, requires_grad=True) for s in shapes]
    alone = [[nn.Parameter(p.detach()[e].clone()) for p in stacked] for e in range(3)]
    torch_opts = [
        torch.optim.AdamW(ps, lr=lr, weight_decay=wd) for ps, lr in zip(alone, lrs, strict=True)
    ]
    opt = StackedAdamW(stacked, lrs, wd, path=path)
    frozen_at = [p.detach()[2].clone() for p in stacked]
    for step in range(6):
        grads = [torch.randn(s) for s in shapes]
        if step >= 3:  # member 2 diverged at step 3: its gradient is NaN, it must not move
            grads = [torch.cat([g[:2], torch.full_like(g[2:], float("nan"))]) for g in grads]
        for p, g in zip(stacked, grads, strict=True):
            p.grad.copy_(g)  # in place: the optimizer's views read these tensors
        live = torch.tensor([True, True, step < 3])
        if step == 2:
            frozen_at = [p.detach()[2].clone() for p in stacked]
        norms = opt.grad_norms()
        opt.step(0.5, live, norms, clip)
        for e in range(3 if step < 3 else 2):
            for p, g in zip(alone[e], grads, strict=True):
                p.grad = g[e].clone()
            nn.utils.clip_grad_norm_(alone[e], clip)
            for group in torch_opts[e].param_groups:
                group["lr"] = lrs[e] * 0.5
            torch_opts[e].step()
    for e in range(3):
        for p, q in zip(stacked, alone[e], strict=True):
            torch.testing.assert_close(p.detach()[e], q.detach(), rtol=1e-5, atol=1e-6)
    after_freeze = [p.detach()[2] for p in stacked]
    # member 2 took its step 2 update and none after
    assert all(torch.isfinite(p).all() for p in after_freeze)
    assert not all(
        torch.equal(a, b) for a, b in zip(after_freeze, frozen_at, strict=True)
    )  # step 2 moved it
    frozen_now = [p.detach()[2].clone() for p in stacked]
    opt.step(1.0, torch.tensor([True, True, False]), opt.grad_norms(), clip)
    assert all(torch.equal(a, p.detach()[2]) for a, p in zip(frozen_now, stacked, strict=True))


def _specs(steps: int):
    cfg = TrainConfig(steps=steps, batch_size=16, lr=3e-3, eval_points=4)
    # the second diverges
    return [
        small_trial("3", seed, dataclasses.replace(cfg, lr=lr))
        for seed, lr in ((0, 3e-3), (1, 1e4))
    ]


READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu")


def _host_reads(monkeypatch, steps: int, path: str = "mask") -> int:
    """How often a tensor is read back to the host while an ensemble trains `steps` steps, its
    optimizer on `path`."""
    specs = _specs(steps)
    prepared = [trial._prepare(s, "cpu") for s in specs]
    count = [0]
    with monkeypatch.context() as patch:
        patch.setattr(stacked_adamw, "default_path", lambda device: path)
        for name in READS:
            original = getattr(torch.Tensor, name)

            def counted(self, *a, _original=original, **k):
                count[0] += 1
                return _original(self, *a, **k)

            patch.setattr(torch.Tensor, name, counted)
        results, _ = ensemble.train_ensemble(
            [p.model for p in prepared], [p.data for p in prepared], [s.train for s in specs],
            [s.seed for s in specs], [p.threshold for p in prepared],
        )  # fmt: skip
    assert [r.status for r in results] == ["done", "diverged"]
    return count[0]


@pytest.mark.parametrize("read_every", [10_000, 16])
def test_host_reads_do_not_grow_with_the_steps_between_checkpoints(monkeypatch, read_every):
    """Four checkpoints either way: training 80 steps reads back as often as training 20, save
    the READ_EVERY reads; a diverging member is still found (every member reads the same)."""
    monkeypatch.setattr(monitor, "READ_EVERY", read_every)
    short, long = _host_reads(monkeypatch, 20), _host_reads(monkeypatch, 80)

    def extra(steps):  # READ_EVERY's reads at steps that are not checkpoints anyway
        due = set(eval_steps(steps, 4))
        return sum(s % read_every == 0 and s not in due for s in range(1, steps + 1))

    assert long - short == extra(80) - extra(20)


def test_the_cpus_skip_path_reads_which_members_live_once_a_step(monkeypatch):
    """The "skip" path, a CPU's, reads the (E,) mask every step, and nothing else more: 60 steps
    more, 60 reads more than the "mask" path makes (which would fail the test above)."""
    monkeypatch.setattr(monitor, "READ_EVERY", 10_000)
    skip = _host_reads(monkeypatch, 80, "skip") - _host_reads(monkeypatch, 20, "skip")
    mask = _host_reads(monkeypatch, 80, "mask") - _host_reads(monkeypatch, 20, "mask")
    assert skip - mask == 80 - 20


def test_the_branch_free_long_way_of_the_cross_entropy_is_torchs():
    """`underflow_free`, what a GPU's loss takes for rows whose label probability underflows
    (so that no row count is read back): torch's cross-entropy, on ordinary rows and on rows
    whose label sits 200 below the top logit."""
    from torch.nn import functional as F

    from blocklab.tasks.base import underflow_free

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, generator=g)
    logits[3:, 0] = 200.0  # the label (1) far below the top: p_y underflows float32
    labels = torch.tensor([0, 2, 4, 1, 1, 1])
    p = torch.softmax(logits, -1)
    assert (p[3:, 1] == 0).all()
    got = underflow_free(logits, p, labels.unsqueeze(-1))
    want = F.cross_entropy(logits, labels, reduction="none")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

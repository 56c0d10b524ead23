"""The ensemble's optimizer (`fitting.stacked_adamw`): its step, on either path, is bit for bit
torch's fused AdamW kernel called for each member alone with a frozen member skipped, and its flat
buffers hold the parameters in place."""

from __future__ import annotations

import pytest
import torch

from blocklab.fitting.stacked_adamw import PATHS, StackedAdamW, default_path, packed

SHAPES = [(4, 5, 7), (4, 7), (4, 3, 3, 2), (4, 16)]  # (E, ...): lengths with and without a tail
LRS = [1e-2, 3e-3, 1e-2, 1e-1]  # two members at one rate


def _per_member(params, state, lrs, t, factor, live, norms, clip, wd):
    """The step as one kernel call per member: each its clipping, its rate, skipped if frozen."""
    grads, exp_avg, exp_avg_sq = state
    count = torch.tensor(float(t))
    coef = torch.clamp(clip / (norms + 1e-6), max=1.0)
    for e, lr in enumerate(lrs):
        member_grads = [g[e] for g in grads]
        torch._foreach_mul_(member_grads, coef[e])
        torch._fused_adamw_(
            [p.detach()[e] for p in params],
            member_grads,
            [m[e] for m in exp_avg],
            [v[e] for v in exp_avg_sq],
            [],
            [count] * len(params),
            lr=torch.tensor(lr * factor, dtype=torch.float64),
            beta1=0.9,
            beta2=0.999,
            weight_decay=wd,
            eps=1e-8,
            amsgrad=False,
            maximize=False,
            found_inf=(~live[e]).float(),
        )


@pytest.mark.parametrize("path", PATHS)
def test_a_step_is_the_kernel_called_for_each_member_alone_to_the_bit(path):
    gen = torch.Generator().manual_seed(0)
    stacked = [torch.randn(s, generator=gen).requires_grad_() for s in SHAPES]
    alone = [p.detach().clone() for p in stacked]
    state = [[torch.zeros(s) for s in SHAPES] for _ in range(3)]
    opt = StackedAdamW(stacked, LRS, weight_decay=0.01, path=path)
    for step in range(1, 7):
        grads = [torch.randn(s, generator=gen) for s in SHAPES]
        if step >= 4:  # member 1 diverged at step 4: a NaN gradient, frozen from then on
            for g in grads:
                g[1] = float("nan")
        live = torch.tensor([True, step < 4, True, True])
        for p, g, mine in zip(stacked, grads, state[0], strict=True):
            p.grad.copy_(g)
            mine.copy_(g)
        norms = opt.grad_norms()
        factor = 0.5 + 0.1 * step
        opt.step(factor, live, norms, clip=0.5)
        _per_member(alone, state, LRS, step, factor, live, norms, 0.5, 0.01)
    for p, q in zip(stacked, alone, strict=True):
        assert torch.equal(p.detach(), q)
    for mine, theirs in zip(state[1:], (opt.exp_avg, opt.exp_avg_sq), strict=True):
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))
    assert all(torch.isfinite(p).all() for p in stacked)  # the frozen member kept its values


def test_packed_moves_tensors_into_one_buffer_once_and_keeps_them():
    tensors = [torch.randn(s).requires_grad_() for s in SHAPES]
    values = [t.detach().clone() for t in tensors]
    flat = packed(tensors)
    assert all(torch.equal(t.detach(), v) for t, v in zip(tensors, values, strict=True))
    assert all(t.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr() for t in tensors)
    # each starts on a 64-byte boundary, as a tensor allocated alone
    assert all(t.data_ptr() % 64 == 0 for t in tensors)
    views = [t.detach()[0] for t in tensors]
    again = packed(tensors)  # already in place: nothing moves, views taken since stay valid
    assert again.data_ptr() == flat.data_ptr() and again.shape == flat.shape
    again.fill_(2.0)
    assert all((v == 2.0).all() for v in views)


def test_a_cpu_skips_and_a_gpu_masks():
    assert default_path(torch.device("cpu")) == "skip"
    assert default_path(torch.device("cuda", 0)) == "mask"
    with pytest.raises(ValueError, match="path must be one of"):
        StackedAdamW([torch.zeros(2, 3, requires_grad=True)], [1e-3, 1e-3], 0.0, path="loop")

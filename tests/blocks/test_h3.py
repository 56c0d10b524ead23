"""The h3 block: FFT path against the direct reference (float64, forward and backward), its SSM
kernels against their recurrences, causality, exact counts, bad options, training, ensembles."""

import pytest
import torch
import torch.nn.functional as F

from blocklab.blocks import BLOCKS, make_block
from blocklab.errors import UserError
from blocklab.fitting.ensemble import Ensemble
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape
from blocklab.tasks import make_task
from blocklab.tasks.base import IGNORE

TOL = 1e-10


def build(d_in=6, d_out=4, seed=0, **kw):
    torch.manual_seed(seed)
    return make_block("h3", d_in, d_out, **kw).double()


def inputs(b=2, t=7, d_in=6, seed=0):
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randn(b, t, d_in, generator=g, dtype=torch.float64)


def with_grads(fn, block, x):
    x = x.clone().requires_grad_(True)
    y = fn(x)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(9), dtype=y.dtype)
    grads = torch.autograd.grad((y * w).sum(), [x, *block.parameters()])
    return y.detach(), grads


@pytest.mark.parametrize(
    "t,kw",
    [
        (3, {}),  # T < state: the taps past T never act
        (7, {"state": 4, "bias": True}),
        (12, {"state": 6, "head_dim": 2}),
        (16, {}),
        (19, {"state": 5, "head_dim": 4}),
    ],
)
def test_fft_matches_the_direct_reference(t, kw):
    block = build(**kw)
    x = inputs(t=t)
    y, grads = with_grads(block, block, x)
    y_ref, grads_ref = with_grads(block.reference, block, x)
    assert torch.allclose(y, y_ref, rtol=TOL, atol=TOL)
    names = ["x", *(n for n, _ in block.named_parameters())]
    for name, g, g_ref in zip(names, grads, grads_ref, strict=True):
        assert torch.allclose(g, g_ref, rtol=TOL, atol=TOL), name
        assert g.abs().sum() > 0, name


def test_leading_dimensions_ride_along():
    block = build(head_dim=2)
    x = inputs(b=6, t=5).view(2, 3, 5, 6)  # (E, B, T, D_in)
    assert torch.allclose(block(x), block(x.flatten(0, 1)).view(2, 3, 5, 4), atol=TOL)


def test_shift_kernel_is_the_fir_taps():
    block = build(state=5)
    k = block.shift_kernel(8)  # (T, D)
    assert torch.equal(k[:5], block.shift_c.T) and torch.equal(k[5:], torch.zeros(3, 4))
    assert torch.equal(block.shift_kernel(3), block.shift_c[:, :3].T)


def test_diag_kernel_is_the_impulse_response_of_the_recurrence():
    """h_t = exp(dt A) h_{t-1} + B_bar u_t, y_t = 2 Re(C h_t), B_bar = (exp(dt A) - 1) / A."""
    block = build(state=8, head_dim=2)
    with torch.no_grad():
        block.a_im.add_(torch.randn_like(block.a_im))  # off the init grid
        block.log_a.add_(torch.randn_like(block.log_a))
        dt = block.log_dt.exp()[:, None]  # (H, 1)
        a = torch.complex(-block.log_a.exp(), block.a_im)  # (H, P)
        c = torch.complex(block.c_re, block.c_im)
        decay, b_bar = (dt * a).exp(), ((dt * a).exp() - 1) / a
        h, out = torch.zeros_like(a), []
        for t in range(10):
            h = decay * h + b_bar * (1.0 if t == 0 else 0.0)
            out.append(2 * (c * h).sum(-1).real)  # (H,)
        # closed form against ten multiplications: ten steps of ulps apart, far inside 1e-10
        assert torch.allclose(block.diag_kernel(10), torch.stack(out), rtol=1e-10, atol=1e-12)


def test_real_part_of_a_stays_negative():
    block = build()
    with torch.no_grad():
        block.log_a.fill_(-30.0)  # any value of the parameter keeps every mode decaying
        k = block.diag_kernel(50)
    assert torch.isfinite(k).all()


@pytest.mark.parametrize("kw", [{}, {"head_dim": 2, "state": 6}, {"bias": True}])
def test_causal(kw):
    block, t = build(**kw), 9
    x = inputs(t=t)
    with torch.no_grad():
        y = block(x)
        for first in range(t):
            x2 = x.clone()
            x2[:, first:] += torch.randn_like(x2[:, first:])
            y2 = block(x2)
            # the FFT convolution mixes every position, so the past moves by its rounding only
            # (ulps of the output's unit scale); a leak from the future moves it by order one
            assert torch.allclose(y2[:, :first], y[:, :first], rtol=0, atol=1e-12)
            assert not torch.allclose(y2[:, first:], y[:, first:])


def n_params(block):
    return sum(p.numel() for p in block.parameters() if p.requires_grad)


@pytest.mark.parametrize("kw", [*BLOCKS.get("h3").examples, {"state": 10, "head_dim": 4}])
@pytest.mark.parametrize("d_in,d_out", [(7, 5), (6, 8), (3, 20)])
def test_exact_parameter_count(kw, d_in, d_out):
    if d_out % kw.get("head_dim", 1):
        pytest.skip("head_dim does not divide d_out")
    block = make_block("h3", d_in, d_out, **kw)
    assert BLOCKS.get("h3").count_params(d_in, d_out, **kw) == n_params(block)


def test_parameter_count_formula():
    # q, k, v, o: 3 * 3 * 4 + 4 * 4; C_shift 4 * 4; 2 heads of 2 pairs: 2 * (4 * 2 + 2)
    assert BLOCKS.get("h3").count_params(3, 4, state=4, head_dim=2) == 52 + 16 + 20
    # bias: 3 * 4 + 4 more
    assert BLOCKS.get("h3").count_params(3, 4, state=4, head_dim=2, bias=True) == 88 + 16


def test_degree_three_homogeneous():
    block = build(head_dim=2)
    assert block.degree == 3 and block.homogeneous_degree == 3.0
    assert build(bias=True).homogeneous_degree is None
    x = inputs()
    with torch.no_grad():
        assert torch.allclose(block(2 * x), 8 * block(x), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"causal": False}, "causal only"),
        ({"causal": "yes"}, "causal must be true or false"),
        ({"state": 3}, "state must be >= 4"),
        ({"state": 0}, "state must be an integer"),
        ({"head_dim": 3}, "head_dim must divide d_out"),
        ({"bias": 1}, "bias must be true or false"),
    ],
)
def test_bad_options_refused(kw, match):
    with pytest.raises(UserError, match=match):
        make_block("h3", 6, 4, **kw)
    with pytest.raises(UserError, match=match):
        BLOCKS.get("h3").count_params(6, 4, **kw)


def test_trains_in_a_two_layer_net_on_mqar():
    data = make_task(
        "mqar", seq_len=16, vocab=32, num_kv_pairs=2, n_train=256, n_val=64, n_test=64
    ).make(0)
    torch.manual_seed(0)
    net = Net(
        parse_arm("h3(causal=true)"), NetShape(2, 32, norm="layer"), 32, 32, seq_len=16, vocab=32
    )
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    g, losses = torch.Generator().manual_seed(0), []
    for _ in range(60):
        i = torch.randint(len(data.train), (32,), generator=g)
        out = net(data.train.x[i])  # (b, T, V)
        loss = F.cross_entropy(out.flatten(0, 1), data.train.y[i].flatten(), ignore_index=IGNORE)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) / 10 < 0.5 * losses[0]


@pytest.mark.parametrize("path", ["stacked", "vmap"])
def test_a_two_member_ensemble_equals_its_members(path):
    """Each member's kernels from its own SSM parameters, on either ensemble path."""
    arm, t = parse_arm("h3(head_dim=2,state=6)"), 6
    nets = []
    for seed in range(2):
        torch.manual_seed(seed)
        nets.append(Net(arm, NetShape(2, 8, norm="layer"), 4, 3, seq_len=t))
    x = torch.randn(2, 5, t, 4, generator=torch.Generator().manual_seed(0))  # (E, B, T, D)
    refs, grads = [], []
    for e, net in enumerate(nets):
        y = net(x[e])
        y.square().sum().backward()
        refs.append(y.detach())
        grads.append({k: p.grad.clone() for k, p in net.named_parameters()})
    ens = Ensemble(nets, path)
    assert ens.path == path
    out = ens(x)
    out.square().sum().backward()
    for e in range(2):
        assert torch.allclose(out[e], refs[e], atol=1e-5, rtol=1e-4)
        for name, p in ens.params.items():
            assert torch.allclose(p.grad[e], grads[e][name], atol=1e-5, rtol=1e-4), name

"""The hyena block: the FFT path against its lag-by-lag reference (forward and backward, float64),
the paper's matrix form, causality, exact parameter counts, degrees, the implicit filters, bad
options, and training in a 2-layer network, alone and in an ensemble (both paths)."""

import math

import pytest
import torch

from _specs import small_trial
from blocklab.blocks import BLOCKS, make_block
from blocklab.blocks.hyena import Hyena, decay_rates, short_conv
from blocklab.engine import trial
from blocklab.errors import UserError
from blocklab.experiments import mad
from blocklab.fitting.ensemble import Ensemble
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape, TrainConfig
from blocklab.tasks import make_task

TOL = 1e-10


def build(d_in=6, d_out=4, seed=0, **kw):
    torch.manual_seed(seed)
    block = make_block("hyena", d_in, d_out, **kw).double()
    with torch.no_grad():
        for name, p in block.named_parameters():
            if "bias" in name and "ffn" not in name:
                p.normal_()  # zero-initialized biases would hide the lower-degree terms
    return block


def inputs(b=2, t=5, d_in=6, seed=0, lead=()):
    gen = torch.Generator().manual_seed(100 + seed)
    return torch.randn(*lead, b, t, d_in, generator=gen, dtype=torch.float64)


def with_grads(fn, block, x):
    x = x.clone().requires_grad_(True)
    y = fn(x)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(9), dtype=y.dtype)
    return y.detach(), torch.autograd.grad((y * w).sum(), [x, *block.parameters()])


@pytest.mark.parametrize(
    "t,order,bias,lead",
    [(1, 2, False, ()), (5, 2, True, ()), (7, 1, False, ()), (13, 3, True, ()), (32, 2, False, ())]
    + [(9, 2, True, (3,))],  # leading dimensions ride along
)
def test_fft_path_matches_the_reference(t, order, bias, lead):
    block = build(order=order, bias=bias, filter_width=5)
    x = inputs(t=t, lead=lead)
    y, grads = with_grads(block, block, x)
    y_ref, grads_ref = with_grads(block.reference, block, x)
    assert y.shape == (*lead, 2, t, 4)
    assert torch.allclose(y, y_ref, rtol=TOL, atol=TOL)
    names = ["x", *(n for n, _ in block.named_parameters())]
    for name, g, g_ref in zip(names, grads, grads_ref, strict=True):
        assert torch.allclose(g, g_ref, rtol=TOL, atol=TOL), name


def toeplitz(h):
    """(T, D) causal filter -> (D, T, T) lower-triangular matrices S[d, i, j] = h[i - j, d]."""
    t = h.shape[0]
    i, j = torch.meshgrid(torch.arange(t), torch.arange(t), indexing="ij")
    return torch.where(i >= j, h[(i - j).clamp(min=0)].permute(2, 0, 1), 0.0)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_the_paper_matrix_form(order):
    """y = W_out D_{x_N} (S_{h_N} + D_N) ... D_{x_1} (S_{h_1} + D_1) v: the recurrence written
    as dense Toeplitz and diagonal matrices (the paper's H(u) v)."""
    block, x, t = build(order=order, bias=True), inputs(t=6), 6
    with torch.no_grad():
        u = short_conv(block.proj(x), block.short_weight, block.short_bias)  # (B, T, (N+1) D)
        v, *gates = u.split(4, dim=-1)
        h = block.filters(t, x)  # (N, T, D)
        z = v.transpose(-1, -2)  # (B, D, T)
        for n, gate in enumerate(gates):
            s = toeplitz(h[n]) + torch.diag_embed(block.skip[n][:, None].expand(4, t))
            z = gate.transpose(-1, -2) * (s @ z[..., None])[..., 0]  # (B, D, T)
        assert torch.allclose(block(x), block.out(z.transpose(-1, -2)), rtol=TOL, atol=TOL)


def test_short_filter_is_three_causal_taps():
    u = torch.randn(2, 6, 3, dtype=torch.float64)
    w = torch.randn(3, 3, dtype=torch.float64)
    want = torch.stack(
        [sum(w[j] * u[:, i - j] for j in range(3) if i - j >= 0) for i in range(6)], dim=1
    )
    assert torch.allclose(short_conv(u, w, None), want)


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("t", [4, 9])
def test_no_output_reads_a_later_input(order, t):
    block = build(order=order, bias=True)
    x = inputs(t=t)
    with torch.no_grad():
        y = block(x)
        for src in range(1, t):
            x2 = x.clone()
            x2[:, src:] += torch.randn_like(x2[:, src:])
            y2 = block(x2)
            assert (y2[:, :src] - y[:, :src]).abs().max() < 1e-12
            assert (y2[:, src] - y[:, src]).abs().max() > 1e-6  # position src does read itself


def n_params(block):
    return sum(p.numel() for p in block.parameters() if p.requires_grad)


@pytest.mark.parametrize(
    "d_in,d_out,kw",
    [(7, 5, ex) for ex in Hyena.examples]
    + [(3, 9, {"order": 4, "filter_width": 5, "bias": True}), (16, 16, {}), (1, 1, {"order": 1})],
)
def test_count_params_is_exact(d_in, d_out, kw):
    block = make_block("hyena", d_in, d_out, **kw)
    assert Hyena.count_params(d_in, d_out, **kw) == n_params(block)


def test_count_params_formula_by_hand():
    # D = 8, N = 2, W = 16, bias off: 3 D d_in + D^2 + 3 * 3 D + FFN + N D skips
    ffn = 6 * 16 + 2 * (16 * 16 + 16) + 16 * 2 * 8 + 16
    assert Hyena.count_params(8, 8) == 3 * 64 + 64 + 9 * 8 + ffn + 16


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_degree_is_order_plus_one(order):
    block = make_block("hyena", 6, 4, order=order).double()
    assert block.degree == block.homogeneous_degree == block.nominal_degree == order + 1
    x = inputs(t=7)
    with torch.no_grad():
        for c in (2.0, 0.5):
            assert torch.allclose(block(c * x), c ** (order + 1) * block(x), rtol=1e-10)
    biased = make_block("hyena", 6, 4, order=order, bias=True)
    assert biased.degree == order + 1 and biased.homogeneous_degree is None


def test_filters_follow_the_input_length_and_decay():
    block = build(d_out=8)
    like = torch.empty(0, dtype=torch.float64)
    short, long = block.filters(5, like), block.filters(64, like)
    assert short.shape == (2, 5, 8) and long.shape == (2, 64, 8)
    # a function of s / T: the filter of length 64 sampled every 16 lags is the one of length 4
    assert torch.allclose(block.filters(4, like), long[:, ::16], rtol=TOL, atol=TOL)
    rates = decay_rates(8)
    assert rates[0] == pytest.approx(math.log(100) / 1.5) and rates[-1] == pytest.approx(
        math.log(100) / 0.3
    )
    # the window makes fast channels forget the far past: the last channel's late taps are small
    late = long[:, 40:].abs().mean((0, 1))  # (D,)
    early = long[:, :8].abs().mean((0, 1))
    assert (late / early)[-1] < (late / early)[0]


@pytest.mark.parametrize(
    "kw", [{"causal": False}, {"order": 0}, {"order": 1.5}, {"filter_width": 0}, {"bias": "yes"}]
)
def test_bad_options_are_one_line_user_errors(kw):
    with pytest.raises(UserError) as err:
        make_block("hyena", 4, 4, **kw)
    assert "\n" not in str(err.value)
    if "causal" in kw:
        assert str(err.value).startswith("hyena is causal only")


def test_the_token_suite_takes_it():
    assert "hyena" in mad.default_blocks()
    assert mad.causal_arm("hyena(order=3)").kwargs == {"order": 3, "causal": True}
    assert mad.nominal_degree(mad.causal_arm("hyena"), 8) == 3
    assert BLOCKS.get("hyena").stackable


@pytest.mark.parametrize("path", ["auto", "stacked", "vmap"])
def test_an_ensemble_of_members_each_with_its_own_filters(path):
    arm = parse_arm("hyena(causal=true)")
    nets = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        nets.append(Net(arm, NetShape(2, 8, norm="layer"), 5, 3, seq_len=6))
    x = torch.randn(2, 4, 6, 5)  # (E, B, T, F)
    want = torch.stack([net(xe) for net, xe in zip(nets, x, strict=True)])
    ens = Ensemble(nets, path)
    assert ens.path == ("stacked" if path == "auto" else path)
    assert torch.allclose(ens(x), want, atol=1e-5)


def test_trains_in_a_two_layer_network():
    task = make_task("mqar", seq_len=16, vocab=16, num_kv_pairs=2, n_train=256)
    data = task.make(0)
    torch.manual_seed(0)
    net = Net(
        parse_arm("hyena"), NetShape(2, 32, norm="layer"), 1, data.n_out, seq_len=16, vocab=16
    )
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    x, y = data.train.x, data.train.y
    lossfn = torch.nn.CrossEntropyLoss(ignore_index=-100)
    losses = []
    for step in range(40):
        batch = slice(32 * (step % 8), 32 * (step % 8 + 1))
        loss = lossfn(net(x[batch]).flatten(0, 1), y[batch].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5


def test_trains_alike_in_an_ensemble_and_alone():
    train = TrainConfig(steps=12, batch_size=16, lr=3e-3, eval_points=2)
    opts = {"seq_len": 16, "vocab": 16, "num_kv_pairs": 2, "n_train": 64, "n_val": 32}
    opts["n_test"] = 32

    def spec(seed):
        return small_trial(mad.causal_arm("hyena"), seed, train, task="mqar", options=opts)

    specs = [spec(0), spec(1)]
    together = trial.run_group(specs, "cpu")
    for s, record in zip(specs, together, strict=True):
        assert record["status"] != "failed", record.get("error")
        assert record["metrics"]["ensemble"] == {"members": 2, "path": "stacked"}
        alone = trial.run_trial(s, "cpu")["metrics"]
        assert record["metrics"]["test_metric"] == pytest.approx(alone["test_metric"], abs=1e-6)
        assert record["metrics"]["test_loss"] == pytest.approx(alone["test_loss"], rel=1e-4)

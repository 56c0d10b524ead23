"""Arms (what a comparison varies) and the vector-input network."""

import math

import pytest
import torch

from _specs import small_trial
from blocklab.errors import UserError
from blocklab.models import (
    Net,
    block_params,
    ff_params,
    layer_blocks,
    make_norm,
    mixes_tokens,
    parse_arm,
    parse_degree,
)
from blocklab.specs import NetShape


@pytest.mark.parametrize(
    "text,label,degree",
    [
        ("e", "d=e", math.e),
        ("2.5", "d=2.5", 2.5),
        ("3", "d=3", 3.0),
        ("[3,2,3]", "mix[3,2,3]", 8 / 3),
    ],
)
def test_parse_arm_polynomial(text, label, degree):
    arm = parse_arm(text)
    assert arm.label == label
    assert arm.degree == pytest.approx(degree)


def test_parse_arm_control():
    arm = parse_arm("mlp")
    assert (arm.label, arm.block, arm.degrees, arm.degree) == ("mlp", "mlp", (), None)


@pytest.mark.parametrize("text", ["0", "x", "nan", "-1", "inf", "0.5", ""])
def test_parse_degree_rejects(text):
    with pytest.raises(UserError):
        parse_degree(text)


@pytest.mark.parametrize("text", ["[]", "[3,x]", "ploy"])
def test_parse_arm_rejects(text):
    with pytest.raises(UserError):
        parse_arm(text)


def test_mixed_arm_cycles_pattern():
    blocks = layer_blocks(parse_arm("[3,2]"), 5)
    assert [kw["degree"] for _, kw in blocks] == [3, 2, 3, 2, 3]
    assert {name for name, _ in blocks} == {"poly"}


def test_fractional_layers_use_fractional_block():
    [(name, kw)] = layer_blocks(parse_arm("2.5"), 1)
    assert name == "fractional" and kw["degree"] == 2.5


def test_bias_with_fractional_degree_fails():
    with pytest.raises(UserError, match="bias"):
        layer_blocks(parse_arm("2.5"), 2, bias=True)
    with pytest.raises(UserError):
        Net(parse_arm("[3,2.5]"), NetShape(2, 8, bias=True, norm="layer"), 4, 1)


def make(arm="3", seed=0, n_in=40, **kw):
    torch.manual_seed(seed)
    task = {k: kw.pop(k) for k in ("seq_len", "pooled", "bottleneck", "vocab") if k in kw}
    return Net(parse_arm(arm), NetShape(3, 16, **{"norm": "layer", **kw}), n_in, 3, **task)


@pytest.mark.parametrize("arm", ["2", "e", "[3,2]", "mlp"])
@pytest.mark.parametrize("shape", [(6, 40), (6, 4, 10)])
def test_net_forward_shape(arm, shape):
    y = make(arm)(torch.randn(*shape))  # (B, 4, 10) inputs are flattened to (B, 40)
    assert y.shape == (6, 3)
    assert torch.isfinite(y).all()


def test_norms_add_no_parameters():
    counts = [make(norm=norm).param_counts() for norm in ("none", "layer", "rms")]
    assert counts[0] == counts[1] == counts[2]
    c = counts[0]
    assert c["total"] == c["embed"] + c["blocks"] + c["readout"]


@pytest.mark.parametrize("norm", ["none", "layer", "rms"])
def test_norm_changes_the_output(norm):
    x = torch.randn(5, 40)
    y = make(norm=norm)(x)
    assert torch.isfinite(y).all()
    if norm != "none":
        assert not torch.allclose(y, make(norm="none")(x))


def test_residual_changes_output():
    x = torch.randn(5, 40)
    with torch.no_grad():
        on, off = make(residual=True)(x), make(residual=False)(x)
    assert on.shape == off.shape
    assert not torch.allclose(on, off)


def test_same_seed_same_net():
    x = torch.randn(5, 40)
    with torch.no_grad():
        assert torch.equal(make(seed=3)(x), make(seed=3)(x))


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [("norm", "batch", "norm"), ("activation", "sigmoid", "activation"), ("ff", "gelu8x", "ff")],
)
def test_an_unknown_switch_is_refused_by_the_shape(key, value, words):
    with pytest.raises(ValueError, match=f"{words} must be one of"):
        NetShape(**{key: value})


def test_the_switches_named_as_text_are_refused_one_line():
    with pytest.raises(UserError, match="norm must be one of none, layer, rms"):
        make_norm("batch", 8)
    with pytest.raises(UserError, match="feed-forward must be one of none, relu4x"):
        ff_params("gelu8x", 8, False)


# --- sequence networks and the transformer switches ----------------------------------------


def test_parse_arm_block_with_options():
    arm = parse_arm("poly_attention(n=2)")
    assert (arm.label, arm.block, arm.kwargs, arm.degree) == (
        "poly_attention(n=2)",
        "poly_attention",
        {"n": 2},
        5,
    )
    assert parse_arm("softmax_attention(heads=2,causal=true)").kwargs == {
        "heads": 2,
        "causal": True,
    }
    assert parse_arm("linearized_attention").degree == 3
    assert parse_arm("softmax_attention").degree is None and mixes_tokens(
        parse_arm("softmax_attention")
    )


@pytest.mark.parametrize(
    "text", ["softmax_attention(heads=2", "softmax_attention(zzz=1)", "poly(degree=3)", "atention"]
)
def test_parse_arm_block_rejects(text):
    with pytest.raises(UserError):
        parse_arm(text)


@pytest.mark.parametrize("depth,width", [(1, 8), (3, 16)])
def test_common_transformer_costs_12_L_D2(depth, width):
    # seed 001 eq. 1-2: attention 4 D^2 + feed-forward 8 D^2 per layer, bias-free
    arm = parse_arm("softmax_attention(heads=2)")
    net = Net(arm, NetShape(depth, width, ff="relu4x", norm="layer"), 5, 3, seq_len=7)
    assert net.param_counts()["blocks"] == 12 * depth * width**2
    assert block_params(arm, depth, width, ff="relu4x") == 12 * depth * width**2


def test_analyzed_network_is_one_config_away():
    # seed 001 eq. 3: linearized attention, no norm, no feed-forward: 4 D^2 per layer
    arm = parse_arm("linearized_attention(heads=2)")
    net = Net(arm, NetShape(3, 8, ff="none", norm="none", residual=False), 5, 3, seq_len=7)
    assert net.param_counts()["blocks"] == 3 * 4 * 64
    x = torch.randn(2, 7, 5, dtype=torch.float64)
    net = net.double()
    with torch.no_grad():  # without norm or residual the stack is a polynomial in the embedding
        assert net(x).shape == (2, 7, 3)


@pytest.mark.parametrize("pooled,shape", [(False, (4, 7, 3)), (True, (4, 3))])
def test_sequence_net_shapes(pooled, shape):
    net = Net(
        parse_arm("softmax_attention"), NetShape(2, 8, norm="layer"), 5, 3, seq_len=7, pooled=pooled
    )
    assert net(torch.randn(4, 7, 5)).shape == shape


def test_sequence_net_mixes_positions_only_with_a_mixing_block():
    x = torch.randn(1, 7, 5)
    y = x.clone()
    y[0, 0] += 1.0
    for text, mixes in (("softmax_attention", True), ("3", False)):
        torch.manual_seed(0)
        net = Net(parse_arm(text), NetShape(2, 8, norm="layer"), 5, 3, seq_len=7)
        with torch.no_grad():
            changed = not torch.allclose(net(x)[0, -1], net(y)[0, -1])
        assert changed == mixes, text


def test_flatten_sees_every_position():
    net = Net(parse_arm("mlp"), NetShape(1, 16, flatten=True, norm="layer"), 5, 3, seq_len=7)
    x = torch.randn(2, 7, 5)
    out = net(x)
    assert out.shape == (2, 7, 3)
    assert net.embed.in_features == 35 and net.readout.out_features == 21
    y = x.clone()
    y[:, 0] += 1
    with torch.no_grad():
        assert not torch.allclose(net(x)[:, -1], net(y)[:, -1])


def test_mixing_block_needs_a_sequence():
    with pytest.raises(UserError, match="sequence"):
        Net(parse_arm("softmax_attention"), NetShape(1, 8, norm="layer"), 5, 3)
    with pytest.raises(UserError, match="sequence"):
        Net(parse_arm("mlp"), NetShape(1, 8, flatten=True, norm="layer"), 5, 3)


def test_mixer_gets_the_sequence_length():
    net = Net(parse_arm("mixer"), NetShape(2, 8, norm="layer"), 5, 3, seq_len=7)
    assert net(torch.randn(2, 7, 5)).shape == (2, 7, 3)
    assert block_params(parse_arm("mixer"), 2, 8, seq_len=7) == net.param_counts()["blocks"]


def test_scaled_residual_divides_each_branch_by_sqrt_depth():
    import dataclasses

    torch.manual_seed(0)
    plain = Net(parse_arm("3"), NetShape(4, 8, norm="layer"), 4, 1)
    torch.manual_seed(0)
    scaled = Net(parse_arm("3"), NetShape(4, 8, scaled_residual=True, norm="layer"), 4, 1)
    assert all(layer.scale == 1.0 for layer in plain.layers)
    assert all(layer.scale == pytest.approx(1 / math.sqrt(4)) for layer in scaled.layers)
    x = torch.randn(5, 8)  # (B, D)
    layer_p, layer_s = plain.layers[0], scaled.layers[0]
    branch = layer_p(x) - x
    torch.testing.assert_close(layer_s(x) - x, branch / 2)
    # off by default, and then absent from a trial's config: older trials keep their ids
    spec = small_trial("3")
    assert "scaled_residual" not in spec.config()
    on = dataclasses.replace(spec, shape=dataclasses.replace(spec.shape, scaled_residual=True))
    assert on.config()["scaled_residual"] is True and on.id != spec.id


def test_the_activations_a_spec_names_are_the_ones_a_network_builds():
    from blocklab import models, specs

    assert tuple(models.ACTIVATIONS) == specs.ACTIVATIONS

"""Arms (what a comparison varies) and the vector-input network."""

import math

import pytest
import torch

from blocklab.errors import UserError
from blocklab.models import Net, parse_arm, parse_degree


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
    blocks = parse_arm("[3,2]").layer_blocks(5)
    assert [kw["degree"] for _, kw in blocks] == [3, 2, 3, 2, 3]
    assert {name for name, _ in blocks} == {"poly"}


def test_fractional_layers_use_fractional_block():
    [(name, kw)] = parse_arm("2.5").layer_blocks(1)
    assert name == "fractional" and kw["degree"] == 2.5


def test_bias_with_fractional_degree_fails():
    with pytest.raises(UserError, match="bias"):
        parse_arm("2.5").layer_blocks(2, bias=True)
    with pytest.raises(UserError):
        Net(parse_arm("[3,2.5]"), 2, 8, n_in=4, n_out=1, bias=True)


def make(arm="3", seed=0, n_in=40, **kw):
    torch.manual_seed(seed)
    return Net(parse_arm(arm), depth=3, width=16, n_in=n_in, n_out=3, **kw)


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


@pytest.mark.parametrize("kw", [{"norm": "batch"}, {"activation": "sigmoid"}])
def test_unknown_norm_or_activation(kw):
    with pytest.raises(UserError):
        make(**kw)

"""Contract tests over every registered block and its `examples`, then block-specific checks."""

import math

import pytest
import torch

from blocklab.blocks import BLOCKS, make_block
from blocklab.blocks.fractional import Fractional, spow
from blocklab.blocks.poly import Poly
from blocklab.errors import UserError
from blocklab.registry import Registry

D_IN, D_OUT = 7, 5  # d_in != d_out catches a transposed or square-only weight
T = 3  # the sequence length of `inputs()`
CASES = [(name, kw) for name in BLOCKS.names() for kw in BLOCKS.get(name).examples]
CAUSAL_CASES = [(name, kw) for name, kw in CASES if kw.get("causal")]


def case_id(case) -> str:
    name, kw = case
    return "-".join([name, ",".join(f"{k}={v}" for k, v in kw.items())]) if kw else name


def full_kwargs(name, kw):
    """The example's kwargs plus the sequence length for blocks whose weights depend on it."""
    return {**kw, "seq_len": T} if BLOCKS.get(name).needs_seq_len else dict(kw)


def build(name, kw, seed=0, d_in=D_IN, d_out=D_OUT):
    torch.manual_seed(seed)
    return BLOCKS.get(name)(d_in, d_out, **full_kwargs(name, kw))


def inputs(seed=0, scale=1.0, dtype=torch.float32, d_in=D_IN):
    gen = torch.Generator().manual_seed(1000 + seed)  # independent of the init seed
    return (scale * torch.randn(4, T, d_in, generator=gen, dtype=torch.float64)).to(dtype)


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def rel_err(a, b) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.fixture(params=CASES, ids=[case_id(c) for c in CASES])
def case(request):
    return request.param


def test_registry_is_populated():
    sequence = {
        "linearized_attention",
        "softmax_attention",
        "linear_attention",
        "poly_attention",
        "tensor_attention",
        "mixer",
        "quadratic_mixing",
    }
    assert {"poly", "fractional", "mlp"} | sequence <= set(BLOCKS.names())
    assert all(BLOCKS.get(name).mixes_tokens for name in sequence)
    for name in BLOCKS.names():
        assert BLOCKS.get(name).name == name


def test_shape_and_finite(case):
    name, kw = case
    y = build(name, kw)(inputs())
    assert y.shape == (4, 3, D_OUT)
    assert torch.isfinite(y).all()


def test_count_params_is_exact(case):
    name, kw = case
    block = build(name, kw)
    count = BLOCKS.get(name).count_params(D_IN, D_OUT, **full_kwargs(name, kw))
    assert count == n_params(block) > 0


def test_gradient_reaches_every_parameter(case):
    name, kw = case
    block = build(name, kw)
    weights = torch.randn(4, T, D_OUT, generator=torch.Generator().manual_seed(5))
    (block(inputs()) * weights).sum().backward()
    for pname, p in block.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


def test_homogeneity(case):
    name, kw = case
    block = build(name, kw).double()
    k = block.homogeneous_degree
    if k is None:
        assert not isinstance(block, Poly) or block.bias  # bias-free poly must state its degree
        return
    exact = float(k).is_integer()
    # spow is homogeneous only for |z| >> eps: inputs of scale 10 put typical |V x| near 10
    x = inputs(scale=10.0, dtype=torch.float64)
    with torch.no_grad():
        fx = block(x)
        for c in (2.0, 0.5):
            fcx = block(c * x)
            assert rel_err(fcx, c**k * fx) < (1e-10 if exact else 1e-3), c
            estimate = math.log(fcx.norm().item() / fx.norm().item()) / math.log(c)
            assert estimate == pytest.approx(k, abs=1e-8 if exact else 2e-3), c


def test_determinism_by_seed(case):
    name, kw = case
    x = inputs()
    with torch.no_grad():
        a, b, c = build(name, kw, seed=0)(x), build(name, kw, seed=0)(x), build(name, kw, seed=1)(x)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def changed_at(block, x, src, dst) -> float:
    """Relative change of the output at position dst when only the input at position src moves."""
    x2 = x.clone()
    x2[:, src] += torch.randn(x.shape[0], x.shape[-1], generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        y, y2 = block(x)[:, dst], block(x2)[:, dst]
    return ((y2 - y).norm() / y.norm()).item()


def test_token_mixing_is_stated(case):
    name, kw = case
    block = build(name, kw).double()
    change = changed_at(block, inputs(dtype=torch.float64), src=0, dst=T - 1)
    if block.mixes_tokens:
        assert change > 1e-6  # the last position reads the first
    else:
        assert change < 1e-12  # a per-token block never mixes positions


@pytest.mark.parametrize("case", CAUSAL_CASES, ids=[case_id(c) for c in CAUSAL_CASES])
def test_causal_blocks_do_not_look_ahead(case):
    name, kw = case
    block = build(name, kw).double()
    assert changed_at(block, inputs(dtype=torch.float64), src=T - 1, dst=0) < 1e-12


def test_degree_attribute(case):
    name, kw = case
    block = build(name, kw)
    d = block.degree
    assert d is None or (isinstance(d, (int, float)) and not isinstance(d, bool) and d >= 1)
    if d is not None and block.homogeneous_degree is not None:
        assert block.homogeneous_degree == pytest.approx(d)  # homogeneous polynomial of degree d


# --- block-specific checks -------------------------------------------------------------------


def degree_of(block, x) -> float:
    with torch.no_grad():
        return math.log(block(2 * x).norm().item() / block(x).norm().item()) / math.log(2)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_poly_without_bias_is_homogeneous(d):
    block = build("poly", {"degree": d, "bias": False}).double()
    x = inputs(dtype=torch.float64)
    with torch.no_grad():
        assert rel_err(block(3 * x), 3.0**d * block(x)) < 1e-10
    assert degree_of(block, x) == pytest.approx(d, abs=1e-8)


def test_poly_with_bias_is_not_homogeneous():
    block = build("poly", {"degree": 3, "bias": True}).double()
    with torch.no_grad():
        block.proj.bias.normal_()  # zero-initialized biases would hide the lower-degree terms
        x = inputs(dtype=torch.float64)
        assert rel_err(block(2 * x), 8.0 * block(x)) > 1e-3
    assert block.homogeneous_degree is None


@pytest.mark.parametrize("d", [2.0, math.e, 3.0, 4.0], ids=["2", "e", "3", "4"])
def test_fractional_is_homogeneous(d):
    block = build("fractional", {"degree": d}, d_in=16, d_out=16).double()
    x = inputs(scale=10.0, dtype=torch.float64, d_in=16)
    with torch.no_grad():
        assert rel_err(block(2 * x), 2.0**d * block(x)) < 1e-3
    assert degree_of(block, x) == pytest.approx(d, abs=2e-3)


def test_fractional_integer_degree_is_poly():
    x = inputs()
    with torch.no_grad():
        frac = build("fractional", {"degree": 3})(x)
        poly = build("poly", {"degree": 3, "bias": False})(x)
    assert torch.equal(frac, poly)
    assert Fractional.count_params(D_IN, D_OUT, degree=3) == Poly.count_params(
        D_IN, D_OUT, degree=3, bias=False
    )


def test_fractional_cost_model_at_e():
    width = 32
    block = make_block("fractional", width, width, degree=math.e)
    target = math.e * width * width  # seed 000: params = d * N_dx
    assert abs(n_params(block) / target - 1) < 0.05
    assert Fractional.count_params(width, width, degree=math.e) == n_params(block)


def test_fractional_small_width_keeps_rank():
    block = make_block("fractional", 4, 4, degree=2.1)
    assert block.rank >= 1
    assert n_params(block) == Fractional.count_params(4, 4, degree=2.1) == 2 * 16 + block.rank * 8
    y = block(torch.randn(3, 4))
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("f", [0.1, 0.5, math.e - 2])
def test_spow_gradient_at_zero(f):
    eps = 1e-3
    z = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    spow(z, f, eps).sum().backward()
    assert torch.isfinite(z.grad).all()
    assert z.grad == pytest.approx([eps ** (f - 1)] * 3)  # d/dz z (z^2 + eps^2)^((f-1)/2) at 0


def test_spow_is_odd():
    z = torch.linspace(-3, 3, 13, dtype=torch.float64)
    assert torch.allclose(spow(-z, 0.5, 1e-3), -spow(z, 0.5, 1e-3))


@pytest.mark.parametrize("degree", [0, -1, 2.5])
def test_poly_rejects_invalid_degree(degree):
    with pytest.raises(UserError):
        make_block("poly", 4, 4, degree=degree)


@pytest.mark.parametrize("degree", [math.nan, math.inf, 0, -1, 0.5, True])
def test_fractional_rejects_invalid_degree(degree):
    with pytest.raises(UserError):
        make_block("fractional", 4, 4, degree=degree)


def test_unknown_block_name_suggests():
    with pytest.raises(UserError, match="did you mean 'poly'"):
        BLOCKS.get("ploy")
    with pytest.raises(UserError, match="did you mean 'poly'"):
        make_block("ploy", 4, 4)


def test_registry_rejects_duplicate_module_name():
    things = Registry("thing")
    first = things.register(type("First", (), {"__module__": "somepkg.widget"}))
    assert first.name == "widget" and things.get("widget") is first
    with pytest.raises(ValueError, match="registered twice"):
        things.register(type("Second", (), {"__module__": "somepkg.widget"}))
    assert things.get("widget") is first and things.names() == ["widget"]

"""The block contract (`blocklab.checks.blocks`, the battery `blocklab check` runs) over every
registered block and its `examples`, then block-specific checks."""

import math

import pytest
import torch

from _contract import contract_test
from blocklab.blocks import BLOCKS, make_block
from blocklab.blocks.fractional import Fractional, spow
from blocklab.blocks.poly import Poly, product_of_factors, product_of_factors_reference
from blocklab.checks import blocks as contract
from blocklab.checks.blocks import D_IN, D_OUT, build, inputs, n_params, rel_err
from blocklab.errors import UserError
from blocklab.registry import Registry

CASES = contract.cases()


test_contract = contract_test(contract, CASES)


def test_registry_is_populated():
    sequence = {
        "linearized_attention",
        "softmax_attention",
        "linear_attention",
        "poly_attention",
        "tensor_attention",
        "mixer",
        "quadratic_mixing",
        "mixing_module",
    }
    assert {"poly", "fractional", "mlp", "module"} | sequence <= set(BLOCKS.names())
    assert all(BLOCKS.get(name).mixes_tokens for name in sequence)
    assert not BLOCKS.get("module").mixes_tokens


def test_bias_free_poly_states_its_degree():
    for d in (1, 2, 3):
        assert build("poly", {"degree": d, "bias": False}).homogeneous_degree == d
        assert build("poly", {"degree": d}).homogeneous_degree is None


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


def test_an_experiment_in_a_home_registers_under_the_homes_name():
    """A manifest in `experiments/<home>/<module>.py` is named for its home; a class outside the
    registry's home package for its module's last component."""
    from blocklab.experiments import EXPERIMENTS
    from blocklab.experiments.degree_sweep import DegreeSweep

    assert DegreeSweep.__module__ == "blocklab.experiments.degree_sweep.experiment"
    assert DegreeSweep.name == "degree_sweep" and EXPERIMENTS.get("degree_sweep") is DegreeSweep
    things = Registry("thing", home="blocklab.experiments")
    assert things.name_of("blocklab.experiments.degree_sweep.experiment") == "degree_sweep"
    assert things.name_of("myplugin.experiments.home.experiment") == "experiment"
    assert things.name_of("blocklab.blocks.poly") == "poly"
    home = things.register(type("Home", (), {"__module__": "blocklab.experiments.home.run"}))
    assert home.name == "home" and things.names() == ["home"]


# --- the module blocks: any nn.Module a factory makes


def wide(width: int) -> torch.nn.Module:  # a factory for the tests below: (..., w) -> (..., 2w)
    return torch.nn.Linear(width, 2 * width)


def not_a_module(width: int):
    return width


@pytest.mark.parametrize(
    "factory, message",
    [
        ("no_colon", "package.module:function"),
        ("no_such_module_zz:fn", "cannot import"),
        ("blocklab.blocks.module:nothing", "has no 'nothing'"),
        (f"{__name__}:not_a_module", "not an nn.Module"),
    ],
)
def test_module_block_refuses_bad_factories(factory, message):
    with pytest.raises(UserError, match=message):
        make_block("module", 4, 4, factory=factory)


def test_module_block_maps_one_width_and_keeps_the_shape():
    with pytest.raises(UserError, match="d_in must equal d_out"):
        make_block("module", 4, 5, factory="blocklab.blocks.module:example")
    with pytest.raises(UserError, match="must keep the shape"):
        make_block("module", 4, 4, factory=f"{__name__}:wide")(torch.randn(2, 4))


def test_module_block_counts_its_factory_and_leaves_the_seed():
    factory = "torch.nn:LayerNorm"  # any callable of the width: a class too
    torch.manual_seed(0)
    count = BLOCKS.get("module").count_params(6, 6, factory=factory)
    after = torch.randn(3)
    torch.manual_seed(0)
    assert torch.equal(torch.randn(3), after)  # counting built a module under a forked RNG
    assert count == n_params(make_block("module", 6, 6, factory=factory)) == 12


@pytest.mark.parametrize("degree", [1, 2, 3, 4, 5])
def test_product_of_factors_matches_its_reference(degree):
    """The hand-written backward and jvp against autograd through the plain loop: forward,
    backward (plainly and as per-example gradients under torch.func.vmap) and forward mode."""
    g = torch.Generator().manual_seed(degree)
    z = torch.randn(4, 3, degree * 5, generator=g, dtype=torch.float64, requires_grad=True)
    up = torch.randn(4, 3, 5, generator=g, dtype=torch.float64)
    fast, ref = product_of_factors(z, degree, 5), product_of_factors_reference(z, degree, 5)
    # products without sums, in another order: each entry at most `degree` ulps apart relative
    # to itself, whatever the kernel, so 1e-12 (thousands of ulps) holds; a wrong factor: O(1)
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=0)
    (g_fast,) = torch.autograd.grad(fast, z, up)
    (g_ref,) = torch.autograd.grad(ref, z, up)
    torch.testing.assert_close(g_fast, g_ref, rtol=1e-12, atol=1e-15)

    def per_example(fn):
        return torch.func.vmap(torch.func.grad(lambda zz: (fn(zz, degree, 5) * up[0]).sum()))

    torch.testing.assert_close(
        per_example(product_of_factors)(z.detach()),
        per_example(product_of_factors_reference)(z.detach()),
        rtol=1e-12,
        atol=1e-15,
    )
    assert torch.autograd.gradcheck(lambda t: product_of_factors(t, degree, 5), (z[:1, :1],))
    # forward mode, as torch.func.jacfwd builds a Gauss-Newton Jacobian: the written-out jvp
    tangent = torch.randn(z.shape, generator=g, dtype=torch.float64)
    _, t_fast = torch.func.jvp(
        lambda t: product_of_factors(t, degree, 5), (z.detach(),), (tangent,)
    )
    _, t_ref = torch.func.jvp(
        lambda t: product_of_factors_reference(t, degree, 5), (z.detach(),), (tangent,)
    )
    torch.testing.assert_close(t_fast, t_ref, rtol=1e-12, atol=1e-15)

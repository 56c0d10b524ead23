"""Functional dimension (`blocklab.measures.functional`, Kileel, Trager, Bruna 2019): the rank of
d(outputs)/d(parameters) against counts known in closed form.

A degree-d product layer of width w has (d - 1) w redundant directions (row i of one factor times
c, row i of another times 1/c, a bias moving with its row), so a stack of L of them spans at most
P - (d - 1) w L dimensions, P counting the layers' weights and biases. That count is reached
where the stack sees and shows every direction of its residual stream: with RMS norms (whose
nonlinearity separates every coordinate) at width 3 from 2 inputs, as the degree sweep's cells,
and at width 8 from 8; without norms only where the inputs and outputs are as wide as the layers
(fewer inputs leave the first layer's factors on an affine subspace, fewer outputs read the last
layer through a few linear combinations). Below the count: degree 2 with biases and no norm at
width 3 (the count is the expected dimension, which Kileel et al. prove reached for high
activation degrees only; Finkel et al. 2024, arXiv 2408.04569, on the degree thresholds), and
ReLU units that few inputs switch on.

The rank is read at rtol = 1e-9 of the largest singular value. A redundant direction's singular
value is float64 rounding (below 1e-15 of the largest in every case here); a poly stack's
genuine ones stay above 1e-5 of it, so the tests assert exact integers. The fractional gate's
weakest genuine directions sit at 1e-9 to 1e-5, and are counted at EXACT_RTOL where deep.
"""

import math

import pytest
import torch
from torch import nn

import blocklab.measures
from blocklab.budget import functional_params
from blocklab.errors import UserError
from blocklab.measures import functional
from blocklab.measures.functional import functional_dimension
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape

EXACT_RTOL = 1e-12  # between rounding (< 1e-15) and the fractional gate's smallest genuine values


def closed_form(d: int, width: int, depth: int, params: int) -> int:
    return params - (d - 1) * width * depth


# (norm, width, n_in, n_out): where the stack sees and shows its whole residual stream
WHERE = [("rms", 3, 2, 1), ("rms", 8, 8, 1), ("none", 3, 3, 3), ("none", 8, 8, 8)]
POLY = [
    (d, where, depth, bias)
    for d in (2, 3, 4)
    for where in WHERE
    for depth in (1, 2, 4)
    for bias in (False, True)
    # depth 4 at width 8 once per degree (it is the slowest); degree 2 with biases and no norm
    # at width 3 falls below the count from depth 3 on (test_degree_two_can_fall_short)
    if not (depth == 4 and where[1] == 8 and (bias or where[0] == "none"))
    if not (d == 2 and bias and where[:2] == ("none", 3) and depth > 2)
]


@pytest.mark.parametrize(("d", "where", "depth", "bias"), POLY)
def test_poly_stack_reaches_the_closed_form(d, where, depth, bias):
    norm, width, n_in, n_out = where
    shape = NetShape(depth, width, bias=bias, norm=norm, scaled_residual=True)
    r = functional_params(parse_arm(str(d)), shape, n_in, n_out)
    assert r.params == d * (width * width + (width if bias else 0)) * depth  # the block count
    assert r.rank == closed_form(d, width, depth, r.params)
    assert r.redundant == (d - 1) * width * depth and not r.saturated


def test_degree_two_can_fall_short():
    # measured: 60 of 63 at depth 3 and 78 of 84 at depth 4 (w fewer per layer past the second),
    # with a clean gap (the kept values above 1e-5, the dropped at rounding), seeds 0 and 1
    for depth in (3, 4):
        shape = NetShape(depth, 3, bias=True, norm="none", scaled_residual=True)
        r = functional_params(parse_arm("2"), shape, 3, 3)
        assert r.rank == closed_form(2, 3, depth, r.params) - 3 * (depth - 2)
        assert r.rank_at(1e-6) == r.rank_at(EXACT_RTOL) == r.rank


def test_degree_sweep_shape_reaches_the_closed_form_deep():
    # the sweep's demo shape (`experiments.degree_sweep.SHAPE`): 2 inputs, width 3, RMS norms
    shape = NetShape(8, 3, norm="rms", scaled_residual=True)
    for d in (2, 3, 4):
        r = functional_params(parse_arm(str(d)), shape, 2, 1)
        assert r.rank == closed_form(d, 3, 8, r.params)


@pytest.mark.parametrize(("width", "n_in", "depths"), [(3, 2, (1, 2, 4)), (8, 8, (1,))])
def test_fractional_degree(width, n_in, depths):
    """d = e: (W_1 x) * ... * (W_n x) * spow(V_2 V_1 x, f) (`blocks.fractional`). Exactly
    redundant: the (n - 1) w rescalings between integer factors and the r^2 of V = V_2 V_1
    (V_2 A, A^-1 V_1 for A in GL(r)); the rescaling of the gate against a factor is redundant
    only where |V x| >> eps (spow is homogeneous up to its smoothing), so some of those keep
    singular values of 1e-9 to 1e-5 of the largest: genuine, but near the default tolerance
    past depth 1 (the count is checked there at EXACT_RTOL)."""
    for depth in depths:
        shape = NetShape(depth, width, norm="rms", scaled_residual=True)
        r = functional_params(parse_arm("e"), shape, n_in, 1)
        block = Net(parse_arm("e"), shape, n_in, 1).layers[0].block
        exact = r.params - ((block.n - 1) * width + block.rank**2) * depth
        assert r.rank_at(EXACT_RTOL) == exact
        if depth == 1:  # deeper, the gate's weakest directions come within 10x of rtol
            assert r.rank == exact


def _active_inputs(net: Net, x: torch.Tensor) -> list[int]:
    """For every ReLU unit of every layer, the inputs of `x` on which it is on."""
    pre = []
    hooks = [
        layer.block.linear.register_forward_hook(lambda m, i, o: pre.append(o))
        for layer in net.layers
    ]
    with torch.no_grad():
        net.double()(x)
    for h in hooks:
        h.remove()
    return [k for z in pre for k in (z > 0).sum(0).tolist()]  # z: (N, w)


def test_mlp_loses_what_its_units_do_not_see():
    """An mlp layer relu(W u + b) is seen only through the inputs that switch each unit on: its
    w + 1 weights and bias get zero gradient on every other input, so a unit on for k inputs
    spans at most min(k, w + 1) dimensions, and a dead one (k = 0) none. At the demo shape,
    depth 4, the rank is exactly P - sum over units of max(0, w + 1 - k): seeds 0-7 measure 40,
    48, 20, 48, 36, 48, 44, 48 of 48 (seed 6: one dead unit, 44). A ReLU network's rank depends
    on its parameters' region, not only on the architecture (Grigsby et al. 2022, arXiv
    2209.04036), and on the inputs read."""
    shape, arm = NetShape(4, 3, norm="rms", scaled_residual=True), parse_arm("mlp")
    ranks = []
    for seed in range(8):
        torch.manual_seed(seed)
        net = Net(arm, shape, 2, 1)
        x = torch.randn(256, 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        r = functional_dimension(net, x, params="budgeted")
        missing = sum(max(0, 4 - k) for k in _active_inputs(net, x))
        assert r.rank == r.params - missing and r.params == 48
        ranks.append(r.rank)
    assert ranks == [40, 48, 20, 48, 36, 48, 44, 48]
    assert functional_params(arm, shape, 2, 1, seed=6).rank == 44  # the same cell


def test_mlp_without_dead_units_is_full_rank():
    r = functional_params(parse_arm("mlp"), NetShape(2, 8, norm="rms", scaled_residual=True), 8)
    assert (r.rank, r.params, r.saturated) == (144, 144, True)


CHAINS = [(5, 3, 4, False), (5, 3, 4, True), (4, 6, 4, False)]


@pytest.mark.parametrize(("n", "k", "m", "bias"), CHAINS)
def test_planted_redundancy_in_a_linear_chain(n, k, m, bias):
    """x -> A (B x + b) + a, B (k, n), A (m, k): the function is the matrix A B, of rank
    r = min(k, n, m), and the vector A b + a. Matrices of rank r in R^(m x n) form a manifold of
    dimension r (m + n - r), so that is the rank, plus m with biases. For k < min(n, m) the
    weights lose k^2 (A G, G^-1 B for G in GL(k)) and the biases k more (b + c, a - A c); for
    k >= min(n, m) A B is any m x n matrix."""
    torch.manual_seed(0)
    chain = nn.Sequential(nn.Linear(n, k, bias=bias), nn.Linear(k, m, bias=bias))
    x = torch.randn(64, n, generator=torch.Generator().manual_seed(1))
    r = functional_dimension(chain, x)
    low = min(k, n, m)
    assert r.params == k * (n + m) + ((k + m) if bias else 0)
    assert r.rank == low * (m + n - low) + (m if bias else 0)
    assert r.rank < r.params and not r.saturated


def test_module_left_as_it_was():
    torch.manual_seed(0)
    net = Net(parse_arm("3"), NetShape(2, 4, norm="rms", scaled_residual=True), 2, 1).train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    x, arm = torch.randn(32, 2), parse_arm("3")
    state = torch.random.get_rng_state()
    functional_dimension(net, x)
    blocklab.measures.make_measure("functional").measure(net, 1, 2)
    assert net.training
    for key, value in net.state_dict().items():
        assert value.dtype == torch.float32 and torch.equal(value, before[key]), key
    functional_params(arm, NetShape(1, 3), 2)  # builds its net in a fork of the global RNG
    assert torch.equal(torch.random.get_rng_state(), state)


def test_python_api():
    x = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    r = blocklab.measures.functional_dimension(nn.Linear(3, 2), x)
    assert isinstance(r, blocklab.measures.FunctionalDimension)
    assert (r.rank, r.params, r.rows, r.saturated) == (8, 8, 20, True)  # W x + b: all 8 count
    s = r.singular_values
    assert (
        len(s) == 8 and list(s) == sorted(s, reverse=True) and all(isinstance(v, float) for v in s)
    )
    few = blocklab.measures.functional_dimension(nn.Linear(3, 2), x[:2])  # 4 rows, 8 parameters
    assert (few.rank, few.saturated) == (4, True)  # ">= 4": the rows cap it


def test_parameters_chosen():
    torch.manual_seed(0)
    net = Net(parse_arm("2"), NetShape(1, 3, norm="rms", scaled_residual=True), 2, 1)
    x = torch.randn(64, 2, generator=torch.Generator().manual_seed(0))
    counts = net.param_counts()
    assert functional_dimension(net, x, params="budgeted").params == counts["blocks"]
    assert functional_dimension(net, x).params == counts["total"]
    net.readout.weight.requires_grad_(False)  # not trainable: not differentiated
    assert functional_dimension(net, x).params == counts["total"] - 3
    with pytest.raises(UserError, match="params must be one of"):
        functional_dimension(net, x, params="all")


def test_rows_folded_by_chunks_match_one_svd(monkeypatch):
    """The streamed QR against one SVD of the whole Jacobian (rows scaled to unit length): both
    are backward stable, so the singular values agree to a few hundred float64 roundings of
    the largest; 1e-12 of it is promised."""
    torch.manual_seed(0)
    net = Net(parse_arm("3"), NetShape(2, 3, norm="rms", scaled_residual=True), 2, 2).double()
    x = torch.randn(50, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(functional, "CHUNK_NUMBERS", 500)  # 50 inputs in chunks of 4
    folded = functional_dimension(net, x)
    theta = {n: p.detach() for n, p in net.named_parameters()}
    jac = torch.func.jacrev(lambda t: torch.func.functional_call(net, t, (x,)).reshape(-1))(theta)
    whole = torch.cat([j.flatten(1) for j in jac.values()], 1)  # (N K, P)
    whole = whole / whole.norm(dim=1, keepdim=True)
    s = torch.linalg.svdvals(whole)
    assert torch.allclose(
        torch.tensor(folded.singular_values, dtype=torch.float64), s, rtol=0, atol=1e-12 * s[0]
    )


def test_measure_result():
    torch.manual_seed(0)
    net = Net(parse_arm("3"), NetShape(2, 3, norm="rms", scaled_residual=True), 2, 1, seq_len=4)
    out = blocklab.measures.parse_measure("functional(params=budgeted)").measure(net, 4, 2, seed=1)
    assert out["value"] == out["rank"] == closed_form(3, 3, 2, out["params"])
    assert out["redundant"] == out["params"] - out["rank"] == 12
    assert math.isclose(out["per_param"], out["rank"] / out["params"])
    gap = out["singular_values"]
    assert gap["smallest_kept"] > 1e-7 and gap["largest_dropped"] < 1e-14
    with pytest.raises(UserError, match="rtol must be"):
        blocklab.measures.make_measure("functional", rtol=0)


@pytest.mark.parametrize(
    ("arm", "params"), [("3", "trainable"), ("2", "budgeted"), ("mlp", "trainable")]
)
def test_the_rows_by_layers_give_the_spectrum_the_per_example_reference_gives(
    arm, params, monkeypatch
):
    """The measure reads the per-example Jacobian the fits read (`blocklab.jacobian`, by layers);
    with the layer rule refused it takes vmap(jacrev), the reference. Each row is one backward
    pass apart in summation order, so the singular values agree to float64 rounding of the
    largest (1e-12 of it holds on any kernel; a wrong row or column block moves them by order
    one), and the rank is the same integer."""
    from blocklab.jacobian import FlatParams, NotByLayers

    torch.manual_seed(0)
    net = Net(parse_arm(arm), NetShape(2, 3, norm="rms", scaled_residual=True), 2, 1)
    x = torch.randn(64, 2, dtype=torch.float64)  # (N, 2)
    by_layers = functional_dimension(net, x, params=params)

    def refuse(self, theta):
        raise NotByLayers

    monkeypatch.setattr(FlatParams, "jacobian_by_layers", refuse)
    reference = functional_dimension(net, x, params=params)
    assert by_layers.rank == reference.rank and by_layers.rows == reference.rows
    top = reference.singular_values[0]
    got, want = torch.tensor(by_layers.singular_values), torch.tensor(reference.singular_values)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12 * top)

"""Measures: the contract (`blocklab.checks.measures`, the battery `blocklab check` runs) over
every registered measure, then known answers for the grid-tensor separation rank and for rank
collapse."""

import copy
import itertools
import math

import numpy as np
import pytest
import torch

from _contract import contract_test
from blocklab.checks import measures as contract
from blocklab.checks.measures import D, T, net
from blocklab.engine import trial
from blocklab.errors import UserError
from blocklab.experiments import _trials
from blocklab.measures import (
    MEASURES,
    composite_norm,
    parse_measure,
    rank_collapse,
    residual,
    separation_rank,
)
from blocklab.measures.seprank import matricize, resolve_partition
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape, TrainConfig

CASES = contract.cases()


# ---- contract battery: every registered measure, every example, every network kind


test_contract = contract_test(contract, CASES)


def test_registry():
    assert {"seprank", "exact_rank", "collapse"} <= set(MEASURES.names())
    with pytest.raises(UserError, match="did you mean 'seprank'"):
        MEASURES.get("sepranc")


def test_parse_measure():
    m = parse_measure("seprank(templates=3, partition=interleaved)")
    assert (m.options.templates, m.options.partition) == (3, "interleaved")
    assert parse_measure("collapse").name == "collapse"
    with pytest.raises(UserError, match="parentheses"):
        parse_measure("seprank(templates=3")
    with pytest.raises(UserError, match="did you mean"):
        parse_measure("colapse")


def test_trial_records_measures_at_init_and_after_training():
    s = _trials.spec(
        "qsa",
        {"seq_len": 4, "q": 2, "n_train": 64, "n_test": 32},
        parse_arm("softmax_attention"),
        NetShape(depth=2, width=8, residual=False),
        TrainConfig(steps=5, eval_points=1),
        seed=0,
        measures=("collapse", "seprank(templates=2)"),
    )
    record = trial.run_trial(s)
    assert record["status"] == "done", record.get("error")
    measured = record["metrics"]["measures"]
    assert set(measured) == {"collapse", "seprank(templates=2)"}
    for stages in measured.values():
        assert set(stages) == {"init", "trained"}
    # five steps move the weights, so the trained curve is measured on a different network
    assert measured["collapse"]["init"] != measured["collapse"]["trained"]
    # a spec without measures has no such key, so stored ids of earlier runs stay valid
    assert (
        "measures"
        not in _trials.spec(
            "qsa", {"seq_len": 4, "q": 2}, parse_arm("mixer"), NetShape(), TrainConfig(), 0
        ).config()
    )


# ---- separation rank: known answers


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_product_of_position_functions_has_rank_one():
    u, v = randn(3, seed=1), randn(3, seed=2)

    def f(x):  # f(x0) g(x1), each nonlinear in its vector
        return torch.tanh(x[:, 0] @ u) * torch.cos(x[:, 1] @ v + x[:, 1, 0] ** 2)

    r = separation_rank(f, 2, 3, templates=12)
    assert (r.rank, r.saturated, r.shape) == (1, False, (12, 12))


@pytest.mark.parametrize("n_terms", [1, 3, 7])
def test_sum_of_separable_terms_has_that_rank(n_terms):
    """sum_r a_r(x0, x1) b_r(x2, x3) with random smooth a_r, b_r: rank R under the half split."""
    u, v = randn(n_terms, 2, 2, seed=3), randn(n_terms, 2, 2, seed=4)

    def f(x):  # x: (B, 4, 2)
        a = torch.tanh(torch.einsum("bnd,rnd->br", x[:, :2], u))  # (B, R)
        b = torch.sin(torch.einsum("bnd,rnd->br", x[:, 2:], v) + 0.3)  # (B, R)
        return (a * b).sum(-1)

    r = separation_rank(f, 4, 2, "half", templates=4)
    assert r.shape == (16, 16)
    assert r.rank == n_terms and not r.saturated


@pytest.mark.parametrize("n", [1, 4, 6])
def test_inner_product_has_rank_n(n):
    r = separation_rank(lambda x: (x[:, 0] * x[:, 1]).sum(-1), 2, n, templates=n + 3)
    assert r.rank == n and not r.saturated
    # the spectrum shows the gap: n clear values, then rounding noise
    assert r.singular_values[n - 1] > 1e6 * max(r.singular_values[n], 1e-300)


def test_a_rank_beyond_the_grid_is_flagged_saturated():
    r = separation_rank(lambda x: (x[:, 0] * x[:, 1]).sum(-1), 2, 6, templates=4)
    assert r.rank == 4 and r.saturated  # the true rank 6 exceeds the 4 x 4 grid matrix
    r = separation_rank(lambda x: torch.exp((x[:, 0] * x[:, 1]).sum(-1) / 3), 2, 2, templates=5)
    assert r.rank == 5 and r.saturated  # exp(<x, y>) has infinite separation rank


def test_zero_function_has_rank_zero():
    r = separation_rank(lambda x: x.sum((1, 2)) * 0.0, 2, 2, templates=3)
    assert (r.rank, r.saturated, r.log3_rank) == (0, False, -math.inf)


@pytest.mark.parametrize("degree", [1, 2, 5])
def test_bivariate_polynomial_rank_is_degree_plus_one(degree):
    """(x + y + 1)^D = sum_k C(D, k) x^k (y + 1)^(D - k): D + 1 independent terms."""
    r = separation_rank(lambda x: (x[:, 0, 0] + x[:, 1, 0] + 1) ** degree, 2, 1, templates=9)
    assert r.rank == degree + 1


def test_partition_decides_what_is_separated():
    def f(x):  # <x0, x2>: splits positions 0 and 2 under "half", keeps them together otherwise
        return (x[:, 0] * x[:, 2]).sum(-1)

    assert separation_rank(f, 4, 3, "half", templates=5).rank == 3
    assert separation_rank(f, 4, 3, "interleaved", templates=5).rank == 1
    assert separation_rank(f, 4, 3, [0, 2], templates=5).rank == 1
    assert separation_rank(f, 4, 3, ([1, 3], [0, 2]), templates=5).rank == 1


def test_vector_functions_take_coordinates_as_variables():
    def f(x):  # x: (B, 4) coordinates
        return (x[:, 0] + x[:, 2]) ** 2

    assert separation_rank(f, 4, 1, "interleaved", templates=4, vector=True).rank == 1
    # x0^2 + 2 x0 x2 + x2^2 across the cut: three terms
    assert separation_rank(f, 4, 1, "half", templates=4, vector=True).rank == 3


def test_named_partitions():
    assert resolve_partition("half", 5, 0) == ((0, 1), (2, 3, 4))
    assert resolve_partition("interleaved", 5, 0) == ((0, 2, 4), (1, 3))
    a, b = resolve_partition("random:7", 6, 0)
    assert len(a) == 3 and sorted(a + b) == list(range(6))
    assert resolve_partition("random:7", 6, 0) == (a, b)
    assert resolve_partition("random", 6, 7) == (a, b)  # "random" draws from the call's seed
    for bad in ("halves", "half:3", [0, 9], [], [0, 1, 2, 3], ([0], [0, 1, 2, 3])):
        with pytest.raises(UserError):
            resolve_partition(bad, 4, 0)


def test_matricization_follows_seed_000_indexing():
    """row = sum_t j_{a_t} M^(|A| - t), col likewise (seed 000 section 5.1.3, 0-based)."""
    m, a, b = 3, (1, 3), (0, 2)
    tensor = randn(m, m, m, m)
    mat = matricize(tensor, a, b)
    for j in itertools.product(range(m), repeat=4):
        row = j[a[0]] * m + j[a[1]]
        col = j[b[0]] * m + j[b[1]]
        assert mat[row, col] == tensor[j]


def test_templates_are_drawn_per_position_and_can_be_given():
    def f(x):
        return (x[:, 0] * x[:, 1]).sum(-1)

    drawn = separation_rank(f, 2, 2, templates=5, seed=4)
    again = separation_rank(f, 2, 2, templates=5, seed=4)
    assert np.array_equal(drawn.singular_values, again.singular_values)
    given = randn(2, 5, 2, seed=9)
    mine = separation_rank(f, 2, 2, templates=given)
    assert mine.n_templates == 5 and mine.rank == 2
    # an (M, D) set is shared by all positions
    assert separation_rank(f, 2, 2, templates=given[0]).rank == 2
    with pytest.raises(UserError, match="templates must have shape"):
        separation_rank(f, 2, 2, templates=randn(3, 5, 2))


def test_chunking_does_not_change_the_result():
    model = net("linearized", depth=2)
    whole = separation_rank(model, T, D, templates=3)
    pieces = separation_rank(model, T, D, templates=3, chunk=7)
    # batches of another size may round each entry's sums differently (a few ulps): an SVD moves
    # every singular value by at most that much of the largest, so the small ones compare on it
    top = float(whole.singular_values.max())
    assert np.allclose(whole.singular_values, pieces.singular_values, rtol=1e-12, atol=1e-12 * top)


def test_a_module_is_read_in_float64_at_the_chosen_output():
    model = net("linearized", depth=1)
    copy64 = copy.deepcopy(model).double()
    r = separation_rank(model, T, D, templates=3, position=1, entry=1)
    ref = separation_rank(lambda x: copy64(x)[:, 1, 1], T, D, templates=3)
    # the same float64 network on the same grid in the same chunks: bit for bit in principle
    assert np.allclose(r.singular_values, ref.singular_values, rtol=1e-12, atol=1e-300)
    assert next(model.parameters()).dtype == torch.float32
    with pytest.raises(UserError, match="outside the output"):
        separation_rank(model, T, D, templates=2, entry=5)


@pytest.mark.parametrize("dx, heads", [(6, 2), (8, 3)])
def test_one_linearized_attention_layer_is_within_theorem_1(dx, heads):
    """One layer of seed 001 eq. 3, read at a position i in A: y = sum_j (x_i^T Q x_j) (c^T x_j)
    with Q = sum_h Wq_h^T Wk_h of rank a = min(dx, heads * head_dim). The j in A terms make one
    function of A; the j in B terms are sum_k (x_i)_k F_k(x_B) over a basis of Q's row space:
    sep = a + 1 generically, inside Theorem 1's log3 sep <= log3(dx + H). A per-position
    embedding does not change separation ranks."""
    from blocklab.theory import sep_rank_bounds

    torch.manual_seed(0)
    arm = parse_arm(f"linearized_attention(heads={heads})")
    model = Net(arm, NetShape(1, dx, norm="none", residual=False), dx, 1, seq_len=4)
    r = separation_rank(model, 4, dx, templates=6, position=0)
    attention_dim = heads * (dx // heads)
    assert r.rank == min(dx, attention_dim) + 1 and not r.saturated
    assert math.log(r.rank, 3) <= sep_rank_bounds(1, dx, heads)[1]


def test_rank_at_and_epsilon_rank_read_the_spectrum():
    def f(x):  # three separable terms with weights 1, 1e-3, 1e-6
        w = torch.tensor([1.0, 1e-3, 1e-6], dtype=torch.float64)
        return (w * x[:, 0] * x[:, 1]).sum(-1)

    r = separation_rank(f, 2, 3, templates=8)
    assert r.rank == 3 and r.rank_at(1e-5) == 2 and r.rank_at(1e-2) == 1
    # epsilon-rank against the truncated SVD's mean squared error, computed directly
    a = torch.randn(8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    matrix = a @ torch.diag(torch.logspace(0, -4, 8, dtype=torch.float64)) @ a.T
    u, s, vh = torch.linalg.svd(matrix)
    for eps in (1e-12, 1e-6, 1e-3, 1e-1, 10.0):
        want = min(
            k
            for k in range(9)
            if ((matrix - u[:, :k] @ torch.diag(s[:k]) @ vh[:k]) ** 2).mean() <= eps
        )
        t = randn(2, 8, 1, seed=1)
        grid = separation_rank(
            lambda x, m=matrix, t=t: m[
                (x[:, 0, 0, None] == t[0, :, 0]).int().argmax(-1),
                (x[:, 1, 0, None] == t[1, :, 0]).int().argmax(-1),
            ],
            2,
            1,
            templates=t,
        )
        assert grid.epsilon_rank(eps) == want


def test_bad_input_is_a_user_error():
    def f(x):
        return x.sum((1, 2))

    with pytest.raises(UserError, match="max_points"):
        separation_rank(f, 20, 1, templates=4)
    with pytest.raises(UserError, match="n_positions"):
        separation_rank(f, 1, 1)
    with pytest.raises(UserError, match="templates"):
        separation_rank(f, 2, 1, templates=0)
    with pytest.raises(UserError, match="cannot pick a scalar"):
        separation_rank(lambda x: x[..., None], 2, 2, templates=2)
    with pytest.raises(UserError, match="batch of outputs"):
        separation_rank(lambda x: x.sum(), 2, 2, templates=2)
    with pytest.raises(UserError, match="non-finite"):
        separation_rank(lambda x: x.sum((1, 2)) / 0.0, 2, 1, templates=2)


# ---- rank collapse: known answers


def test_identical_tokens_have_zero_residual():
    x = randn(5, 3).expand(2, 4, 5, 3)[:, :, 0]  # (2, 4, 3): every token the same vector
    assert residual(x).abs().max() == 0
    assert torch.all(composite_norm(residual(x)) == 0)


def test_composite_norm_by_hand():
    x = torch.tensor([[1.0, -2.0], [3.0, 4.0]])  # column sums 4, 6; row sums 3, 7
    assert composite_norm(x).item() == pytest.approx(math.sqrt(6 * 7))


def test_the_mean_is_the_frobenius_optimal_shift():
    x = randn(6, 4)
    best = torch.linalg.matrix_norm(residual(x))
    for seed in range(5):
        shift = x.mean(0) + 0.1 * randn(4, seed=seed)
        assert torch.linalg.matrix_norm(x - shift) > best


def collapse_net(residual_on: bool, depth: int = 5) -> Net:
    torch.manual_seed(0)
    arm = parse_arm("softmax_attention")
    return Net(arm, NetShape(depth, 16, norm="none", residual=residual_on), 16, 1, seq_len=12)


def test_pure_attention_collapses_and_skip_connections_prevent_it():
    x = randn(32, 12, 16).float()
    pure = rank_collapse(collapse_net(False), x).median()
    skip = rank_collapse(collapse_net(True), x).median()
    assert pure[0] == skip[0] == 1
    # falls layer by layer, down to identical float32 tokens
    assert all(np.diff(pure) <= 0) and pure[2] < 1e-2 and pure[-1] < 1e-6
    assert all(r > 0.5 for r in skip)  # the identity path keeps the residual


def test_seed_003_bound_is_above_the_measured_ratio():
    result = rank_collapse(collapse_net(False, depth=3), randn(16, 12, 16).float())
    assert result.bound_log is not None and result.bound_log.shape == (3, 16)
    measured = np.log(np.maximum(result.ratios["composite"][1:], 1e-300))  # (L, B)
    assert np.all(measured <= result.bound_log + 1e-9)
    # with skip connections the theorem says nothing, and no bound is reported
    assert rank_collapse(collapse_net(True, depth=3), randn(4, 12, 16).float()).bound_log is None


def test_collapse_input_errors():
    with pytest.raises(UserError, match="identical tokens"):
        rank_collapse(collapse_net(False, 1), torch.ones(2, 12, 16))
    with pytest.raises(UserError, match="layer by layer"):
        rank_collapse(torch.nn.Linear(3, 3), torch.randn(2, 4, 3))
    vector = Net(parse_arm("3"), NetShape(1, 4, norm="layer"), 6, 1)
    with pytest.raises(UserError, match="sequence network"):
        rank_collapse(vector, torch.randn(2, 3, 2))
    layers = [torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)]  # a plain list of layers works
    assert rank_collapse(layers, randn(2, 4, 3).float()).ratios["composite"].shape == (3, 2)


def test_wide_inputs_are_evaluated_fewer_points_at_a_time(monkeypatch):
    from blocklab.measures import seprank

    templates = torch.randn(
        2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    seen = []

    def fn(x):  # (b, N, D) -> (b,)
        seen.append(x.shape[0])
        return x[:, 0, :].sum(-1) * x[:, 1, :].prod(-1)

    whole = seprank.grid_tensor(fn, templates)
    assert seen == [25]
    monkeypatch.setattr(seprank, "CHUNK_NUMBERS", 2 * 8 * 4)  # room for 4 points of (N, D) inputs
    seen.clear()
    assert torch.equal(seprank.grid_tensor(fn, templates), whole)
    assert max(seen) == 4 and sum(seen) == 25

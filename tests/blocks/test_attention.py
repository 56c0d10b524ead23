"""Sequence blocks against references (forward and backward, float64), degrees, counts, errors."""

import math

import pytest
import torch
import torch.nn.functional as F

from blocklab.blocks import BLOCKS, make_block
from blocklab.blocks._attention import merge_heads
from blocklab.blocks.linear_attention import (
    feature_map,
    linear_attention,
    linear_attention_recurrent,
)
from blocklab.errors import UserError

B, T, D_IN, D_OUT = 2, 5, 6, 4
TOL = 1e-10


def build(name, seed=0, d_in=D_IN, d_out=D_OUT, **kw):
    torch.manual_seed(seed)
    return make_block(name, d_in, d_out, **kw).double()


def inputs(seed=0, scale=1.0, t=T, d_in=D_IN):
    gen = torch.Generator().manual_seed(100 + seed)
    return scale * torch.randn(B, t, d_in, generator=gen, dtype=torch.float64)


def with_grads(fn, module, x):
    """fn(x), and the gradients of a random projection of it w.r.t. x and module's weights."""
    x = x.clone().requires_grad_(True)
    y = fn(x)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(9), dtype=y.dtype)
    grads = torch.autograd.grad((y * w).sum(), [x, *module.parameters()])
    return y.detach(), grads


def assert_same(block, ref, x, ref_module=None):
    """block(x) == ref(x) with equal gradients; ref uses block's weights unless ref_module."""
    y, grads = with_grads(block, block, x)
    y_ref, grads_ref = with_grads(ref, block if ref_module is None else ref_module, x)
    assert torch.allclose(y, y_ref, rtol=TOL, atol=TOL)
    names = ["x", *(n for n, _ in block.named_parameters())]
    for name, g, g_ref in zip(names, grads, grads_ref, strict=True):
        assert torch.allclose(g, g_ref, rtol=TOL, atol=TOL), name


def rel_err(a, b) -> float:
    return ((a - b).norm() / b.norm()).item()


def log_ratio_degree(block, x, c=2.0) -> float:
    with torch.no_grad():
        return math.log(block(c * x).norm().item() / block(x).norm().item()) / math.log(c)


def randomize_biases(block):
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name.endswith("bias"):
                p.normal_()  # zero-initialized biases would hide the lower-degree terms


HEADS_CAUSAL = pytest.mark.parametrize(
    "heads,causal", [(1, False), (1, True), (2, False), (2, True)]
)


# --- references -------------------------------------------------------------------------------


@HEADS_CAUSAL
@pytest.mark.parametrize("bias", [False, True])
def test_softmax_attention_matches_torch_sdpa(heads, causal, bias):
    block = build("softmax_attention", heads=heads, causal=causal, bias=bias)
    randomize_biases(block)

    def ref(x):
        q, k, v = block.project(x)
        return block.output(F.scaled_dot_product_attention(q, k, v, is_causal=causal))

    assert_same(block, ref, inputs())


@HEADS_CAUSAL
def test_tensor_attention_is_attention_over_pair_tokens(heads, causal):
    block = build("tensor_attention", heads=heads, causal=causal)

    def ref(x):
        q, k, k2, v, v2 = block.project(x)  # (B, H, T, Dh)
        keys = (k[..., :, None, :] * k2[..., None, :, :]).flatten(-3, -2)  # (B, H, T*T, Dh)
        values = (v[..., :, None, :] * v2[..., None, :, :]).flatten(-3, -2)
        mask = None
        if causal:
            seen = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
            mask = (seen[:, :, None] & seen[:, None, :]).flatten(-2)  # (T, T*T): j, l <= i
        return block.output(F.scaled_dot_product_attention(q, keys, values, attn_mask=mask))

    assert_same(block, ref, inputs())


@pytest.mark.parametrize("t", [3, 8, 19, 40])
@HEADS_CAUSAL
def test_tensor_attention_fast_path_matches_its_reference(heads, causal, t):
    """The batched, query-chunked forward against the one-einsum formula, at lengths inside one
    chunk, at its edge and over several uneven chunks."""
    block = build("tensor_attention", heads=heads, causal=causal)
    assert_same(block, block.forward_reference, inputs(t=t))


@pytest.mark.parametrize("heads", [1, 2])
def test_linear_attention_causal_matches_recurrence(heads):
    block = build("linear_attention", heads=heads, causal=True)

    def ref(x):
        return block.output(linear_attention_recurrent(*block.project(x)))

    assert_same(block, ref, inputs())


@pytest.mark.parametrize("heads", [1, 2])
def test_linear_attention_matches_explicit_form(heads):
    block = build("linear_attention", heads=heads)

    def ref(x):
        q, k, v = block.project(x)
        w = feature_map(q) @ feature_map(k).transpose(-1, -2)  # (B, H, T, T)
        return block.output((w / w.sum(-1, keepdim=True)) @ v)

    assert_same(block, ref, inputs())


def test_linear_attention_recurrence_last_step_is_full_attention():
    q, k, v = (torch.randn(B, 2, T, 3, dtype=torch.float64) for _ in range(3))
    full = linear_attention(q, k, v, causal=False)[..., -1, :]
    assert torch.allclose(linear_attention_recurrent(q, k, v)[..., -1, :], full, rtol=TOL)


@HEADS_CAUSAL
def test_linearized_attention_is_seed_001_eq_3(heads, causal):
    block = build("linearized_attention", heads=heads, causal=causal)
    x = inputs()
    dh = block.head_dim
    wq, wk, wv, wo = (block.q.weight, block.k.weight, block.v.weight, block.o.weight)
    with torch.no_grad():
        y = torch.zeros(B, T, D_OUT, dtype=torch.float64)
        for i in range(T):
            attended = range(i + 1) if causal else range(T)
            c_i = 1.0 / (math.sqrt(dh) * len(attended))
            for j in attended:
                for h in range(heads):
                    rows = slice(h * dh, (h + 1) * dh)
                    score = ((x[:, i] @ wq[rows].T) * (x[:, j] @ wk[rows].T)).sum(-1)  # (B,)
                    y[:, i] += c_i * score[:, None] * (x[:, j] @ wv[rows].T @ wo[:, rows].T)
        assert torch.allclose(block(x), y, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("causal", [False, True])
def test_poly_attention_n1_is_linearized_attention(causal):
    lin = build("linearized_attention", heads=2, causal=causal, bias=True)
    randomize_biases(lin)
    poly = build("poly_attention", seed=1, n=1, heads=2, causal=causal, bias=True)
    poly.load_state_dict(lin.state_dict())
    assert_same(lin, poly, inputs(), ref_module=poly)


def test_heads_split_and_merge_are_inverse():
    block = build("softmax_attention", heads=2, head_dim=3)
    x = inputs()
    (q,) = block.project(x)[:1]
    assert q.shape == (B, 2, T, 3)
    assert torch.equal(merge_heads(q), block.q(x))


# --- degrees ----------------------------------------------------------------------------------

HOMOGENEOUS = [
    ("linearized_attention", {"heads": 2}, 3),
    ("linearized_attention", {"causal": True}, 3),
    ("poly_attention", {"n": 2}, 5),
    ("poly_attention", {"n": 3, "heads": 2, "causal": True}, 7),
    ("quadratic_mixing", {}, 2),
    ("quadratic_mixing", {"causal": True}, 2),
    ("mixer", {"seq_len": T}, 1),
]


@pytest.mark.parametrize("name,kw,k", HOMOGENEOUS, ids=[f"{n}-{k}" for n, _, k in HOMOGENEOUS])
def test_homogeneous_without_bias(name, kw, k):
    block = build(name, **kw)
    x = inputs()
    assert block.degree == k and block.homogeneous_degree == k
    assert log_ratio_degree(block, x) == pytest.approx(k, abs=1e-8)
    with torch.no_grad():
        assert rel_err(block(2 * x), 2.0**k * block(x)) < TOL


@pytest.mark.parametrize("name,kw,k", HOMOGENEOUS, ids=[f"{n}-{k}" for n, _, k in HOMOGENEOUS])
def test_not_homogeneous_with_bias(name, kw, k):
    block = build(name, bias=True, **kw)
    randomize_biases(block)
    x = inputs()
    assert block.degree == k and block.homogeneous_degree is None
    with torch.no_grad():
        assert rel_err(block(2 * x), 2.0**k * block(x)) > 1e-3


@pytest.mark.parametrize("name", ["softmax_attention", "linear_attention", "tensor_attention"])
def test_non_polynomial_attention_states_no_degree(name):
    block = build(name)
    assert block.degree is None and block.homogeneous_degree is None


# --- counts -----------------------------------------------------------------------------------


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("width,heads", [(8, 1), (8, 2), (12, 4)])
def test_attention_counts_match_transformer_convention(width, heads):
    soft = make_block("softmax_attention", width, width, heads=heads)
    tensor = make_block("tensor_attention", width, width, heads=heads)
    count = BLOCKS.get("softmax_attention").count_params(width, width, heads=heads)
    assert n_params(soft) == count == 4 * width**2  # the transformer's 12 L D^2 relies on it
    count = BLOCKS.get("tensor_attention").count_params(width, width, heads=heads)
    assert n_params(tensor) == count == 6 * width**2


def test_counts_with_bias_and_explicit_head_dim():
    a = 2 * 3  # heads * head_dim
    kw = {"heads": 2, "head_dim": 3, "bias": True}
    # softmax has no key bias: it adds the same score to every key of a query, which cancels
    cases = [("softmax_attention", 3, 2), ("tensor_attention", 5, 5), ("poly_attention", 3, 3)]
    for name, n_proj, n_biased in cases:
        expected = n_proj * D_IN * a + n_biased * a + a * D_OUT + D_OUT
        assert n_params(make_block(name, D_IN, D_OUT, **kw)) == expected
        assert BLOCKS.get(name).count_params(D_IN, D_OUT, **kw) == expected
    mixer = make_block("mixer", D_IN, D_OUT, seq_len=T, bias=True)
    assert n_params(mixer) == T * T + T + D_IN * D_OUT + D_OUT


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,kw",
    [
        ("softmax_attention", {"heads": 0}),
        ("linearized_attention", {"heads": -1}),
        ("tensor_attention", {"head_dim": 0}),
        ("linear_attention", {"heads": 1.5}),
        ("softmax_attention", {"causal": "yes"}),
        ("poly_attention", {"n": 0}),
        ("poly_attention", {"n": 1.5}),
        ("mixer", {"seq_len": 0}),
        ("quadratic_mixing", {"bias": 1}),
    ],
)
def test_bad_arguments_raise_user_error(name, kw):
    with pytest.raises(UserError):
        make_block(name, D_IN, D_OUT, **kw)


def test_mixer_rejects_wrong_sequence_length():
    block = make_block("mixer", D_IN, D_OUT, seq_len=T)
    with pytest.raises(UserError, match="seq_len=5"):
        block(torch.randn(B, T + 1, D_IN))

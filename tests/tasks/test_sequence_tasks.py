"""Task-specific checks of the sequence tasks: qsa, match2, match3 (seed 002) and needle (seed 004).

Each label is recomputed here by a direct loop over the definition, independent of the vectorized
code in the tasks."""

import pytest
import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, make_task
from blocklab.tasks._match import auto_modulus, match_labels, positive_rates
from blocklab.tasks.base import IGNORE
from blocklab.tasks.needle import Needle


def small(name: str, **overrides):
    cls = TASKS.get(name)
    return cls(**{**cls.small_options, **overrides})


# qsa


def test_qsa_targets_match_a_direct_loop():
    d = small("qsa", seq_len=7, q=3, dim=2).make(0)
    N, q, dim = 7, 3, 2
    x, y = d.train.x, d.train.y  # (n, N, 2N + d), (n, N, d)
    assert x.shape[-1] == 2 * N + dim and y.shape[1:] == (N, dim)
    for b in range(5):
        for i in range(N):
            subset = x[b, i, :N].nonzero().squeeze(1).tolist()
            assert len(subset) == q and x[b, i, :N].sum() == q
            assert torch.equal(x[b, i, N + dim :], torch.eye(N)[i])  # one-hot position
            target = sum(x[b, j, N : N + dim] for j in subset) / q
            torch.testing.assert_close(y[b, i], target)


def test_qsa_subsets_and_sphere():
    d = small("qsa").make(1)
    N, q, dim = 16, 4, 4
    x = d.test.x  # (n, N, 2N + d)
    assert ((x[..., :N] == 0) | (x[..., :N] == 1)).all()
    assert (x[..., :N].sum(-1) == q).all()  # every subset has size q
    torch.testing.assert_close(x[..., N : N + dim].norm(dim=-1), torch.ones(x.shape[:2]))
    assert not x[..., :N].sum(0).eq(0).any()  # every (position, member) pair occurs


def test_qsa_tolerance_and_threshold():
    task = small("qsa", q=5, dim=3)
    d = task.make(0)
    assert d.tolerance == task.tolerance == pytest.approx(1 / 10)
    assert task.threshold == pytest.approx(0.1**2 / 3)
    assert d.info["tolerance"] == d.tolerance and d.info["q"] == 5
    assert TASKS.get("qsa").default_threshold == pytest.approx(make_task("qsa").threshold)


# match2 / match3


def brute_match(tokens: torch.Tensor, M: int, order: int) -> torch.Tensor:
    n, N = tokens.shape
    out = torch.zeros(n, N, dtype=torch.long)
    for b, row in enumerate(tokens.tolist()):
        for i in range(N):
            if order == 2:
                hit = any((row[i] + row[j]) % M == 0 for j in range(N))
            else:
                hit = any((row[i] + row[a] + row[c]) % M == 0 for a in range(N) for c in range(N))
            out[b, i] = int(hit)
    return out


@pytest.mark.parametrize("stop", [True, False])
@pytest.mark.parametrize("name, order", [("match2", 2), ("match3", 3)])
def test_match_labels_match_brute_force(name, order, stop):
    d = small(name, stop=stop).make(0)
    M, N = d.info["modulus"], 6
    x = torch.cat([d.train.x, d.val.x])[:300]  # (300, N [+ 1], M [+ 1]) one-hot
    assert x.shape[1:] == (N + stop, M + stop) and d.seq_len == N + stop
    assert ((x == 0) | (x == 1)).all() and (x.sum(-1) == 1).all()
    y = torch.cat([d.train.y, d.val.y])[:300]  # (300, N [+ 1])
    assert torch.equal(y[:, :N], brute_match(x[:, :N].argmax(-1), M, order))
    if stop:  # STOP, symbol M, ends every sequence and carries no label; no residue is M
        assert (x[:, N, M] == 1).all() and (x[:, :N, M] == 0).all()
        assert (y[:, N] == IGNORE).all()


@pytest.mark.parametrize("order", [2, 3])
def test_match_exact_rate_matches_enumeration(order):
    for N in range(1, 5):
        moduli = torch.arange(2, 9 if N < 4 else 7)
        rates = positive_rates(order, N, moduli)
        for M, rate in zip(moduli.tolist(), rates.tolist(), strict=True):
            tokens = torch.cartesian_prod(*[torch.arange(M)] * N).reshape(-1, N)  # all M^N
            assert rate == pytest.approx(match_labels(tokens, M, order).double().mean().item())


def test_match_auto_modulus_at_n6():
    m2, rate2 = auto_modulus(2, 6)
    m3, rate3 = auto_modulus(3, 6)
    print(f"Match2 N=6: M={m2} rate={rate2:.4f}; Match3 N=6: M={m3} rate={rate3:.4f}")
    assert m2 == 9 and rate2 == pytest.approx(0.5067, abs=1e-4)
    # the DESIGN's "M = 30" for Match3: the exact rates are 0.534 at M = 30 and 0.505 at M = 31
    assert m3 == 31 and rate3 == pytest.approx(0.5046, abs=1e-4)
    assert positive_rates(3, 6, torch.tensor([30]))[0] == pytest.approx(0.5337, abs=1e-4)
    for name, M in (("match2", 9), ("match3", 31)):
        d = small(name).make(0)
        assert d.info["modulus"] == M and d.info["modulus_chosen"] == "auto"
        assert d.input_shape == (7, M + 1)  # the STOP token is on by default
        assert 0.45 <= d.info["balance"] <= 0.55
        labels = d.train.y[:, :6]  # the residues' labels, STOP's left out
        assert d.info["balance"] == pytest.approx(labels.double().mean().item())


def test_match_auto_modulus_is_closest_to_half():
    for order in (2, 3):
        for N in (3, 5, 8):
            M, rate = auto_modulus(order, N)
            others = positive_rates(order, N, torch.arange(2, 4 * M))
            assert abs(rate - 0.5) <= (others - 0.5).abs().min() + 1e-12


def test_match_given_modulus_used():
    d = small("match2", modulus=12, stop=False).make(0)
    assert d.info["modulus"] == 12 and d.info["modulus_chosen"] == "given"
    assert d.input_shape == (6, 12)
    assert int(d.train.x.argmax(-1).max()) <= 11
    assert torch.equal(d.train.y, brute_match(d.train.x.argmax(-1), 12, 2))
    assert d.oracle(d.test.x).argmax(-1).eq(d.test.y).all()


def test_match_needs_enough_distinct_sequences():
    with pytest.raises(UserError, match="distinct sequences"):
        small("match2", seq_len=2, modulus=3).make(0)


# needle


def test_needle_scores():
    task = small("needle")
    d = task.make(0)
    w = torch.tensor(d.info["direction"], dtype=torch.float64)
    tau0, tau1 = d.info["tau0"], d.info["tau1"]
    for s in (d.train, d.val, d.test):
        scores = s.x.double() @ w  # (n, T)
        large = (scores > tau0 + 1e-4).sum(-1)  # (n,)
        assert torch.equal(large, s.y)  # exactly one large score in D1, none in D0
        assert (scores.amax(-1)[s.y == 1] - tau1).abs().max() < 1e-4
        assert scores.abs()[scores <= tau0 + 1e-4].max() <= tau0 + 1e-4


def test_needle_direction_and_balance():
    task = small("needle", dim=5)
    d = task.make(3)
    w = task.direction(3)
    assert w.dtype == torch.float64 and w.shape == (5,)
    assert torch.equal(w, torch.tensor(d.info["direction"], dtype=torch.float64))
    assert w.norm().item() == pytest.approx(1.0)
    assert d.info["balance"] == 0.5
    for s in (d.train, d.val, d.test):
        assert int(s.y.sum()) == len(s) // 2
    assert not torch.equal(w, task.direction(4))


def test_needle_sample_fresh_sets():
    task = small("needle")
    w = task.direction(0)
    x, y = task.sample(100, w, torch.Generator().manual_seed(7))
    x2, y2 = task.sample(100, w, torch.Generator().manual_seed(7))
    assert x.shape == (100, 16, 8) and y.shape == (100,) and int(y.sum()) == 50
    assert torch.equal(x, x2) and torch.equal(y, y2)
    logits = task.make(0).oracle(x)  # (100, 2)
    assert torch.equal(logits.argmax(-1), y)


def test_needle_orthogonal_scale():
    w = Needle(dim=8).direction(0)
    x, _ = small("needle", sigma=2.0).sample(2000, w, torch.Generator().manual_seed(0))
    rest = x.double() - (x.double() @ w)[..., None] * w  # (n, T, D)
    # sigma^2 per direction in the D - 1 dimensional complement of w
    assert rest.square().sum(-1).mean().item() == pytest.approx(4.0 * 7, rel=0.03)


# options


@pytest.mark.parametrize(
    "name, opts",
    [
        ("qsa", {"q": 16}),
        ("qsa", {"q": 20}),
        ("qsa", {"q": 0}),
        ("qsa", {"seq_len": 0}),
        ("qsa", {"dim": 0}),
        ("match2", {"modulus": 1}),
        ("match2", {"seq_len": 0}),
        ("match3", {"modulus": 1}),
        ("match3", {"n_test": 0}),
        ("needle", {"tau1": 1.0}),
        ("needle", {"tau0": 2.0, "tau1": 1.5}),
        ("needle", {"seq_len": 0}),
        ("needle", {"sigma": -1.0}),
    ],
)
def test_bad_options(name, opts):
    with pytest.raises(UserError):
        make_task(name, **opts)

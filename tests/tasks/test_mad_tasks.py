"""The synthetic token tasks (mad-lab's suite and zoology's MQAR): labels recomputed here from the
inputs by plain loops, the options each task refuses, and its oracle at the default options."""

import pytest
import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, make_task
from blocklab.tasks.base import IGNORE, score

NAMES = ["icr", "noisy_icr", "fuzzy_icr", "selective_copy", "compression", "memorization", "mqar"]
SMALL = {"n_train": 256, "n_val": 64, "n_test": 128}


def small(name, seed=0, **opts):
    return make_task(name, **{**SMALL, **opts}).make(seed)


def rows(split, count=64):
    return split.x[:count].tolist(), split.y[:count].tolist()


@pytest.mark.parametrize("name", ["icr", "noisy_icr"])
def test_icr_labels_repeated_keys(name):
    task = make_task(name, **SMALL)
    d = task.make(0)
    n_keys, m = task.ids()
    for x, y in zip(*rows(d.test), strict=True):
        bound = {}
        for i in range(0, len(x), 2):
            k, v = x[i], x[i + 1]
            assert y[i + 1] == IGNORE
            if k >= n_keys:  # a value at a key slot: impossible; noise fills whole slots
                assert k >= m and v >= m and y[i] == IGNORE
                continue
            assert y[i] == bound.get(k, IGNORE)
            assert bound.setdefault(k, v) == v  # one value per key within a sequence


def test_noisy_icr_noise_share():
    task = make_task("noisy_icr")
    o = task.options
    d = task.make(0)
    _, m = task.ids()
    slots = d.train.x[:, 0::2] >= m  # (n, P) key slots holding noise
    assert abs(slots.double().mean().item() - o.frac_noise) < 0.01
    assert torch.equal(slots, d.train.x[:, 1::2] >= m)  # noise takes whole pairs
    assert (d.train.y[d.train.x >= m] == IGNORE).all()
    assert small("icr").info["noise_share"] == 0


def runs(x, n_keys, pad):
    """(key, value) tuples of a fuzzy sequence, PAD skipped, with each token's position."""
    pairs, cur, kind = [], None, None
    for i, t in enumerate(x):
        if t == pad:
            continue
        now = "key" if t < n_keys else "value"
        if now == "key" and kind != "key":
            cur = ([], [])
            pairs.append(cur)
        cur[0 if now == "key" else 1].append((i, t))
        kind = now
    return pairs


def test_fuzzy_icr_labels_and_key_sizes():
    task = make_task("fuzzy_icr", **SMALL)
    K, _, pad = task.ids()
    km = task.options.k_motif
    d = task.make(0)
    sizes = {}
    for split in ("train", "val", "test"):
        got = set()
        for x, y in zip(*rows(getattr(d, split)), strict=True):
            want, bound = [IGNORE] * len(x), {}
            first = next(i for i, t in enumerate(x) if t != pad)
            assert all(t == pad for t in x[:first]) and pad not in x[first:]
            for key, value in runs(x, K, pad):
                k, v = tuple(t for _, t in key), tuple(t for _, t in value)
                got.add(len(k))
                assert len(set(k)) == len(k) and len(set(v)) == len(v) and v
                if k in bound:
                    assert bound[k] == v
                    want[key[-1][0]] = v[0]
                    for (i, _), nxt in zip(value[:-1], v[1:], strict=True):
                        want[i] = nxt
                bound.setdefault(k, v)
            assert y == want
        sizes[split] = got
    assert sizes["train"] == set(range(1, km + 1))
    assert sizes["val"] == sizes["test"] == {km}


def test_selective_copy_labels_are_the_data_in_order():
    task = make_task("selective_copy", **SMALL)
    o = task.options
    blank, copy, R = o.vocab - 2, o.vocab - 1, o.seq_len - o.n_copy - 1
    for x, y in zip(*rows(task.make(0).test), strict=True):
        data = [t for t in x[:R] if t != blank]
        assert x[R] == copy and copy not in x[:R] and x[R + 1 :] == [blank] * o.n_copy
        assert len(data) == o.n_copy
        assert y == [IGNORE] * (R + 1) + data


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_compression_recalls_every_token_through_a_bottleneck(noise):
    d = small("compression", frac_noise=noise, noise_vocab=4 if noise else 0)
    assert d.bottleneck and d.info["decoder"] == "linear"
    x, y = d.train.x, d.train.y
    compress = d.vocab - 1
    assert (x[:, -1] == compress).all() and (y[:, -1] == IGNORE).all()
    data = x[:, :-1] < compress - (4 if noise else 0)  # (n, T - 1)
    assert torch.equal(y[:, :-1], torch.where(data, x[:, :-1], IGNORE))
    assert abs((~data).double().mean().item() - noise) < 0.03
    assert not small("icr").bottleneck


def mapping(d):
    """key -> value read off the labels at INSERT, checked consistent."""
    seen = {}
    for s in (d.train, d.val, d.test):
        keys, values = s.x[:, 0::2].flatten().tolist(), s.y[:, 1::2].flatten().tolist()
        for k, v in zip(keys, values, strict=True):
            assert seen.setdefault(k, v) == v
    return seen


def test_memorization_map_is_fixed_by_map_seed():
    a, b, c = (
        small("memorization"),
        small("memorization", seed=1),
        small("memorization", map_seed=1),
    )
    assert not torch.equal(a.train.x, b.train.x)
    assert mapping(a) == mapping(b) and mapping(a) != mapping(c)
    assert (a.train.y[:, 0::2] == IGNORE).all() and (a.train.x[:, 1::2] == a.info["insert"]).all()
    assert len(mapping(a)) == a.info["keys"][1] + 1  # every key drawn


@pytest.mark.parametrize("random_non_queries", [True, False])
def test_mqar_queries_every_key_once(random_non_queries):
    task = make_task("mqar", **SMALL, random_non_queries=random_non_queries)
    o = task.options
    H, C = o.vocab // 2, 2 * o.num_kv_pairs
    d = task.make(0)
    first_gap = 0
    for x, y in zip(*rows(d.test, 128), strict=True):
        keys, values = x[0:C:2], x[1:C:2]
        assert len(set(keys)) == len(keys) and all(1 <= k < H for k in keys)
        assert len(set(values)) == len(values) and all(H <= v < o.vocab for v in values)
        labelled = [i for i, t in enumerate(y) if t != IGNORE]
        assert len(labelled) == o.num_kv_pairs and all((i - C) % 2 == 0 for i in labelled)
        assert sorted(x[i] for i in labelled) == sorted(keys)  # every key queried exactly once
        for i in labelled:
            assert y[i] == values[keys.index(x[i])]
        filler = [t for i, t in enumerate(x[C:], C) if i not in labelled]
        assert random_non_queries or filler == [0] * len(filler)
        first_gap += C in labelled
    space = (o.seq_len - C) // 2
    # the power law puts the shortest gap far above its uniform share num_kv_pairs / space
    assert first_gap / 128 > 2 * o.num_kv_pairs / space


@pytest.mark.parametrize("name", NAMES)
def test_labels_decidable_from_the_prefix(name):
    # the oracle reads no token after a labelled position: scrambling the future keeps it right
    d = make_task(name, **SMALL).make(0)
    x, y = d.test.x[:16], d.test.y[:16]  # (n, T)
    n, T = x.shape
    g = torch.Generator().manual_seed(0)
    # one copy per cut t: tokens after t replaced by uniform ones, all copies in one batch
    future = torch.arange(T) > torch.arange(T)[:, None]  # (t, T): [t, i] = i > t
    noise = torch.randint(d.vocab, (T, n, T), generator=g)  # (t, n, T)
    scrambled = torch.where(future[:, None], noise, x)  # (t, n, T)
    pred = d.oracle(scrambled.flatten(0, 1)).argmax(-1).view(T, n, T)  # (t, n, T)
    at_cut = pred.diagonal(dim1=0, dim2=2)  # (n, T): the answer at t with t's future scrambled
    due = y != IGNORE
    assert torch.equal(at_cut[due], y[due])


@pytest.mark.parametrize("name", NAMES)
def test_oracle_perfect_at_defaults(name):
    d = make_task(name).make(0)
    _, correct, units = score(d.oracle(d.test.x), d.test.y, "classification")
    assert units > 0 and correct == units
    assert d.vocab == d.n_out and "split_by" not in d.info


@pytest.mark.parametrize(
    ("name", "opts", "match"),
    [
        ("icr", {"seq_len": 7}, "even"),
        ("icr", {"seq_len": 2}, "even"),
        ("icr", {"vocab": 8, "noise_vocab": 5}, "two keys"),
        ("icr", {"frac_noise": 1.0, "noise_vocab": 2}, r"\[0, 1\)"),
        ("icr", {"frac_noise": -0.1}, r"\[0, 1\)"),
        ("icr", {"frac_noise": 0.2}, "noise_vocab"),
        ("icr", {"n_val": 0}, "n_val"),
        ("noisy_icr", {"frac_noise": 0.0}, "> 0"),
        ("fuzzy_icr", {"vocab": 6, "k_motif": 3}, "raise vocab"),
        ("fuzzy_icr", {"seq_len": 7}, "two pairs"),
        ("fuzzy_icr", {"v_motif": 0}, "v_motif"),
        ("selective_copy", {"seq_len": 9, "n_copy": 4}, "2 \\* n_copy"),
        ("selective_copy", {"vocab": 3}, "vocab"),
        ("compression", {"vocab": 5, "noise_vocab": 3}, "COMPRESS"),
        ("compression", {"seq_len": 1}, "seq_len"),
        ("memorization", {"seq_len": 5}, "even"),
        ("memorization", {"vocab": 4}, "INSERT"),
        ("mqar", {"seq_len": 30, "num_kv_pairs": 8}, "4 \\* num_kv_pairs"),
        ("mqar", {"seq_len": 63}, "even"),
        ("mqar", {"vocab": 9}, "distinct"),
        ("mqar", {"power_a": 0.0}, "power_a"),
    ],
)
def test_bad_options_refused_in_one_line(name, opts, match):
    with pytest.raises(UserError, match=match) as exc:
        make_task(name, **opts)
    assert "\n" not in str(exc.value)


def test_too_few_distinct_sequences_refused():
    with pytest.raises(UserError, match="distinct"):
        make_task("memorization", vocab=5, seq_len=2).make(0)  # 2 keys: 2 sequences


def test_registered_with_defaults():
    for name in NAMES:
        task = TASKS.get(name)()
        assert task.name == name and task.kind == "classification" and task.sequence
        assert 16 <= task.options.vocab <= 128 and 8 <= task.options.seq_len <= 64

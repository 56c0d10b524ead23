"""Contract tests run over every registered task, then a few task-specific checks."""

import dataclasses
import functools
import random

import numpy as np
import pytest
import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS, make_task
from blocklab.tasks.base import score, standardize
from blocklab.tasks.teacher import TeacherNet

NAMES = TASKS.names()


@pytest.fixture(autouse=True, scope="module")
def cache_in_tmp(tmp_path_factory):
    # token tasks cache their tokenizer on disk; never in the user's home during tests
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLOCKLAB_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


def small(name: str, **overrides):
    cls = TASKS.get(name)
    return cls(**{**getattr(cls, "small_options", {}), **overrides})


@functools.cache
def data(name: str, seed: int):
    return small(name).make(seed)


def splits(d):
    return {"train": d.train, "val": d.val, "test": d.test}


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_data(name):
    a, b = data(name, 0), small(name).make(0)  # a fresh instance, not the cached result
    for key, s in splits(a).items():
        t = splits(b)[key]
        assert torch.equal(s.x, t.x) and torch.equal(s.y, t.y), key


@pytest.mark.parametrize("name", NAMES)
def test_seed_dependence(name):
    a, b = data(name, 0), data(name, 1)
    same = torch.equal(a.train.x, b.train.x) and torch.equal(a.train.y, b.train.y)
    # seed-independent tasks are fixed benchmarks: the trial seed varies only init and batch order
    assert same != getattr(TASKS.get(name), "seed_dependent", True)


@pytest.mark.parametrize("name", NAMES)
def test_shapes_dtypes_finite(name):
    d, cls = data(name, 0), TASKS.get(name)
    assert d.kind == cls.kind and d.sequence == cls.sequence
    assert small(name).seq_len == d.seq_len
    assert d.sequence or not d.per_position  # a target per position needs positions
    for key, s in splits(d).items():
        assert len(s) > 0 and s.x.shape[0] == s.y.shape[0], key
        if d.vocab is None:
            assert s.x.shape[1:] == d.input_shape and s.x.dtype == torch.float32, key
            assert s.x.ndim == (3 if d.sequence else 2), key  # (n, T, F) or (n, F)
            assert torch.isfinite(s.x).all(), key
        else:
            assert d.sequence and s.x.shape == (len(s), d.seq_len), key  # (n, T) token ids
            assert s.x.shape[1:] == d.input_shape and s.x.dtype == torch.int64, key
            assert s.x.min() >= 0 and s.x.max() < d.vocab, key
        lead = (len(s), d.seq_len) if d.per_position else (len(s),)
        if d.kind == "regression":
            assert s.y.shape == (*lead, d.n_out) and s.y.dtype == torch.float32, key
            assert torch.isfinite(s.y).all(), key
        else:
            assert s.y.shape == lead and s.y.dtype == torch.int64, key
            assert s.y.min() >= 0 and s.y.max() < d.n_out, key
    if d.vocab is not None:
        assert d.vocab == d.n_out and d.kind == "classification"  # the next token is the class


@pytest.mark.parametrize("name", NAMES)
def test_targets_standardized_or_classes_present(name):
    d = data(name, 0)
    y = d.train.y
    if d.kind == "regression" and d.tolerance is not None:
        # the tolerance is defined in raw units, so these targets stay unstandardized
        assert torch.isfinite(y).all() and y.abs().max() > 0
        assert d.oracle is not None
    elif d.kind == "regression":
        assert y.mean(0).abs().max() < 1e-4
        assert (y.std(0) - 1).abs().max() < 1e-3
    elif d.vocab is not None:
        # a vocabulary holds every byte, most never in the text: only check the targets vary
        assert y.unique().numel() > min(d.n_out, y.numel()) // 100
    else:
        # every class seen in training
        assert torch.bincount(y.flatten(), minlength=d.n_out).min() > 0


@pytest.mark.parametrize("name", NAMES)
def test_tolerance_iff_scored_by_tolerance(name):
    d = data(name, 0)
    assert (d.tolerance is not None) == TASKS.get(name).scored_by_tolerance
    assert d.tolerance is None or (d.kind == "regression" and d.tolerance > 0)


@pytest.mark.parametrize("name", NAMES)
def test_oracle_perfect(name):
    d = data(name, 0)
    if d.sequence and d.vocab is None:
        # sequence tasks come with their definition as code; text has none to score perfectly
        assert d.oracle is not None
    if d.oracle is None:
        pytest.skip("no oracle")
    for key, s in splits(d).items():
        out = d.oracle(s.x)
        _, metric, units = score(out, s.y, d.kind, d.tolerance)
        if d.kind == "regression" and d.tolerance is None:
            assert metric / units < 1e-10, key
        else:
            assert metric == units, key  # accuracy exactly 1


@pytest.mark.parametrize("name", NAMES)
def test_constant_predictor_scores_at_chance(name):
    d = data(name, 0)
    test = d.test
    if d.kind == "classification":
        counts = torch.bincount(d.train.y.flatten(), minlength=d.n_out)
        majority = int(counts.argmax())
        out = torch.zeros(*test.y.shape, d.n_out)  # (n, [T,] C)
        out[..., majority] = 1.0
        _, correct, units = score(out, test.y, d.kind)
        freq = torch.bincount(test.y.flatten(), minlength=d.n_out).double() / test.y.numel()
        assert correct / units == pytest.approx(float(freq[majority]))
        assert correct / units <= float(freq.max())
        # random logits pick a uniform class independent of the label: accuracy 1/C in expectation
        g = torch.Generator().manual_seed(0)
        _, correct, units = score(torch.randn(out.shape, generator=g), test.y, d.kind)
        p = 1 / d.n_out
        assert abs(correct / units - p) < 4 * (p * (1 - p) / units) ** 0.5
    elif d.tolerance is None:
        out = d.train.y.mean(0).expand_as(test.y)
        _, mse, units = score(out, test.y, d.kind)
        # ~1 by standardization; the small test splits (128 examples) spread it by ~0.15-0.2
        assert mse / units > 0.7
    else:
        _, hits, units = score(torch.zeros_like(test.y), test.y, d.kind, d.tolerance)
        assert hits / units == pytest.approx(d.info["chance"])
        _, hits, units = score(d.train.y.mean(0).expand_as(test.y), test.y, d.kind, d.tolerance)
        assert abs(hits / units - d.info["chance"]) < 0.01  # the training mean is near 0
        assert d.info["chance"] < 0.1


@pytest.mark.parametrize("name", NAMES)
def test_reported_balance(name):
    d = data(name, 0)
    if "balance" not in d.info:
        pytest.skip("no balance reported")
    assert 0.35 <= d.info["balance"] <= 0.65


@pytest.mark.parametrize("name", NAMES)
def test_splits_disjoint(name):
    d = data(name, 0)
    rows = {k: {r.numpy().tobytes() for r in s.x.flatten(1)} for k, s in splits(d).items()}
    if d.vocab is not None:
        # token windows are held out by their source: validation windows come from the training
        # text (they may overlap training windows), test windows from text the training stream
        # never contains (the task's own tests check the files); text repeats, so a stray window
        # may still coincide
        assert d.info["split_by"] in ("file", "position")
        assert len(rows["train"] & rows["test"]) <= 0.05 * len(rows["test"])
        return
    assert not rows["train"] & rows["val"]
    assert not rows["train"] & rows["test"]
    assert not rows["val"] & rows["test"]


@pytest.mark.parametrize("name", NAMES)
def test_metric_matches_kind(name):
    task = small(name)
    if task.kind == "regression" and task.scored_by_tolerance:
        assert task.metric == "accuracy" and task.higher_is_better
    elif task.kind == "regression":
        assert task.metric == "mse" and not task.higher_is_better
    else:
        assert task.kind == "classification"
        assert task.metric == "accuracy" and task.higher_is_better
    assert task.name == name and isinstance(task.threshold, float)
    assert isinstance(TASKS.get(name).default_threshold, float)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option(name):
    first = dataclasses.fields(TASKS.get(name).Options)[0].name
    with pytest.raises(UserError, match="did you mean"):
        make_task(name, **{first + "x": 1})
    with pytest.raises(UserError):
        make_task(name, zzzqqq=1)


# teacher


def test_teacher_kinds_differ():
    tanh = small("teacher", teacher="tanh").make(0)
    mixed = small("teacher", teacher="mixed").make(0)
    assert not torch.allclose(tanh.train.y, mixed.train.y, atol=1e-2)
    assert mixed.info["teacher"] == "mixed"


def test_teacher_invalid_kind():
    with pytest.raises(UserError, match="teacher"):
        make_task("teacher", teacher="relu")


@pytest.mark.parametrize("kind", ["tanh", "mixed"])
def test_teacher_drawn_before_data(kind):
    # so the teacher depends on the seed alone: sweeping n_train or noise keeps the same function
    d = small("teacher", teacher=kind, n_train=300).make(5)
    o = TASKS.get("teacher").Options()
    net = TeacherNet(kind, o.n_in, 1, o.width, o.depth, torch.Generator().manual_seed(5))
    assert torch.corrcoef(torch.cat([d.test.y, net(d.test.x).float()], 1).T)[0, 1] > 1 - 1e-6


def test_teacher_noise_only_on_fitting_splits():
    clean, noisy = small("teacher").make(0), small("teacher", noise=0.5).make(0)
    assert not torch.allclose(clean.train.y, noisy.train.y)
    # test targets stay the clean teacher, only shifted and scaled by the noisier train statistics
    assert torch.corrcoef(torch.cat([clean.test.y, noisy.test.y], 1).T)[0, 1] > 1 - 1e-6


# poly_target


def test_poly_target_fn_reproduces_targets():
    task = small("poly_target")
    d, fn = task.make(3), task.target_fn(3)
    raw = [fn(s.x.double())[:, None] for s in (d.train, d.val, d.test)]  # (n, 1)
    for s, y in zip((d.train, d.val, d.test), standardize(*raw), strict=True):
        torch.testing.assert_close(s.y, y.float(), rtol=1e-4, atol=1e-4)


def test_poly_target_info():
    d = small("poly_target", rank=5, n_in=4).make(0)
    assert d.info["sep_upper_bound"] == 5
    assert len(d.info["coefficients"]) == 5
    exps = torch.tensor(d.info["exponents"])
    assert exps.shape == (5, 4) and exps.min() >= 1 and exps.max() <= 3


@pytest.mark.parametrize(
    "opts",
    [
        {"n_in": 1},
        {"rank": 0},
        {"min_exponent": 4},
        {"min_exponent": -1},
        {"min_exponent": 0, "max_exponent": 0},
        {"n_test": 0},
    ],
)
def test_poly_target_rejects_bad_options(opts):
    with pytest.raises(UserError):
        make_task("poly_target", **opts)


# mnist1d


def test_mnist1d_published_sizes():
    d = make_task("mnist1d").make(0)
    assert (len(d.train), len(d.val), len(d.test)) == (3600, 400, 1000)
    assert d.input_shape == (40,) and d.n_out == 10
    assert d.info["n_train"] == 3600 and d.info["published_test_accuracy"]["cnn"] == 0.94


def test_mnist1d_restores_global_rng():
    np.random.seed(123)
    random.seed(123)
    np_before, py_before = np.random.get_state(), random.getstate()
    make_task("mnist1d", num_samples=200, n_val=20, data_seed=7).make(0)  # uncached: generates
    np_after = np.random.get_state()
    assert np_before[0] == np_after[0] and np.array_equal(np_before[1], np_after[1])
    assert np_before[2:] == np_after[2:]
    assert random.getstate() == py_before


def test_mnist1d_cache_not_mutable():
    task = small("mnist1d")
    task.make(0).test.x.zero_()
    task.make(0).train.x.zero_()
    assert task.make(0).test.x.abs().sum() > 0 and task.make(0).train.x.abs().sum() > 0


@pytest.mark.parametrize("name", NAMES)
def test_fresh_samples_follow_the_train_split(name):
    """A generative task's sampler draws new examples of the same distribution, standardized as
    the train split: deterministic from its generator, different for another one."""
    d = data(name, 0)
    if not d.online:
        pytest.skip("a fixed dataset")
    x, y = d.sample(4096, torch.Generator().manual_seed(1))
    again = d.sample(4096, torch.Generator().manual_seed(1))
    other = d.sample(4096, torch.Generator().manual_seed(2))
    assert torch.equal(x, again[0]) and torch.equal(y, again[1])
    assert not torch.equal(x, other[0])
    assert x.dtype == d.train.x.dtype and x.shape[1:] == d.input_shape
    assert y.dtype == d.train.y.dtype and y.shape[1:] == d.train.y.shape[1:]
    assert not (x[:, None] == d.train.x[None]).all(-1).any()  # not drawn from the train split
    # targets standardized by the train split: near mean 0, std 1 (256 train examples: loose)
    assert y.mean(0).abs().max() < 0.25 and (y.std(0) - 1).abs().max() < 0.25


def test_poly_target_samples_are_the_polynomial():
    task = small("poly_target")
    d, fn = task.make(3), task.target_fn(3)
    x, y = d.sample(512, torch.Generator().manual_seed(0))
    raw = fn(d.train.x).float()  # the train split's raw targets fix the standardization
    expected = (fn(x) - raw.mean()) / raw.std()
    assert torch.allclose(y[:, 0], expected.float(), atol=1e-4)


def test_online_is_an_option():
    assert data("teacher", 0).online
    assert not small("teacher", online=False).make(0).online

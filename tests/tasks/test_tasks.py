"""The task contract (`blocklab.checks.tasks`, the battery `blocklab check` runs) over every
registered task, then task-specific checks."""

import random

import numpy as np
import pytest
import torch

from _contract import contract_test
from blocklab.checks import tasks as contract
from blocklab.errors import UserError
from blocklab.tasks import TASKS, make_task
from blocklab.tasks.base import moments
from blocklab.tasks.teacher import TeacherNet

CASES = {case.name: case for case in contract.cases()}  # each makes its data once, shared


@pytest.fixture(autouse=True, scope="module")
def cache_in_tmp(tmp_path_factory):
    # token tasks cache their tokenizer on disk; never in the user's home during tests
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLOCKLAB_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


test_contract = contract_test(contract, list(CASES.values()), ids=lambda c: c.name)


def small(name: str, **overrides):
    return CASES[name].task(**overrides)


def data(name: str, seed: int):
    return CASES[name].data(seed)


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


def test_teacher_activation_and_gain_change_the_target_and_their_defaults_do_not():
    default = small("teacher").make(0)
    assert torch.equal(small("teacher", activation="tanh", gain=2.0).make(0).test.y, default.test.y)
    relu = small("teacher", activation="relu").make(0)
    sharp = small("teacher", gain=6.0).make(0)
    for other in (relu, sharp):
        assert torch.corrcoef(torch.cat([default.test.y, other.test.y], 1).T)[0, 1] < 0.999
    # relu's kinks: its targets are piecewise linear, so along a line through the input cube the
    # second differences vanish except where a unit switches
    o = TASKS.get("teacher").Options()
    net = TeacherNet("tanh", o.n_in, 1, o.width, o.depth, torch.Generator().manual_seed(0), "relu")
    t = torch.linspace(-1, 1, 2001, dtype=torch.float64)[:, None]
    y = net(t * torch.tensor([[1.0, 0.5]], dtype=torch.float64))[:, 0]
    second = (y[2:] - 2 * y[1:-1] + y[:-2]).abs()
    assert (second < 1e-12).float().mean() > 0.95
    with pytest.raises(UserError, match="activation"):
        make_task("teacher", activation="sigmoid")
    with pytest.raises(UserError, match="gain"):
        make_task("teacher", gain=0)


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
    mean, std = moments(raw[0])  # every split scaled by the train split's statistics
    for s, y in zip((d.train, d.val, d.test), raw, strict=True):
        torch.testing.assert_close(s.y, ((y - mean) / std).float(), rtol=1e-4, atol=1e-4)


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

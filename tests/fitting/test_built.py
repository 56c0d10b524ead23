"""The networks read before a run fits (`fitting.built`): within `once()` each is built once and
shared, as `init_model` makes it; building one leaves the random numbers drawn after it alone;
and the timed steps, which train and convert theirs, leave the shared network unchanged."""

from __future__ import annotations

import dataclasses

import torch

from blocklab.experiments.degree_sweep import DegreeSweepConfig, plan
from blocklab.fitting import built, timing
from blocklab.fitting.network import init_model, task_data

SMALL = {"n_in": 3, "n_train": 64, "n_val": 16, "n_test": 64}


def _spec(seed: int = 0, **changes):
    cfg = DegreeSweepConfig(task_options=SMALL, depths=(2,), degrees=("2",), baselines=())
    (arm, shape), *_ = plan.shapes(cfg).values()
    return dataclasses.replace(plan.spec(cfg, arm, shape, cfg.train.lr, seed), **changes)


def _same(a, b) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_within_once_each_network_is_built_once_and_is_init_models():
    spec = _spec()
    with built.once():
        nets = built.shared()
        first = nets.network(spec)
        # another fit, budget, rounding or ladder of the same architecture: the same network
        other = dataclasses.replace(spec, rounding=1, ladder=(1, 2), budget=0)
        assert nets.network(other) is first and built.shared() is nets
        with built.once():  # nested: the outer one's
            assert built.shared() is nets
        assert nets.network(spec, seed=1) is not first  # another seed, another network
        copy = nets.copied(spec)
        assert copy is not first and _same(copy, first)
    assert built.shared() is not nets  # outside: a cache of the caller's own
    made = init_model(spec, task_data(spec.task, spec.task_options, 0), "cpu", 0)
    assert _same(first, made) and first.frozen == made.frozen


def test_building_a_network_leaves_the_random_numbers_after_it_alone():
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    built.Built().network(_spec(seed=7))  # init_model seeds torch itself: forked here
    assert torch.equal(torch.rand(4), expected)


def test_the_timed_steps_leave_the_shared_network_as_it_was():
    """`timing` trains a copy; timing the shared network itself (planted) changes it, which the
    same comparison sees."""
    spec = _spec()
    with built.once():
        nets = built.shared()
        before = nets.copied(spec)
        timing.adam_step(spec, steps=2)
        timing.lm_iteration(spec, iterations=1)
        shared = nets.network(spec)
        assert _same(shared, before) and next(shared.parameters()).dtype == torch.float32

        def uncopied(spec, seed=None):  # a timing that read the shared network
            return nets.network(spec, seed)

        nets.copied = uncopied
        timing.adam_step(spec, steps=2)
        assert not _same(nets.network(spec), before)

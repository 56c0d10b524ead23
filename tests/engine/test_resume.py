"""A resumed sweep stores, bit for bit, what an undisturbed one stores: units are planned from
every trial, finished or not, and stored whole, so each trial left trains in the unit it would
have trained in."""

from __future__ import annotations

import random

import pytest

from _specs import small_trial
from blocklab import specs
from blocklab.engine import executors, sweep
from blocklab.errors import Interrupted
from blocklab.specs import TrainConfig
from blocklab.store import Store

RESOURCES = executors.Resources(workers=1, ensemble=3)


def _specs() -> list[specs.TrialSpec]:
    return [
        small_trial(degree, seed, TrainConfig(steps=40, batch_size=16, lr=lr, eval_points=3))
        for degree in ("2", "3")
        for seed in range(4)
        for lr in (3e-3, 1e-2)
    ]


def stored(store: Store) -> dict[str, tuple]:
    """Every stored number but the wall time, with the unit's size and the trial's status."""
    return {
        r["id"]: (
            r["status"],
            {k: v for k, v in r["metrics"].items() if k != "seconds"},
            r["curves"],
        )
        for r in store.records()
    }


def run(store: Store, resources=RESOURCES, **kwargs) -> dict:
    return sweep.run(_specs(), store, "t", resources=resources, progress=False, **kwargs)


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory) -> tuple[Store, dict]:
    store = Store(tmp_path_factory.mktemp("undisturbed"))
    run(store)
    return store, stored(store)


def test_units_do_not_depend_on_order_or_on_what_is_stored():
    trials = _specs()
    units = specs.batches(trials, ensemble=3, workers=1)
    shuffled = random.Random(0).sample(trials, len(trials))
    again = specs.batches(shuffled, ensemble=3, workers=1)
    assert sorted([s.id for s in u] for u in units) == sorted([s.id for s in u] for u in again)
    assert sorted(len(u) for u in units) == [2, 2, 3, 3, 3, 3]  # 8 per architecture: 3 + 3 + 2


@pytest.mark.parametrize("after", [1, 5, 14])
def test_an_interrupted_sweep_resumes_to_the_same_bits(undisturbed, tmp_path, after):
    """Interrupted after `after` trials, some in the middle of a unit: the unit is stored."""
    store, seen = Store(tmp_path), []

    def interrupt(record):
        seen.append(record["id"])
        if len(seen) == after:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted):
        run(store, on_record=interrupt)
    assert after <= len(store.records()) < len(_specs())
    run(store)
    assert stored(store) == undisturbed[1]


def test_a_store_holding_some_units_resumes_to_the_same_bits(undisturbed, tmp_path):
    """Half the units, picked at random, already stored: the others train as they would have,
    and what was stored is left as it was."""
    full, want = undisturbed
    units = specs.batches(_specs(), RESOURCES.ensemble, RESOURCES.workers)
    picked = [s.id for u in random.Random(1).sample(units, len(units) // 2) for s in u]
    records = full.records(ids=picked)
    store = Store(tmp_path)
    for record in records:
        store.put(record)
    run(store)
    assert stored(store) == want
    for record in records:
        assert store.get(record["id"])["finished_at"] == record["finished_at"]


def test_a_unit_partly_stored_trains_the_rest(undisturbed, tmp_path):
    """One trial of a unit of three stored (as an experiment that lists a finished trial again
    finds it): the other two train as a unit of two, to float tolerance of the three."""
    full, want = undisturbed
    unit = next(u for u in specs.batches(_specs(), 3, 1) if len(u) == 3)
    store = Store(tmp_path)
    store.put(full.get(unit[0].id))
    run(store)
    for spec in unit[1:]:
        status, metrics, _ = stored(store)[spec.id]
        assert metrics["ensemble"]["members"] == 2
        assert metrics["test_metric"] == pytest.approx(want[spec.id][1]["test_metric"], rel=1e-4)
    assert stored(store)[unit[0].id] == want[unit[0].id]


def test_a_pool_resumes_to_the_same_bits(tmp_path):
    """On a pool of two workers, against an undisturbed sweep on the same pool."""
    pool = executors.Resources(workers=2, ensemble=3)
    reference = Store(tmp_path / "undisturbed")
    run(reference, resources=pool)
    store, seen = Store(tmp_path / "resumed"), []

    def interrupt(record):
        seen.append(record["id"])
        if len(seen) == 7:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted):
        run(store, resources=pool, on_record=interrupt)
    run(store, resources=pool)
    assert stored(store) == stored(reference)

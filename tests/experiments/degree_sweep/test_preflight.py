"""The degree sweep's checks before any fit build each cell's network once (`preflight.check`),
and over a whole run every network the checks, the fits' cost estimate and timing and the build
check read is built once (`fitting.built`), without changing what the run stores; the checks
refuse what the separate checks refused, leave the config inert (no task built), and a run
hashes each set of modules once (`fingerprint.once`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import torch

from blocklab import fingerprint, options
from blocklab.errors import UserError
from blocklab.experiments.degree_sweep import DegreeSweepConfig, exact, plan, preflight

SMALL = {"n_in": 3, "n_train": 64, "n_val": 16, "n_test": 64}


def config(**given) -> DegreeSweepConfig:
    shape = {"width": 3, "norm": "rms", "depth": 1, **given.pop("shape", {})}
    table = {"task_options": SMALL, "shape": shape}
    return options.build(DegreeSweepConfig, {"degrees": "2", "baselines": "mlp",
                                             "depths": [1, 2], **table, **given})  # fmt: skip


def count_builds(monkeypatch) -> Counter:
    """Every network built from a trial's spec outside the trial's own run
    (`engine.trial.run_group`), by (arm, depth, width, the seed last set): what the checks, the
    estimates, the timing and the build check build, whichever path they take (`init_model`
    builds through `network.build_model`; the build check, where it imports it by name, too).
    The exact measures build networks of their own inputs and shapes (`models.Net`), not
    counted."""
    import blocklab.engine.sweep as sweep
    import blocklab.fitting.network as network

    built: Counter = Counter()
    inside = [False]
    make, fit = network.build_model, sweep.run_group

    def counted(spec, data):
        if not inside[0]:
            built[(spec.arm.label, spec.shape.depth, spec.shape.width, torch.initial_seed())] += 1
        return make(spec, data)

    def trial(*args, **kwargs):  # a trial builds its own networks, to train them
        inside[0] = True
        try:
            return fit(*args, **kwargs)
        finally:
            inside[0] = False

    monkeypatch.setattr(network, "build_model", counted)
    if hasattr(sweep, "build_model"):
        monkeypatch.setattr(sweep, "build_model", counted)
    monkeypatch.setattr(sweep, "run_group", trial)
    return built


def tiny_run(tmp_path, monkeypatch, **given):
    """A whole staged run of two arms and the control on two teachers and two seeds, in this
    process (one worker), with the fits' plan line and its timing (`progress`): its stored
    metrics and the networks built outside the trials (`count_builds`)."""
    from blocklab.engine.executors import Resources
    from blocklab.experiments.degree_sweep import run
    from blocklab.store import Store

    train = {"optimizer": "lm", "steps": 8, "restarts": 1, "warm_start": 4}
    cfg = config(degrees=("2", "3"), control=True, teachers=2, seeds=2, train=train, **given)
    built = count_builds(monkeypatch)
    store = Store(tmp_path / "store.sqlite")
    trials = run(cfg, store, resources=Resources(workers=1, device="cpu"), progress=True)
    return trials, built


def test_each_network_is_built_once_over_a_whole_run(tmp_path, monkeypatch):
    """Over a run, every network outside the trials is built once: each cell's at seed 0 for
    the checks, shared by the estimates, the timing and the build check; the ladder check's
    second rung at seed 1; the control's at its own seed for the estimate and the timing. Each
    building its own, the same run built these 14 networks 52 times (the build check once per
    trial, the estimate and the timing once each over again)."""
    trials, built = tiny_run(tmp_path, monkeypatch)
    assert trials.rows and not trials.failed
    assert max(built.values()) == 1, built
    nets = {(label, depth, width) for label, depth, width, _ in built}
    assert nets == {(a, d, 3) for a in ("d=2", "mlp", "d=3", "d=3 (control)") for d in (1, 2)}
    assert len(built) == 14, sorted(built.items())


def test_the_build_counter_sees_a_network_built_twice(tmp_path, monkeypatch):
    """The count above, on a run whose shared cache is dropped (every caller builds its own):
    the same networks are built again, and the check fails on them."""
    import blocklab.fitting.built as cache

    monkeypatch.setattr(cache, "shared", cache.Built)
    _, built = tiny_run(tmp_path, monkeypatch)
    assert max(built.values()) > 1


def test_the_preflight_builds_each_cells_network_once(monkeypatch):
    built = count_builds(monkeypatch)
    cfg = config()
    assert cfg.staged  # every check runs: input rank, ladder and functional count
    cells = plan.shapes(cfg)
    said: list[str] = []
    checked = preflight.check(cfg, cells, said.append)
    cell_nets = {(arm.label, s.depth, s.width, 0) for arm, s in cells.values()}
    assert {k: n for k, n in built.items() if k in cell_nets} == dict.fromkeys(cell_nets, 1)
    # the ladder's second rung at seed 1 is no cell's network: one per arm, built for it
    assert {k for k in built if k not in cell_nets} == {("d=2", 2, 3, 1), ("mlp", 2, 3, 1)}
    assert set(checked.input_rank) == {"d=2", "mlp"} and set(checked.counts) == set(cells)
    assert [line.split(" ")[0] for line in said] == ["checking", "checking", "counting"]
    # the same numbers as the separate passes
    assert checked.input_rank == preflight.input_ranks(cfg, cells)
    assert checked.counts == exact.functional_counts(cfg, cells)


def test_the_preflight_refuses_a_lost_direction_as_the_input_rank_check_did():
    cfg = config(baselines="", depths="1", shape={"norm": "layer"})
    with pytest.raises(UserError) as caught:
        preflight.check(cfg, plan.shapes(cfg))
    said = str(caught.value)
    assert "input_rank" in said and "sees 2 of the task's 3" in said
    assert said.endswith("use a width of 4 or more, or --norm rms")


def test_the_config_builds_no_task_and_still_refuses_bad_task_input(monkeypatch):
    import blocklab.tasks as tasks
    from blocklab.tasks.base import Task

    def refuse(*args, **kwargs):
        raise AssertionError("the config built a task")

    monkeypatch.setattr(Task, "__init__", refuse)
    monkeypatch.setattr(tasks, "make_task", refuse)
    DegreeSweepConfig()
    config()
    with pytest.raises(UserError, match="no_such_key"):
        DegreeSweepConfig(task_options={"no_such_key": 1})
    with pytest.raises(UserError, match="unknown task"):
        DegreeSweepConfig(task="no_such_task")
    with pytest.raises(UserError, match="fits regression tasks"):
        DegreeSweepConfig(task="mnist1d")
    adam = replace(DegreeSweepConfig().train, optimizer="adam")
    with pytest.raises(ValueError, match="fixed dataset"):
        DegreeSweepConfig(task="mnist1d", task_options={}, teachers=2, train=adam)


def test_a_run_hashes_each_set_of_modules_once(monkeypatch):
    hashed: list[tuple[str, ...]] = []
    real = fingerprint.fingerprint

    def counted(modules):
        hashed.append(tuple(modules))
        return real(modules)

    monkeypatch.setattr(fingerprint, "fingerprint", counted)
    modules = ["blocklab.blocks.poly"]
    outside = [fingerprint.code(modules) for _ in range(3)]
    assert len(hashed) == 3
    hashed.clear()
    with fingerprint.once():
        with fingerprint.once():  # nested: the outer one's hashes
            inside = [fingerprint.code(modules) for _ in range(3)]
        inside.append(fingerprint.code(modules))
        fingerprint.code(["blocklab.blocks.mlp"])
    assert len(hashed) == 2 and inside == [outside[0]] * 4
    fingerprint.code(modules)
    assert len(hashed) == 3  # outside again: hashed afresh

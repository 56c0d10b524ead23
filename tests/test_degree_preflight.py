"""The degree sweep's checks before any fit build each cell's network once (`preflight.check`),
refuse what the separate checks refused, leave the config inert (no task built), and a run
hashes each set of modules once (`fingerprint.once`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from blocklab import fingerprint, options
from blocklab.errors import UserError
from blocklab.experiments.degree_sweep import DegreeSweepConfig, plan, preflight

SMALL = {"n_in": 3, "n_train": 64, "n_val": 16, "n_test": 64}


def config(**given) -> DegreeSweepConfig:
    shape = {"width": 3, "norm": "rms", "depth": 1, **given.pop("shape", {})}
    table = {"task_options": SMALL, "shape": shape}
    return options.build(DegreeSweepConfig, {"degrees": "2", "baselines": "mlp",
                                             "depths": [1, 2], **table, **given})  # fmt: skip


def test_each_cells_network_is_built_once_for_every_check(monkeypatch):
    import blocklab.fitting.network as network

    built: Counter = Counter()
    init = network.init_model

    def counted(spec, data, device, seed):
        built[(spec.arm.label, spec.shape.depth, spec.shape.width, seed)] += 1
        return init(spec, data, device, seed)

    monkeypatch.setattr(network, "init_model", counted)
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
    assert checked.input_rank == plan.input_ranks(cfg, cells)
    from blocklab.experiments.degree_sweep import exact

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

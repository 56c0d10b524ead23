"""No stale or silently wrong results: every trial records the code that made it and a rerun by
other code reruns it; a block's declared parameter count is checked at every build; parameters
that get no gradient train frozen on every path instead of crashing it."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest
import torch

from blocklab import fingerprint
from blocklab.blocks import BLOCKS
from blocklab.cli import main
from blocklab.engine import sweep, trial
from blocklab.engine.executors import Resources
from blocklab.errors import UserError
from blocklab.fitting import network
from blocklab.fitting.train import train
from blocklab.models import parse_arm
from blocklab.specs import NetShape, TrainConfig, TrialSpec
from blocklab.store import Store

BLOCK = """
import torch
from torch import nn

from blocklab.blocks import BLOCKS, Block


@BLOCKS.register
class {cls}(Block):
    stackable = {stackable}

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.linear = nn.Linear(d_in, d_out, bias=False)
        {extra}

    def forward(self, x):
        return {forward}

    @classmethod
    def count_params(cls, d_in, d_out):
        return {count}
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """write(name, **parts) -> a block module in tmp_path, imported (registered) afresh; the
    blocks registered here leave the registry afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(name, forward="self.linear(x) ** 3", extra="", count="d_in * d_out", stack=True):
        text = BLOCK.format(
            cls=name.title().replace("_", ""),
            stackable=stack,
            extra=extra,
            forward=forward,
            count=count,
        )
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
        BLOCKS._items.pop(name, None)
        sys.modules.pop(name, None)
        importlib.invalidate_caches()
        importlib.import_module(name)
        written.append(name)
        return name

    yield write
    for name in written:
        BLOCKS._items.pop(name, None)
        sys.modules.pop(name, None)


def specs(block: str, seeds=(0, 1), steps=20) -> list[TrialSpec]:
    train = TrainConfig(steps=steps, batch_size=16, eval_points=2)
    arm = parse_arm(block)
    return [
        TrialSpec(
            "teacher",
            {},
            arm,
            0,
            NetShape(2, 6, norm="layer"),
            train,
            s,
        )
        for s in seeds
    ]


def run(store, todo, ensemble=8):
    return sweep.run(todo, store, "t", resources=Resources(ensemble=ensemble), progress=False)


def test_a_trial_records_the_code_that_made_it(tmp_path, plugin):
    name = plugin("cubic_a")
    records = run(Store(tmp_path), specs(name))
    for rec in records.values():
        code = rec["provenance"]["code"]
        assert {name, "blocklab.tasks.teacher", "blocklab.fitting.train"} <= set(code["modules"])
        assert code["fingerprint"] == fingerprint.fingerprint(code["modules"])
        assert fingerprint.is_current(code)


def test_a_rerun_by_other_code_reruns_and_says_so(tmp_path, plugin, capsys):
    name = plugin("cubic_b")
    todo = specs(name)
    first = run(Store(tmp_path), todo)
    run(Store(tmp_path), todo)  # same code: reused, nothing said
    assert "other code" not in capsys.readouterr().err
    plugin("cubic_b", forward="self.linear(x) ** 3 / 2")  # the block's code changes
    assert not any(fingerprint.is_current(r["provenance"]["code"]) for r in first.values())

    kept = run(Store(tmp_path, reuse="stale"), todo)
    assert "2 stored trials were made by other code: reusing" in capsys.readouterr().err
    assert {i: r["finished_at"] for i, r in kept.items()} == {
        i: r["finished_at"] for i, r in first.items()
    }

    again = run(Store(tmp_path), todo)
    assert "2 stored trials were made by other code: rerunning" in capsys.readouterr().err
    for i, rec in again.items():
        assert rec["finished_at"] > first[i]["finished_at"]
        assert rec["metrics"]["test_metric"] != first[i]["metrics"]["test_metric"]
        assert fingerprint.is_current(rec["provenance"]["code"])
    run(Store(tmp_path), todo)  # now current: reused without a word
    assert "other code" not in capsys.readouterr().err


def test_fresh_reruns_everything(tmp_path, plugin):
    todo = specs(plugin("cubic_c"))
    first = run(Store(tmp_path), todo)
    again = run(Store(tmp_path, reuse="none"), todo)
    assert all(again[i]["finished_at"] > first[i]["finished_at"] for i in first)


def test_fresh_trains_each_trial_of_a_command_once(tmp_path, monkeypatch, tiny_searched_sweep):
    from blocklab.experiments import degree_sweep

    # the search's seed-0 trial at the chosen rate is also a final: a fresh command shares it
    cfg = tiny_searched_sweep
    one = Resources(workers=1, ensemble=1)
    degree_sweep.run(cfg, Store(tmp_path), resources=one, progress=False)
    before = {r["id"]: r["finished_at"] for r in Store(tmp_path).records()}
    trained: list[str] = []
    real = sweep.run_group

    def counted(specs, device="cpu"):
        trained.extend(s.id for s in specs)
        return real(specs, device)

    monkeypatch.setattr(sweep, "run_group", counted)
    degree_sweep.run(cfg, Store(tmp_path, reuse="none"), resources=one, progress=False)
    assert sorted(trained) == sorted(set(trained)) == sorted(before)  # 2 rates + 1 more seed
    assert len(before) == 3
    after = {r["id"]: r["finished_at"] for r in Store(tmp_path).records()}
    assert all(after[i] > before[i] for i in before)


def test_a_trial_stored_without_a_fingerprint_is_other_code(tmp_path):
    store = Store(tmp_path)
    rec = {"id": "a", "experiment": "t", "status": "done", "seed": 0, "config": {}}
    store.put(rec)
    store.put({**rec, "id": "b", "provenance": {"code": {"fingerprint": "f"}}})
    store.put({**rec, "id": "c", "status": "failed", "provenance": {"code": {"fingerprint": "f"}}})
    assert store.reusable({"a": "f", "b": "f", "c": "f", "d": "f"}) == ({"b"}, {"a"})
    assert Store(tmp_path, reuse="stale").reusable({"a": "f", "b": "g"}) == ({"a", "b"}, {"a", "b"})
    assert Store(tmp_path, reuse="none").reusable({"a": "f", "b": "f"}) == (set(), {"a"})


def test_a_module_that_only_moved_is_the_same_code(tmp_path, monkeypatch):
    """A recorded module found under its new name (`fingerprint.MOVED`): the same text keeps the
    trial current, an edited one does not, and without the map the module is gone."""
    text = "VALUE = 1\n"
    (tmp_path / "moved_old.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    recorded = fingerprint.code(["moved_old"])
    (tmp_path / "moved_old.py").unlink()
    sys.modules.pop("moved_old", None)
    (tmp_path / "moved_new.py").write_text(text)
    importlib.invalidate_caches()
    assert not fingerprint.is_current(recorded)  # no map: the recorded module is gone
    monkeypatch.setitem(fingerprint.MOVED, "moved_old", "moved_new")
    assert fingerprint.is_current(recorded)
    (tmp_path / "moved_new.py").write_text("VALUE = 2\n")
    sys.modules.pop("moved_new", None)
    assert not fingerprint.is_current(recorded)


def test_a_stored_trial_whose_modules_only_moved_is_kept(tmp_path, monkeypatch):
    """A rerun keeps a trial recorded under a module's old name when the module only moved
    (`Store.reusable` with the modules, `fingerprint.moved_only`): its fingerprint, which hashes
    the names, differs from today's, yet the code is the same. Planted: an edited module, and a
    module set that grew, are other code."""
    (tmp_path / "moved_a.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    recorded = fingerprint.code(["moved_a"])
    (tmp_path / "moved_a.py").rename(tmp_path / "moved_b.py")
    sys.modules.pop("moved_a", None)
    importlib.invalidate_caches()
    monkeypatch.setitem(fingerprint.MOVED, "moved_a", "moved_b")
    now = fingerprint.code(["moved_b"])
    assert now["fingerprint"] != recorded["fingerprint"]
    store = Store(tmp_path / "store")
    rec = {"id": "a", "experiment": "t", "status": "done", "seed": 0, "config": {}}
    store.put({**rec, "provenance": {"code": recorded}})
    fps, mods = {"a": now["fingerprint"]}, {"a": now["modules"]}
    assert store.reusable(fps) == (set(), {"a"})  # without the modules: other code
    assert store.reusable(fps, mods) == ({"a"}, set())
    grown = {"a": [*now["modules"], "blocklab.tasks.teacher"]}
    assert store.reusable(fps, grown) == (set(), {"a"})
    (tmp_path / "moved_b.py").write_text("VALUE = 2\n")
    sys.modules.pop("moved_b", None)
    assert store.reusable(fps, mods) == (set(), {"a"})


def test_every_moved_module_is_found_where_it_moved():
    assert all(fingerprint.source(old) is not None for old in fingerprint.MOVED)


def test_runs_list_shows_the_fingerprint_and_marks_stale_trials(tmp_path, plugin, capsys):
    name = plugin("cubic_d")
    first = run(Store(tmp_path), specs(name))
    assert main(["runs", "list", "--out", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {r["fingerprint"] for r in listed} == {
        r["provenance"]["code"]["fingerprint"] for r in first.values()
    }
    assert not any(r["stale"] for r in listed)
    plugin("cubic_d", forward="self.linear(x) ** 3 + 1")
    assert main(["runs", "list", "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.count("stale") == 2
    assert "2 stale" in err


def test_the_command_line_takes_fresh_and_reuse_stale(tmp_path, capsys, trials_only):
    args = ["collapse", "--depth", "2", "--width", "8", "--seq-len", "8", "--n-train", "128"]
    args += ["--seeds", "1", "--variants", "pure", "--out", str(tmp_path), "--quiet"]
    args += ["--steps", "5", "--batch-size", "32", "--eval-points", "2", "--workers", "1"]

    def finished() -> list[float]:
        return sorted(r["finished_at"] for r in Store(tmp_path).records())

    trials_only(main, args)
    first = finished()
    trials_only(main, args)
    assert finished() == first  # resumed: nothing reran
    trials_only(main, [*args, "--reuse-stale"])
    assert finished() == first
    trials_only(main, [*args, "--fresh"])
    assert all(b > a for a, b in zip(first, finished(), strict=True))
    capsys.readouterr()
    assert main([*args, "--fresh", "--reuse-stale"]) == 2
    assert "not allowed with" in capsys.readouterr().err


def test_a_wrong_count_params_stops_the_build_with_one_line(plugin):
    name = plugin("cubic_e", count="d_in * d_out + 1")
    with pytest.raises(UserError, match=rf"block {name}: count_params declares 37 .* 36 trainable"):
        sweep.check_builds(specs(name))


def test_a_wrong_count_params_exits_2_through_the_command_line(tmp_path, plugin, capsys):
    name = plugin("cubic_f", count="d_in * d_out - 1")
    args = ["degree-sweep", "--out", str(tmp_path), "--quiet", "--baselines", name]
    assert main([*args, "--degrees", "2", "--budgets", "100", "200", "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"block {name}: count_params declares" in err


# an unused weight: a raw parameter (run under vmap, or alone) or an nn.Linear (stacked path)
SPARE = {
    "parameter": ("nn.Parameter(torch.randn(d_out))", False),
    "linear": ("nn.Linear(d_in, d_out, bias=False)", True),
}


@pytest.mark.parametrize(
    "path, spare, ensemble",
    [("vmap", "parameter", 8), ("stacked", "linear", 8), ("single", "parameter", 1)],
)
def test_parameters_without_gradient_train_frozen(tmp_path, plugin, capsys, path, spare, ensemble):
    extra, stack = SPARE[spare]
    size = 36 if spare == "linear" else 6
    name = plugin(
        f"spare_{path}", extra=f"self.spare = {extra}", count=f"d_in * d_out + {size}", stack=stack
    )
    todo = specs(name, seeds=(0, 1, 2))
    records = run(Store(tmp_path), todo, ensemble=ensemble)
    err = capsys.readouterr().err
    assert err.count("get no gradient") == 1  # one notice per architecture, in the parent
    spares = "layers.*.block.spare" + (".weight" if spare == "linear" else "")
    assert f"{2 * size} parameters get no gradient ({spares}); " in err
    assert "the arm trains 72 layer parameters at budget 0" in err
    run(Store(tmp_path), specs(name, seeds=(3,)), ensemble=ensemble)  # another run tells again
    assert capsys.readouterr().err.count("get no gradient") == 1
    for rec in records.values():
        assert rec["status"] == "done", rec.get("error")
        assert rec["metrics"]["params"]["frozen"] == 2 * size
        assert rec["metrics"]["params"]["blocks"] == 2 * 36  # the trained ones alone
        if ensemble > 1:
            assert rec["metrics"]["ensemble"] == {"members": 3, "path": path}

    # the frozen weights keep their initial values, the others train
    torch.manual_seed(0)
    initial = network.build_model(todo[0], network.task_data("teacher", {}, 0))
    if ensemble > 1:
        model = trial.train_group(todo, "cpu")[0][0].model
    else:
        p = trial._prepare(todo[0], "cpu")
        train(p.model, p.data, todo[0].train, 0, p.threshold)
        model = p.model
    after, before = model.layers[0].block, initial.layers[0].block
    assert torch.equal(
        torch.nn.utils.parameters_to_vector(after.spare.parameters())
        if spare == "linear"
        else after.spare,
        torch.nn.utils.parameters_to_vector(before.spare.parameters())
        if spare == "linear"
        else before.spare,
    )
    assert not torch.equal(after.linear.weight, before.linear.weight)

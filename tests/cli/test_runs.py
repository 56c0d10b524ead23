"""`blocklab runs list` and `runs show` on planted stores: a trial's teacher on its row, a trial
of a plugin this command did not import told apart from a stale one, and one trial's record
indented."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from blocklab import fingerprint, plugins
from blocklab.cli import main
from blocklab.store import Store

CONFIG = {"task": "teacher", "arm": {"label": "d=3"}, "budget": 96, "depth": 4, "width": 4}


def record(trial_id: str, code: dict, seed: int = 0, **config) -> dict:
    return {
        "id": trial_id,
        "experiment": "degree-sweep",
        "status": "done",
        "seed": seed,
        "config": {**CONFIG, **config},
        "metrics": {"test_metric": 0.5, "metric": "mse"},
        "provenance": {"code": code},
        "finished_at": 1000.0 + len(trial_id),
    }


def listed(capsys, out, *flags) -> tuple[dict[str, str], str]:
    """`runs list`'s rows by trial id, and its count line."""
    assert main(["runs", "list", "--out", str(out), *flags]) == 0
    captured = capsys.readouterr()
    rows = {line.split()[0]: line for line in captured.out.splitlines()}
    return rows, captured.err.splitlines()[-1]


def test_each_row_names_its_teacher(tmp_path, capsys):
    """Two trials of seed 0 fitting two teachers: their rows, and their JSON, differ."""
    code = fingerprint.code(["blocklab.blocks.poly"])
    store = Store(tmp_path)
    store.put(record("t0", code, data_seed=0))
    store.put(record("t1", code, data_seed=1))
    store.put(record("free", code, seed=1))  # the data follow the seed: no teacher
    store.close()
    rows, _ = listed(capsys, tmp_path)
    assert "teacher=0 seed=0" in rows["t0"] and "teacher=1 seed=0" in rows["t1"]
    assert "teacher=" not in rows["free"]
    assert main(["runs", "list", "--out", str(tmp_path), "--json"]) == 0
    got = {r["id"]: (r["teacher"], r["seed"]) for r in json.loads(capsys.readouterr().out)}
    assert got == {"t0": (0, 0), "t1": (1, 0), "free": (None, 1)}


@pytest.fixture
def plugin_file(tmp_path, monkeypatch):
    """write(name, text) -> a plugin file imported as `--import FILE` imports it, and removed
    from the modules afterwards."""
    names = []

    def write(name: str, text: str = "VALUE = 1\n"):
        path = tmp_path / "plugins" / f"{name}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        sys.modules.pop(name, None)
        plugins.load([str(path)])
        names.append(name)
        return path

    yield write
    for name in names:
        sys.modules.pop(name, None)


def test_a_plugin_not_imported_is_said_so_and_an_edited_one_is_stale(tmp_path, capsys, plugin_file):
    """Planted: the trials of two plugins, one whose file this process no longer has imported
    (a listing without its --import), one imported and edited since; and a trial recording a
    module of the package that is gone. Only the first is "not imported", named with the
    --import of the run's command; the others are stale."""
    gone = plugin_file("runs_plugin_gone")
    edited = plugin_file("runs_plugin_edited")
    base = ["blocklab.blocks.poly"]
    current = fingerprint.code(base)
    store = Store(tmp_path / "run")
    store.put(record("current", current))
    store.put(record("gone", fingerprint.code([*base, "runs_plugin_gone"])))
    store.put(record("edited", fingerprint.code([*base, "runs_plugin_edited"])))
    store.put(record("removed", {"fingerprint": "0" * 16, "modules": ["blocklab.blocks.gone"]}))
    store.close()
    sys.modules.pop("runs_plugin_gone")  # listed by a process that did not import it
    edited.write_text("VALUE = 2\n")  # imported, then edited: other code
    command = ["blocklab", "degree-sweep", "--import", str(gone), "--out", str(tmp_path / "run")]
    (tmp_path / "run" / "run.json").write_text(json.dumps({"command": shlex.join(command)}))

    rows, count = listed(capsys, tmp_path / "run")
    state = {i: row.split()[4:6] for i, row in rows.items()}
    assert state["gone"] == ["not", "imported"]
    assert state["edited"][0] == state["removed"][0] == "stale"
    assert state["current"][0] == "teacher"  # the code column blank, the trial's words next
    assert count.endswith(
        "(2 stale: made by code other than this; 1 not imported: made by plugin "
        f"runs_plugin_gone, which this command did not import; pass --import {gone} to "
        "compare their code)"
    )
    assert main(["runs", "list", "--out", str(tmp_path / "run"), "--json"]) == 0
    got = {r["id"]: (r["stale"], r["not_imported"]) for r in json.loads(capsys.readouterr().out)}
    assert got == {
        "current": (False, []),
        "gone": (False, ["runs_plugin_gone"]),
        "edited": (True, []),
        "removed": (True, []),
    }

    # without the run's command, the hint names the plugin and asks for its file
    (tmp_path / "run" / "run.json").unlink()
    _, count = listed(capsys, tmp_path / "run")
    assert "plugin runs_plugin_gone" in count and "pass --import FILE" in count

    # imported again, as --import does: its trials are current, the edited one still stale
    plugins.load([str(gone)])
    rows, count = listed(capsys, tmp_path / "run")
    assert "not imported" not in count and rows["gone"].split()[4] == "teacher"
    assert "(2 stale" in count


def test_runs_show_indents_the_record(tmp_path, capsys):
    code = fingerprint.code(["blocklab.blocks.poly"])
    store = Store(tmp_path)
    store.put(record("t0", code, data_seed=1))
    store.close()
    assert main(["runs", "show", "t0", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == ["id: t0", "experiment: degree-sweep", "status: done", "seed: 0"]
    shown = {}
    for key in ("config", "metrics", "provenance"):
        start = lines.index(f"{key}: {{")  # the JSON starts on the key's line, indented below
        end = lines.index("}", start)
        assert all(line.startswith("  ") for line in lines[start + 1 : end])
        shown[key] = json.loads("{" + "\n".join(lines[start + 1 : end + 1]))
    assert shown["config"] == {**CONFIG, "data_seed": 1}
    assert shown["metrics"] == {"test_metric": 0.5, "metric": "mse"}
    assert shown["provenance"] == {"code": code}
    assert '    "label": "d=3"' in lines  # a nested value two spaces further in

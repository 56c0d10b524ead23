"""Bad stores and bad settings meet one line on stderr and exit 2, and lose nothing finished: a
damaged, altered, full, locked or read-only store; an --out that is a file or has a dot in its
name; settings that would train backwards or not at all; keys a command would ignore; a TOML
file that is not UTF-8; the small commands' out-of-range numbers."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from blocklab.cli import main
from blocklab.errors import StoreError
from blocklab.store import DB_NAME, Store, database

# a sweep that stores points without training: seprank measures on a 16 x 16 grid
SEPRANK = ["seprank", "depth-width", "--widths", "2", "--depths", "1", "2", "--templates", "16"]
SEPRANK += ["--seeds", "2", "--quiet"]


def one_line(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("blocklab: error:") and "Traceback" not in err
    for word in words:
        assert word in err, err


def fill(path: Path, n: int = 300) -> Path:
    store = Store(path)
    for i in range(n):
        store.put(
            {"id": f"t{i:04d}", "experiment": "e", "status": "done", "seed": i,
             "config": {"x": "y" * 200}, "curves": {"loss": list(range(50))}}
        )  # fmt: skip
    store.close()
    return path / DB_NAME


def garble(db: Path, seed: int = 0) -> None:
    """Random bytes over pages in the middle of the file, as a failing disk leaves them."""
    size = db.stat().st_size
    with open(db, "r+b") as fh:
        fh.seek(size // 2 - 3 * 4096)
        fh.write(random.Random(seed).randbytes(6 * 4096))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("seed", range(3))
def test_a_damaged_store_is_one_line_to_list_and_refused_by_a_sweep(seed, tmp_path, capsys):
    db = fill(tmp_path)
    garble(db, seed)
    before = digest(db)
    one_line(main(["runs", "list", "--out", str(tmp_path)]), capsys.readouterr().err, "damaged")
    code = main([*SEPRANK, "--out", str(tmp_path)])
    one_line(code, capsys.readouterr().err, str(db), "damaged", ".recover", "mv ")
    assert digest(db) == before  # refused before anything was written


def test_a_row_that_is_not_json_names_the_trial(tmp_path, capsys):
    db = fill(tmp_path, 10)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE trials SET metrics = '{oops' WHERE id = 't0005'")
    one_line(main(["runs", "--out", str(tmp_path)]), capsys.readouterr().err, "t0005", "DELETE")


def cap_the_file(monkeypatch, extra_pages: int) -> None:
    """SQLite's own limit on the file's pages, set as each store opens: a put past it fails
    with SQLITE_FULL, as on a full disk."""
    opened = Store.__init__

    def capped(self, *args, **kwargs):
        opened(self, *args, **kwargs)
        pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
        self.conn.execute(f"PRAGMA max_page_count={pages + extra_pages}")

    monkeypatch.setattr(Store, "__init__", capped)


def stored(db: Path) -> dict[str, float]:
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return dict(conn.execute("SELECT id, finished_at FROM trials"))


def test_a_full_disk_stops_the_sweep_in_one_line_and_keeps_what_finished(
    tmp_path, capsys, monkeypatch, trials_only
):
    args = [*SEPRANK, "--widths", "2", "3", "--depths", "1", "2", "3", "--seeds", "3"]
    with monkeypatch.context() as patch:
        cap_the_file(patch, 0)
        code = main([*args, "--out", str(tmp_path)])
    one_line(code, capsys.readouterr().err, "disk is full", "kept")
    kept = stored(tmp_path / DB_NAME)
    assert 0 < len(kept) < 18
    trials_only(main, [*args, "--out", str(tmp_path)])  # space again: the rerun resumes
    after = stored(tmp_path / DB_NAME)
    assert len(after) == 18 and {k: after[k] for k in kept} == kept


@pytest.mark.slow
def test_a_full_disk_mid_training_sweep(tmp_path, capsys, monkeypatch):
    args = ["degree-sweep", "--optimizer", "adam", "--task-option", "n_train=256"]
    args += ["--task-option", "n_val=64"]
    args += ["--task-option", "n_test=64", "--budgets", "3072", "--width", "16", "--steps", "20"]
    args += ["--seeds", "6", "--lr-grid", "1e-2", "--degrees", "3", "--baselines"]
    args += ["--workers", "1", "--ensemble", "1", "--quiet", "--out", str(tmp_path)]
    with monkeypatch.context() as patch:
        cap_the_file(patch, 2)
        code = main(args)
    one_line(code, capsys.readouterr().err, "disk is full")
    kept = stored(tmp_path / DB_NAME)
    assert 0 < len(kept) < 6
    assert main(args) == 0
    after = stored(tmp_path / DB_NAME)
    assert len(after) == 6 and {k: after[k] for k in kept} == kept


def test_a_store_locked_past_the_wait_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(database, "BUSY_SECONDS", 0.2)
    db = fill(tmp_path, 1)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write, holding the lock
    try:
        store = Store(tmp_path)
        with pytest.raises(StoreError, match="locked"):
            store.put({"id": "x", "experiment": "e", "status": "done", "seed": 0, "config": {}})
        store.close()
        one_line(main([*SEPRANK, "--out", str(tmp_path)]), capsys.readouterr().err, "locked")
    finally:
        other.close()
    assert stored(db).keys() == {"t0000"}


def read_only_dir_command(path: Path, argv: list[str]) -> list[str] | None:
    """`blocklab argv` as a process that cannot write `path`: a read-only bind mount in a mount
    namespace of its own where this runs as root (root ignores permissions), None where that is
    not allowed."""
    command = [sys.executable, "-m", "blocklab", *argv]
    if os.geteuid() != 0:
        return command
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        return None
    quoted = " ".join(f"'{a}'" for a in command)
    mount = f"mount --bind '{path}' '{path}' && mount -o remount,bind,ro '{path}'"
    return ["unshare", "-m", "sh", "-c", f"{mount} && exec {quoted}"]


def test_runs_lists_a_store_in_a_read_only_directory_and_changes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    db = fill(run_dir, 3)
    stat = db.stat()
    command = read_only_dir_command(run_dir, ["runs", "list", "--out", str(run_dir)])
    if command is None:
        pytest.skip("no way to make a read-only directory here")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if os.geteuid() != 0:
        run_dir.chmod(0o555)
        db.chmod(0o444)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    finally:
        run_dir.chmod(0o755)
        db.chmod(0o644)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 3 and "3 trials" in proc.stderr
    assert (db.stat().st_mtime_ns, db.stat().st_size) == (stat.st_mtime_ns, stat.st_size)


def test_reading_opens_read_only(tmp_path, capsys):
    db = fill(tmp_path, 3)
    before = (digest(db), db.stat().st_mtime_ns)
    assert main(["runs", "--out", str(tmp_path), "--json"]) == 0
    assert main(["runs", "show", "t0001", "--out", str(tmp_path)]) == 0
    assert main(["runs", "export", str(tmp_path.parent / "t.csv"), "--out", str(tmp_path)]) == 0
    assert (digest(db), db.stat().st_mtime_ns) == before
    reader = Store(tmp_path, read_only=True)
    assert len(reader.records()) == 3
    with pytest.raises(StoreError, match="cannot be written"):
        reader.put({"id": "x", "experiment": "e", "status": "done", "seed": 0, "config": {}})
    reader.close()
    with pytest.raises(StoreError, match="no store"):
        Store(tmp_path / "elsewhere", read_only=True)
    capsys.readouterr()
    one_line(
        main(["runs", "--out", str(tmp_path), "--experiment", "nope"]), capsys.readouterr().err
    )
    one_line(main(["runs", "--out", str(db)]), capsys.readouterr().err, "is a file")


def test_out_is_always_a_directory(tmp_path, capsys):
    dotted = tmp_path / "run.v2"
    assert main([*SEPRANK, "--out", str(dotted)]) == 0
    assert (dotted / DB_NAME).is_file() and (dotted / "report.md").is_file()

    note = tmp_path / "x.txt"
    note.write_text("")
    one_line(main([*SEPRANK, "--out", str(note)]), capsys.readouterr().err, "is a file")
    assert note.read_text() == "" and sorted(p.name for p in tmp_path.iterdir()) == [
        "run.v2",
        "x.txt",
    ]
    one_line(main([*SEPRANK, "--out", str(note / "sub")]), capsys.readouterr().err)
    assert note.read_text() == ""


def test_the_store_api_names_a_directory_or_a_database_file(tmp_path):
    assert Store(tmp_path / "run.v2").path == tmp_path / "run.v2" / DB_NAME
    assert Store(tmp_path / "trials.db").path == tmp_path / "trials.db"
    existing = Store(tmp_path / "run.v2").path
    assert Store(existing).path == existing  # an SQLite file, whatever its name
    note = tmp_path / "x.txt"
    note.write_text("")
    with pytest.raises(StoreError, match="is a file"):
        Store(note)
    assert note.read_text() == ""


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--clip", "-1", "clip"),  # gradient ascent
        ("--clip", "0", "clip"),  # no step at all
        ("--blowup", "0", "blowup"),  # everything diverged at the first evaluation
        ("--blowup", "1", "blowup"),
        ("--weight-decay", "-1", "weight_decay"),
        ("--threshold", "nan", "threshold"),
        ("--threshold", "-1", "threshold"),
        ("--lr-grid", "inf", "lr_grid"),
    ],
)
def test_training_settings_are_checked_before_anything_runs(flag, value, field, tmp_path, capsys):
    code = main(["degree-sweep", "--out", str(tmp_path / "out"), "--quiet", flag, value])
    one_line(code, capsys.readouterr().err, field)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("command", "toml", "words"),
    [
        ("degree-sweep", "[train]\nwarm_start = 0\nlr = 0.5\n", ("train.lr", "--optimizer lm")),
        ("degree-sweep", "[shape]\ndepth = 8\n", ("shape.depth", "--mode depth")),
        (
            "degree-sweep",
            "mode = 'depth'\nbudgets = [800]\n[shape]\nwidth = 8\n",
            ("shape.width is not used", "--mode width"),
        ),
        (
            "degree-sweep",
            "[shape]\nresidual = false\nscaled_residual = true\n",
            ("shape.scaled_residual", "residual is off"),
        ),
        (
            "degree-sweep",
            "degrees = []\n[shape]\nbias = true\n",
            ("shape.bias", "degrees is empty"),
        ),
        ("degree-sweep", "norm = 'none'\n", ("norm", "belongs in the [shape] table")),
        ("degree-sweep", "[shape]\nflatten = true\n", ("shape.flatten", "counted whole")),
        ("degree-sweep", "lr_grid = [0.01]\nlr_extend = 3\n", ("lr_extend",)),
        ("degree-sweep", "degrees = 3\n", ("degrees", "list")),
        ("degree-sweep", "budgets = 3000\n", ("budgets", "list")),
        ("degree-sweep", "task = ['teacher']\n", ("task",)),
        ("collapse", "variants = 'pure'\nseeds = 1.5\n", ("seeds",)),
        ("needle", "tau1s = 3.0\n", ("tau1s", "list")),
    ],
)
def test_toml_keys_that_are_ignored_or_of_the_wrong_shape_fail(
    command, toml, words, tmp_path, capsys
):
    path = tmp_path / "c.toml"
    path.write_text(toml)
    code = main([command, "--config", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    one_line(code, capsys.readouterr().err, *words)


def test_a_toml_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_bytes(b"seeds = 2\n# caf\xe9\n")
    code = main(["degree-sweep", "--config", str(path), "--out", str(tmp_path / "o")])
    one_line(code, capsys.readouterr().err, "UTF-8", str(path))


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--seconds", "inf"],
        ["bench", "--widths", "0"],
        ["seprank", "measure", "--positions", "0", "--block", "3"],
        ["seprank", "measure", "--eps", "nan"],
        ["seprank", "measure", "--norm", "batch", "--block", "3"],
        ["seprank", "measure", "--partition", "sideways", "--block", "3"],
        ["advise", "--depth", "100000"],
        ["theory", "--depths", "0"],
    ],
)
def test_small_commands_check_before_computing(argv, capsys, recwarn):
    one_line(main(argv), capsys.readouterr().err)
    assert not [w for w in recwarn if "blocklab" not in str(w.filename)], [str(w) for w in recwarn]

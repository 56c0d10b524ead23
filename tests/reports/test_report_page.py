"""`blocklab report` and the page every experiment's run writes beside report.md: parsed as HTML
and checked against the run directory's store and files, not against fixed text."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

import blocklab
from _pages import Page, markdown_tables
from blocklab import rundir
from blocklab.cli import main
from blocklab.frames import curve_points
from blocklab.reports import html
from blocklab.store import Store

SWEEP = ["degree-sweep", "--optimizer", "adam", "--task", "teacher", "--task-option", "n_train=256"]
SWEEP += ["--task-option", "n_val=64", "--task-option", "n_test=128", "--budgets", "1536", "3072"]
# one learning rate: every trial is a final one, so a groupby over the store is the report's table
SWEEP += ["--width", "16", "--steps", "20", "--seeds", "3", "--lr-grid", "1e-2"]
SWEEP += ["--degrees", "2", "3", "--baselines", "--quiet", "--workers", "1"]
SWEEP += ["--n-boot", "20"]  # the page shows the intervals; how tight they are is not its test


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "sweep"
    assert main([*SWEEP, "--out", str(out)]) == 0
    # the command closed its store: the WAL is folded back and the directory holds the file alone
    assert not list(out.glob("blocklab.sqlite-*"))
    return out


@pytest.fixture(scope="module")
def page(run_dir):
    return Page((run_dir / "index.html").read_text())


@pytest.mark.slow
def test_the_run_writes_its_page_and_its_command(run_dir, page):
    recorded = json.loads((run_dir / rundir.RUN_FILE).read_text())
    assert recorded["experiment"] == "degree_sweep"
    assert recorded["command"].startswith("blocklab degree-sweep --optimizer adam --task teacher")
    assert recorded["config"]["seeds"] == 3
    facts = dict(row for row in page.tables[0] if len(row) == 2)
    assert facts["last command"] == recorded["command"]
    assert facts["trials"].startswith(f"{len(Store(run_dir, read_only=True).records())} (")


@pytest.mark.slow
def test_the_page_fetches_nothing(page):
    # every image is embedded data, every script inline: the page opens without a network
    assert page.urls and all(u.startswith("data:") or not re.match(r"\w+://|//", u)
                             for u in page.urls)  # fmt: skip
    assert all("src" not in s for s in page.scripts)
    assert all(src.startswith("data:image/png;base64,") for src in page.images)


@pytest.mark.slow
def test_every_figure_is_embedded_once_byte_for_byte(run_dir, page):
    embedded = [base64.b64decode(src.split(",", 1)[1]) for src in page.images]
    on_disk = sorted(p.read_bytes() for p in run_dir.glob("*.png"))
    assert on_disk and sorted(embedded) == on_disk


@pytest.mark.slow
def test_report_tables_are_those_of_report_md(run_dir, page):
    expected = markdown_tables((run_dir / "report.md").read_text())
    assert expected
    # the page's tables: its facts, then report.md's in order, then the trials
    assert page.tables[1 : 1 + len(expected)] == expected


@pytest.mark.slow
def test_the_trials_table_is_the_store(run_dir, page):
    records = {r["id"]: r for r in Store(run_dir, read_only=True).records()}
    header, *rows = page.tables[-1]
    assert header[:6] == ["id", "status", "seed", "test_metric", "seconds", "curves"]
    assert {row[0] for row in rows} == set(records) and len(rows) == len(records)
    for row in rows:
        r = records[row[0]]
        assert row[1] == r["status"] and row[2] == str(r["seed"])
        assert row[3] == f"{r['metrics']['test_metric']:.4g}"
    assert page.svgs == len(records)  # a curve per trial


@pytest.mark.slow
def test_a_groupby_of_load_runs_reproduces_the_results_table(run_dir, page):
    runs = blocklab.load_runs(run_dir)
    stats = runs.groupby(["arm", "config.budget"])["test_metric"].agg(["mean", "std"])
    table = next(t for t in page.tables if t[0][:3] == ["arm", "budget", "params"])
    assert len(table) - 1 == len(stats)
    for arm, budget, _params, _functional, loss, *_ in table[1:]:
        mean, std = stats.loc[(arm, int(budget))]
        assert loss == f"{mean:.4g} ± {std:.4g}"


def test_a_directory_of_runs_gets_an_index(tmp_path, capsys):
    for name, seeds in (("a", 2), ("b", 3)):
        store = Store(tmp_path / name)
        for seed in range(seeds):
            store.put(record(f"{name}{seed}", seed))
        store.close()
    (tmp_path / "not-a-run").mkdir()
    assert main(["report", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("wrote ") == 3
    index = Page((tmp_path / "index.html").read_text())
    assert index.links == ["a/index.html", "b/index.html"]
    header, *rows = index.tables[0]
    assert [(r[0], r[3]) for r in rows] == [("a", "2"), ("b", "3")]
    # a run without report.md (stopped before it) says so and still shows its trials
    text = (tmp_path / "a" / "index.html").read_text()
    assert "No report.md" in text and len(Page(text).tables[-1]) == 3


@pytest.mark.slow
def test_an_interrupted_run_reads_incomplete_stored_of_planned_in_the_index(
    tmp_path, monkeypatch, capsys
):
    """A run stopped while its store holds some of its trials (the sweep interrupted as it
    stores the 7th, after the learning-rate search, whose unit is then not stored) reads
    `incomplete: k of n planned ran` in the index: k finished trials of the n its command
    planned. Finishing it with the same command stores exactly n trials, and the index then
    shows its status line."""
    command = [*SWEEP, "--out", str(tmp_path / "stopped")]
    put, seen = Store.put, []

    def stopping_put(self, record):
        seen.append(record["id"])
        if len(seen) == 7:
            raise KeyboardInterrupt
        put(self, record)

    monkeypatch.setattr(Store, "put", stopping_put)
    assert main(command) == 130
    monkeypatch.undo()
    stored = Store(tmp_path / "stopped", read_only=True).records()
    assert stored and all(r["status"] in ("done", "diverged") for r in stored)

    def status_in_index() -> str:
        assert main(["report", str(tmp_path)]) == 0
        header, row = Page((tmp_path / "index.html").read_text()).tables[0]
        return row[header.index("status")]

    planned = 2 * 2 * 3  # 2 degrees x 2 budgets x 3 seeds; the search's trials are seed 0's
    assert len(stored) < planned
    assert status_in_index() == f"incomplete: {len(stored)} of {planned} planned ran"
    capsys.readouterr()
    assert main(command) == 0  # resumed to the end
    assert len(Store(tmp_path / "stopped", read_only=True).records()) == planned
    assert status_in_index() == rundir.RunDir(tmp_path / "stopped").status()["line"]
    assert not status_in_index().startswith("incomplete")


def test_a_run_without_a_recorded_plan_says_what_it_stored(tmp_path):
    """A run directory whose run.json predates plans (or has none) still reads incomplete."""
    store = Store(tmp_path / "old")
    store.put(record("x0", 0))
    store.put({**record("x1", 1), "status": "failed"})
    store.close()
    run = rundir.RunDir(tmp_path / "old")
    assert run.state(Store(run.path, read_only=True).records()) == "incomplete, 1 stored"
    run.write_record("degree_sweep", "blocklab degree-sweep", {})
    run.note_planned(["x0", "x1", "x2", "x0"])
    assert run.planned() == ["x0", "x1", "x2"]  # each trial once, though two sweeps share it
    assert run.state(Store(run.path, read_only=True).records()) == "incomplete: 1 of 3 planned ran"
    status = {"verdict": False, "line": "NO VERDICT: design checks failed: curve"}
    run.write_record("degree_sweep", "blocklab degree-sweep", {}, status)
    assert run.planned() == ["x0", "x1", "x2"]  # the command ending keeps its plan
    assert run.state([]) == status["line"]
    run.write_record("degree_sweep", "blocklab degree-sweep --seeds 6", {})
    assert run.planned() is None  # a new command plans afresh


def test_report_of_nothing_is_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert main(["report", str(tmp_path)]) == 2  # a directory holding no run
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "no run in" in err


def test_a_sparkline_breaks_at_missing_points_and_draws_losses_on_the_log_scale():
    curves = {"step": [0, 1, 2, 3, 4], "train_loss": [100.0, 10.0, None, 1.0, 0.1]}
    svg = html.sparkline(curve_points({"curves": curves}), ["train_loss"], width=104, height=44)
    lines = re.findall(r'points="([^"]+)"', svg)
    assert len(lines) == 2  # the missing point splits the line
    ys = [float(p.split(",")[1]) for line in lines for p in line.split()]
    # log scale: equal ratios are equal steps (100 -> 10 -> 1 -> 0.1 over 40 pixels)
    assert ys == pytest.approx([2.0, 2.0 + 40 / 3, 2.0 + 80 / 3, 42.0], abs=0.05)  # 0.1 px
    assert "100 -&gt; 0.1" in svg


def record(trial_id: str, seed: int) -> dict:
    return {
        "id": trial_id,
        "experiment": "degree-sweep",
        "status": "done",
        "seed": seed,
        "config": {"arm": {"label": "d=3"}, "budget": 100},
        "metrics": {"test_metric": 0.5 + seed},
        "curves": {"step": [0, 10], "train_loss": [1.0, 0.5]},
        "provenance": {},
        "finished_at": 1000.0,
    }


def test_the_page_of_a_run_directory_is_its_own(tmp_path):
    store = Store(tmp_path)
    store.put(record("x0", 0))
    store.close()
    assert html.write_any(tmp_path) == [Path(tmp_path) / "index.html"]


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ({"verdict": True, "line": "VERDICT: m(d=2) = 1.3 [1.1, 1.5]"}, "verdict"),
        ({"verdict": False, "line": "INCONCLUSIVE: m(d=2) = 1.1 [0.8, 1.5]"}, "inconclusive"),
        ({"verdict": False, "line": "NO VERDICT: design checks failed: curve"}, "no-verdict"),
        ({"verdict": False, "line": "FINDINGS: qsa: agrees"}, "findings"),
    ],
)
def test_the_banner_is_coloured_by_what_the_status_says(status, kind):
    from blocklab.reports.html import status_kind

    assert status_kind(status) == kind

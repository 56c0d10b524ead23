"""The degree sweep's report, figures and page show only what ran: one status banner, lines that
join only degrees that both ran, legends of what was drawn, no loss threshold for second-order
fits, "-" for an interval that could not be computed, and a trials table whose rows can be told
apart. Planted rows for the figures; two small runs through the command for the page."""

from __future__ import annotations

import json
import math
import re
from html import unescape

import numpy as np
import pytest
from matplotlib.colors import to_rgba

from _pages import Page, markdown_tables
from blocklab.cli import main
from blocklab.experiments.degree_sweep.report import intervals, plots, tabulate, write_report
from blocklab.reports import figures, html
from blocklab.rundir import RunDir
from blocklab.store import Store

DEGREE = {"d=2": 2.0, "d=3": 3.0, "d=4": 4.0, "mix[3,2,3]": 8 / 3}


def row(arm, budget, seed, loss, optimizer="adam"):
    """A finished trial's row as the report reads it (`experiments._trials.row`)."""
    return dict(
        task="teacher", budget=budget, arm=arm, degree=DEGREE[arm], seed=seed, teacher=0,
        status="done", metric="mse", higher_is_better=False, test_metric=loss, test_loss=loss,
        steps_to_threshold=0 if optimizer != "adam" else 40, threshold=0.22, max_steps=64,
        curve_step=[0, 16, 32, 64], curve_val_loss=[1.0, 0.5, 0.2, loss], block_params=budget,
        other_params=13, depth=2, width=3, lr=1e-2, optimizer=optimizer,
    )  # fmt: skip


def planted(cells, optimizer="adam", seeds=3):
    """Rows of `cells` {(arm, budget): loss}, `seeds` each, their losses apart by seed."""
    return [
        row(arm, budget, seed, loss * (1 + 0.1 * seed), optimizer)
        for (arm, budget), loss in cells.items()
        for seed in range(seeds)
    ]


# budget 200 ran d=2 and d=4 but not d=3; budget 300 ran d=3 alone
GAPPED = {
    ("d=2", 100): 0.03, ("d=3", 100): 0.02, ("d=4", 100): 0.025,
    ("d=2", 200): 0.012, ("d=4", 200): 0.01,
    ("d=3", 300): 0.004,
}  # fmt: skip


@pytest.fixture
def drawn(monkeypatch):
    """The figures the degree plots save, by file name, kept open for the test to read."""
    figures = {}
    save = plots.save

    def keep(fig, path):
        figures[str(path).rsplit("/", 1)[-1]] = fig
        return save(fig, path)

    monkeypatch.setattr(plots, "save", keep)
    return figures


def joined(ax, color) -> list[list[float]]:
    """The x data of each line of `color` in `ax` that joins two points or more."""
    out = []
    for line in ax.get_lines():
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        same = to_rgba(line.get_color()) == to_rgba(color)
        if same and line.get_linestyle() not in ("None", "none", "") and np.isfinite(y).sum() > 1:
            out.append(list(x))
    return out


def test_a_line_joins_only_neighbouring_degrees_that_both_ran(tmp_path, drawn):
    tables = tabulate(planted(GAPPED))
    plots.metric_vs_degree(tables.summaries, tables.bands, tmp_path / "m.png")
    ax = drawn["m.png"].axes[0]
    color = plots.colors([100, 200, 300])
    assert joined(ax, color[100]) == [[2.0, 3.0, 4.0]]
    assert joined(ax, color[200]) == []  # d=3 never ran at 200: no line from d=2 to d=4
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["B = 100", "B = 200", "B = 300"]


def test_a_shared_lines_plot_draws_no_line_through_an_x_a_series_lacks(tmp_path, monkeypatch):
    kept = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: kept.setdefault("fig", fig))
    cells = [("a", 1, 0.2), ("a", 2, 0.4), ("a", 4, 0.6), ("b", 1, 0.3), ("b", 4, 0.5)]
    summaries = [
        {"model": m, "width": w, "mean": v, "lo": v - 0.1, "hi": v + 0.1, "n": 3}
        for m, w, v in cells
    ]
    figures.lines_plot(summaries, tmp_path / "l.png", x="width", series=("model",), arm="model",
                       xlabel="width (units)", ylabel="accuracy (fraction)")  # fmt: skip
    ax = kept["fig"].axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_linestyle() not in ("None", "none")]
    assert sorted(list(ln.get_xdata()) for ln in lines) == [[1, 2, 4]]  # b lacks 2: points
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]


def test_neighbours_cut_a_budget_where_a_degree_between_did_not_run():
    s = {d: type("S", (), {"degree": d}) for d in (2.0, 2.5, 3.0, 4.0)}
    runs = plots.neighbours([s[2.0], s[3.0], s[4.0]], [2.0, 2.5, 3.0, 4.0])
    assert [[p.degree for p in run] for run in runs] == [[2.0], [3.0, 4.0]]


def test_the_relative_panel_compares_only_budgets_of_two_arms_and_names_only_what_ran(
    tmp_path, drawn
):
    tables = tabulate(planted(GAPPED))
    plots.ranking_vs_theory(tables.summaries, tmp_path / "r.png")
    theory, relative = drawn["r.png"].axes
    said = [t.get_text() for t in theory.get_legend().get_texts()]
    assert "uniform arm" in said and not any("mixed" in t for t in said)  # no mixed stack ran
    # budget 300 ran one arm, its own best by construction: not drawn, not in the legend
    labels = [t.get_text() for t in relative.get_legend().get_texts()]
    assert labels == ["teacher, B = 100", "teacher, B = 200"]
    color = plots.colors(sorted({("teacher", 100), ("teacher", 200)}))
    assert joined(relative, color[("teacher", 200)]) == [] and joined(
        relative, color[("teacher", 100)]
    ) == [[2.0, 3.0, 4.0]]


@pytest.mark.parametrize(("optimizer", "kept"), [("adam", True), ("lm", False), ("lbfgs", False)])
def test_a_loss_threshold_is_drawn_and_tabled_for_adam_runs_only(tmp_path, drawn, optimizer, kept):
    rows = planted(GAPPED, optimizer)
    path = write_report(tmp_path, tabulate(rows), title="t", config={}, provenance={})
    results = next(t for t in markdown_tables(path.read_text()) if t[0][0] == "task")
    assert ("steps to threshold" in results[0]) is kept
    assert ("loss threshold" in path.read_text()) is False  # the figure's legend, not the text
    fig = drawn["learning_curves.png"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert ("loss threshold" in legend) is kept
    assert legend[: len(legend) - kept] == ["d=2", "d=3", "d=4"]  # the arms that were drawn
    flat = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == "loss threshold"]
    assert bool(flat) is kept
    xlabel = fig.axes[0].get_xlabel()
    assert xlabel == ("optimizer step (steps)" if kept else "iteration (iterations)")


def test_a_second_order_fit_that_stopped_early_holds_its_loss_to_the_end(tmp_path, drawn):
    rows = planted({("d=3", 100): 0.01}, "lm", seeds=2)
    rows[0] |= {"curve_step": [0, 16], "curve_val_loss": [1.0, 0.01]}  # stopped at 16
    plots.learning_curves(rows, tmp_path / "c.png")
    mean = next(ln for ln in drawn["c.png"].axes[0].get_lines() if ln.get_label() == "d=3")
    y = np.asarray(mean.get_ydata(), float)
    assert np.isfinite(y).all() and len(y) == 4  # the longest seed's steps, no gap or jump


def test_an_interval_that_could_not_be_computed_reads_dash():
    nan = math.nan
    assert intervals.cell(nan, nan) == "-" and intervals.after(nan, 1.0) == ""
    assert intervals.cell(0.5, math.inf) == "[0.5, inf]"  # unbounded is computed
    assert intervals.cell(2.0, 2.0) == "[2, 2]"  # a percentile interval may be a point
    assert intervals.after(2.0, 2.0, known=intervals.spread) == ""  # a band of one unit
    assert intervals.p_value(nan) == "-"


SWEEP = ["degree-sweep", "--task-option", "n_train=256", "--task-option", "n_val=64"]
SWEEP += ["--task-option", "n_test=256", "--degrees", "2", "3", "4", "--baselines", "--width", "4"]
SWEEP += ["--norm", "rms", "--depths", "1", "2", "--restarts", "2", "--steps", "8"]
SWEEP += ["--warm-start", "20", "--data-ratio", "4", "--n-boot", "20", "--workers", "1", "--quiet"]


def _run(tmp_path_factory, name, *more):
    out = tmp_path_factory.mktemp("runs") / name
    assert main([*SWEEP, *more, "--out", str(out)]) in (0, 1)  # 1: no verdict, as expected
    return out


@pytest.fixture(scope="module")
def one_unit(tmp_path_factory):
    """Second-order fits of one (teacher, seed) unit: no interval can be computed."""
    return _run(tmp_path_factory, "one", "--seeds", "1", "--teachers", "1")


@pytest.fixture(scope="module")
def two_teachers(tmp_path_factory):
    """Two teachers of one seed each: trials alike but for their teacher."""
    return _run(tmp_path_factory, "two", "--seeds", "1", "--teachers", "2")


def _text(run_dir) -> str:
    """The page without its embedded images."""
    return re.sub(r"data:image/png;base64,[^\"]+", "", (run_dir / "index.html").read_text())


@pytest.mark.slow
def test_the_page_has_one_banner_status_first_then_the_next_command_then_the_rest(one_unit):
    status = RunDir(one_unit).status()
    page = _text(one_unit)
    assert page.count('class="status ') == 1
    assert status["line"] not in page  # the one-line form stays in the terminal and report.md
    banner = re.search(r'<p class="status [^"]+">(.*?)</p>', page, re.S).group(1)
    parts = re.findall(r'<span class="(\w+)">(.*?)</span>', banner)
    # the matched answer words H_fd itself, and the exact measures stand below it: no clause
    # beside the status (`exact.beside`)
    assert [c for c, _ in parts] == ["head", "next", "cost"]
    assert parts[0][1] == status["banner"]["head"] and parts[0][1].startswith("NO VERDICT")
    assert parts[1][1] == f"next command: <code>{status['banner']['command']}</code>"
    # the next command's plan against this run's store, as `--plan` on it prices it: new trials
    # of the networks it fitted, at their measured cost
    assert unescape(parts[2][1]) == f"its cost: {status['banner']['cost']}"
    assert status["next_cost"]["core_seconds"] > 0 and status["next_cost"]["reason"] is None
    assert "measured for" in status["banner"]["cost"]


@pytest.mark.slow
def test_no_interval_reads_nan_and_no_threshold_reads_for_a_second_order_run(one_unit):
    report = (one_unit / "report.md").read_text()
    for text in (report, _text(one_unit)):
        assert not re.search(r"\bnan\b", text, re.I)
        assert "steps to threshold" not in text and "loss threshold" not in text
        assert "F test p = -" not in text
    table = next(t for t in markdown_tables(report) if t[0][:3] == ["arm", "m", "95% interval"])
    assert [r[2] for r in table[1:]] == ["-"] * (len(table) - 1)
    assert report.count("too few to compute one from (shown as -)") >= 1


@pytest.mark.slow
def test_the_trials_table_tells_its_rows_apart_by_teacher(two_teachers):
    page = Page((two_teachers / "index.html").read_text())
    header, *rows = page.tables[-1]
    assert {"arm", "teacher", "seed", "depths (rungs)", "budget (top rung)"} <= set(header)
    keys = ["arm", "budget (top rung)", "depths (rungs)", "seed", "teacher"]
    told = [tuple(r[header.index(k)] for k in keys) for r in rows]
    assert len(set(told)) == len(rows) == len(Store(two_teachers, read_only=True).records())
    assert {r[header.index("teacher")] for r in rows} == {"0", "1"}
    assert "Each row is one trial: a stored ladder of rungs, one per depth" in _text(two_teachers)
    assert json.loads((two_teachers / "run.json").read_text())["status"]["banner"]


def test_a_status_without_parts_is_its_line_alone():
    said = html.banner({"verdict": False, "line": "FINDINGS: qsa: agrees"})
    assert said == '<p class="status findings"><span class="head">FINDINGS: qsa: agrees</span></p>'

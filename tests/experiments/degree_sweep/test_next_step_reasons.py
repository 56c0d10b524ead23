"""A run without a verdict says what to run next, with values: a failed check prints the figure
that failed to as many digits as keep it on its side of the threshold; the next command is the
run's own with the changes its failed checks ask for, parses with the command line and moves
each changed setting past the run's value; the status line points nowhere it is not true."""

from __future__ import annotations

import dataclasses
import math
import re
import shlex

import pytest
from test_capacity import _choice, _rows
from test_capacity_fits import BUDGETS, fit_rows

from blocklab import launch
from blocklab.cli.experiment import flags, form
from blocklab.cli.main import build_parser
from blocklab.experiments.degree_sweep import EXPERIMENT, DegreeSweep, DegreeSweepTrials
from blocklab.experiments.degree_sweep import report as degree_report
from blocklab.experiments.degree_sweep.analysis import capacity, design, fit_checks
from blocklab.experiments.degree_sweep.analysis.arms import compare
from blocklab.experiments.degree_sweep.analysis.cells import Invocation, replaced
from blocklab.experiments.degree_sweep.report.capacity import detail, digits
from blocklab.experiments.degree_sweep.report.status_line import STATUS_WIDTH, status_line
from blocklab.formatting import config_json
from blocklab.reports import Status, html, markdown
from blocklab.rundir import RunDir

# the command a run of the synthetic fits was started by: the demo's arms at their budgets
RUN = ["demo", "--budgets", *map(str, BUDGETS), "--width", "8", "--seeds", "3", "--restarts"]
RUN += ["2", "--steps", "64", "--ladder", "off", "--n-boot", "50"]
ADAM = ["degree-sweep", "--optimizer", "adam", "--budgets", *map(str, BUDGETS), "--width", "8"]

@pytest.fixture(autouse=True)
def scaling_status(monkeypatch):
    """These tests plant the scaling model's checks and read the status they give: the matched
    answer, which leads wherever arms meet (`test_matched` plants its checks), is off here."""
    from blocklab.experiments.degree_sweep.analysis import matched

    monkeypatch.setattr(matched, "applies", lambda rows: False)



def configured(words: list[str]):
    """The config the command line resolves `words` (after `blocklab`) to."""
    args = build_parser().parse_args(words)
    chosen = form(DegreeSweep, args)
    return launch.resolve(DegreeSweep, args.command, chosen, args.config, flags(DegreeSweep, args))


def reported(words: list[str], rows, recorded: str | None = "", **kw):
    """The report's analysis of `rows` from a run started by `blocklab WORDS`."""
    cfg = configured(words)
    command = "blocklab " + shlex.join(words) if recorded == "" else recorded
    return cfg, degree_report.analyze(cfg, DegreeSweepTrials(rows, [], {}, **kw), command).capacity


def searched(rows, ratio=1.5):
    """Two restarts per trial; d=4's first lands `ratio` times above its second, the best."""
    for r in rows:
        first = ratio if r["arm"] == "d=4" else 1.01
        r["restart_train_losses"] = [r["train_loss"] * first, r["train_loss"]]
    return rows


def check(result, name):
    return next(c for c in result.checks if c.name == name)


def test_a_converged_check_prints_its_figure_with_its_band_and_fails_where_the_band_misses():
    """48 fits: 38 converged (79.2%, Wilson band [65.7%, 88.3%]) fails at 90%; 43 (89.6%,
    [77.8%, 95.5%]) straddles it; 48 of 48 ([92.6%, 100%]) clears it."""
    cfg, result = reported(RUN, fit_rows(unconverged=10))
    c = check(result, "converged")
    assert c.outcome == "failed" and (c.count, c.trials) == (38, 48)
    assert "38 of 48 (79.2%, 95% Wilson interval over the fits [65.7%, 88.3%]) fits" in detail(c)
    assert "needs >= 90% with the whole band" in detail(c)
    assert "90% of 48" not in detail(c)
    edge = check(reported(RUN, fit_rows(unconverged=5))[1], "converged")
    assert edge.outcome == "edge" and "43 of 48 (89.6%" in detail(edge)
    assert "the band straddles the threshold" in detail(edge)
    said = check(reported(RUN, fit_rows())[1], "converged")
    assert said.passed and "48 of 48 (100%" in detail(said)
    # what to change: the steps, doubled
    assert result.decision.next.changes == (design.Change("train.steps", 64, 128),)
    assert status_line(result)[1].endswith("--steps 128")


def _figure(text: str, pattern: str) -> float:
    return float(re.search(pattern, text).group(1))


# each check with a figure just on its failing side of the threshold, the pattern of the figure
# it prints and of the threshold it prints, and whether a figure passes at >= the threshold
NEAR = {
    "converged": (
        fit_checks.Converged("converged", False, 0.899996, 10**6, 0.03, (), count=899996),
        r"\(([\d.]+)%, ", r"needs >= ([\d.]+)%", True,
    ),
    "plateau": (
        design.Plateau("plateau", False, 0.899996, 10**6, "wsd", 0.03, (), count=899996),
        r"\(([\d.]+)%, ", r"needs >= ([\d.]+)%", True,
    ),
    "budget_span": (
        design.BudgetSpan("budget_span", False, 4, 7.99996),
        r"over ([\d.]+)x\+", r"over >= ([\d.]+)x", True,
    ),
    "curve": (
        fit_checks.Curve(
            "curve", False, (("d=2", 100, 1.0, 800, 0.5, 1.99996),), ("d=2",), (), (), (0.01, 4)
        ),
        r"d=2 ([\d.]+)x", r"needs >= ([\d.]+)x", True,
    ),
    "generalization": (
        design.Generalization("generalization", False, 1.100004, (("d=2", 100, 1.100004),)),
        r"d=2 at 100 \(([\d.]+)x", r"above ([\d.]+)x", False,
    ),
    "search": (
        fit_checks.Search("search", False, (("d=2", 0.0284711, 2),), 0.0284706),
        r"d=2 ([\d.]+)%", r"needs <= ([\d.]+)%", False,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", NEAR)
def test_no_failed_figure_rounds_across_its_threshold(name):
    """A figure a hair past its threshold reads past the threshold as printed: rounding to a
    fixed number of digits (90% of trials, 8x, 1.1x, 2.85%) would read as a pass."""
    c, shown, limit, at_least = NEAR[name]
    text = detail(c)
    value, threshold = _figure(text, shown), _figure(text, limit)
    assert (value >= threshold if at_least else value <= threshold) is False, text


def test_digits_keep_a_figure_on_its_side():
    assert digits([89.6], 90, at_least=True, least=3) == 3
    n = digits([89.9996], 90, at_least=True, least=3)
    assert float(f"{89.9996:.{n}g}") < 90 and f"{90:.{n}g}" == "90"
    assert digits([90.0], 90, at_least=True) == 2  # on the threshold passes, as printed
    assert digits([math.nan, 1.2], 1.1, at_least=False) == 2


def test_a_run_with_two_restarts_is_advised_four():
    cfg, result = reported(RUN, searched(fit_rows()))
    assert cfg.train.restarts == 2
    c = check(result, "search")
    assert not c.passed and "raise --restarts above 2" in detail(c)
    assert "(2 or more)" not in detail(c)
    assert result.decision.next.changes == (design.Change("train.restarts", 2, 4),)
    words = shlex.split(result.decision.next.command)
    assert [words[i + 1] for i, w in enumerate(words) if w == "--restarts"] == ["4"]
    line = status_line(result)[1]
    assert "--restarts 4" in line and "--restarts 2" not in line


def test_the_next_command_parses_and_moves_each_setting_past_the_run():
    """Three checks fail (converged, search, replicates): the next command is the run's own,
    its other flags kept in order, with steps, restarts and seeds raised; the command line
    parses it to the run's config with those three changed and nothing else."""
    # two seeds, the steps given as --steps=64, and --fresh, which the next run must not repeat
    words = [*RUN[:9], "2", *RUN[10:]]
    at = words.index("--steps")
    words[at : at + 2] = ["--steps=64", "--fresh"]
    cfg, result = reported(words, searched(fit_rows(seeds=2, unconverged=8)))
    failed = [c.name for c in result.decision.failed]
    assert {"converged", "search", "replicates"} <= set(failed)
    command = shlex.split(result.decision.next.command)
    assert command[:2] == ["blocklab", "demo"] and "--fresh" not in command
    assert not any(w.startswith("--steps=") for w in command)
    new = configured(command[1:])
    assert (new.train.steps, new.train.restarts) == (128, 4)
    assert new.seeds >= design.MIN_REPLICATES > cfg.seeds
    same = dataclasses.replace(new, seeds=cfg.seeds, train=cfg.train)
    assert same == cfg  # nothing else moved
    kept = [w for w in command[2:] if w in words]
    assert kept[:6] == words[1:7]  # the budgets and the width as given


def test_without_a_command_line_the_command_is_built_from_the_config():
    """A run from `blocklab.run` (or with no record) gets `blocklab WORDS` and a flag for each
    setting off the defaults: the command line builds exactly the changed config from it."""
    cfg = configured(RUN)
    trials = DegreeSweepTrials(fit_rows(unconverged=10), [], {})
    for recorded, words in [("blocklab.api.run('demo', ...)", "demo"), (None, EXPERIMENT)]:
        result = degree_report.analyze(cfg, trials, recorded).capacity
        command = shlex.split(result.decision.next.command)
        assert command[:2] == ["blocklab", words]
        assert configured(command[1:]) == replaced(cfg, result.decision.next.changes)


def test_an_inconclusive_run_is_told_the_seeds_the_power_calculation_asks_for():
    rows = _rows(seeds=3, noise=0.15)
    cfg = configured([*ADAM, "--seeds", "3"])
    run = Invocation(cfg, "blocklab " + shlex.join([*ADAM, "--seeds", "3"]), EXPERIMENT)
    result = capacity.analyze(
        rows, _choice(), list(BUDGETS), tol=0.03, n_boot=200, paired=compare(rows), width=8,
        run=run,
    )  # fmt: skip
    d = result.decision
    assert d.outcome is capacity.Outcome.INCONCLUSIVE and d.units_for_3pct > 3
    (change,) = d.next.changes
    assert change.key == "seeds" and change.new * cfg.teachers >= d.units_for_3pct
    assert configured(shlex.split(d.next.command)[1:]).seeds == change.new
    assert f"--seeds {change.new}" in status_line(result)[1]


def test_moved_widths_hand_the_shapes_to_the_depths():
    """The budget solver moved a width: the next run gives no budgets (every arm at --width
    on --depths) and drops --budget-tol, which only budgets read."""
    words = [*ADAM, "--budget-tol", "0.1", "--seeds", "6"]
    cfg = configured(words)
    rows = _rows(moved=("d=3", 1000))
    run = Invocation(cfg, "blocklab " + shlex.join(words), EXPERIMENT)
    result = capacity.analyze(
        rows, _choice(), list(BUDGETS), tol=0.03, n_boot=200, paired=compare(rows), width=8,
        run=run,
    )  # fmt: skip
    assert [c.name for c in result.decision.failed] == ["width_matched"]
    command = shlex.split(result.decision.next.command)
    assert "--budget-tol" not in command
    new = configured(command[1:])
    assert new.budgets == () and new.depths == cfg.depths and new.shape.width == 8


# the synthetic fits' design in a config file, so that a short command runs it
TOML = """budgets = [1000, 2000, 4000, 8000]
n_boot = 50
ladder = "off"
[shape]
width = 8
[train]
restarts = 2
steps = 64
"""


def _page(run_dir, words):
    """A run directory as the command writes it: run.json, report.md with its status, the
    page; returns the report, the status line and the page's text."""
    run_dir.mkdir()
    cfg = configured(words)
    command = "blocklab " + shlex.join(words)
    RunDir(run_dir).write_record("degree_sweep", command, config_json(cfg))
    report = degree_report.write(run_dir, cfg, DegreeSweepTrials(fit_rows(unconverged=10), [], {}))
    RunDir(run_dir).write_record("degree_sweep", command, config_json(cfg), report.status.as_json())
    markdown.put_status(report.path, report.status)
    return report, report.status.line, html.write(run_dir, []).read_text()


def test_the_page_and_the_terminal_point_where_the_next_command_is(tmp_path, monkeypatch):
    """The status line leads the page and ends the terminal: it says no "above" or "below".
    Short, it holds the next command; too long for one line, the changes alone, and the whole
    command stands with the design checks, on the page and in the terminal."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text(TOML)
    _, line, page = _page(tmp_path / "short", ["demo", "--config", "c.toml"])
    assert line == (
        "NO VERDICT: design checks failed: converged; to change: blocklab demo --config c.toml "
        "--steps 128"
    )
    assert len(line) <= STATUS_WIDTH
    banner = page.index('<p class="status no-verdict">')
    assert (
        banner
        < page.index("blocklab demo --config c.toml --steps 128")
        < page.index("Design checks")
    )
    out = "runs/" + "a-long-run-directory-name" * 3
    report, line, page = _page(tmp_path / "long", ["demo", "--config", "c.toml", "--out", out])
    assert line.endswith("; to change: rerun with --steps 128")
    assert len(line) <= STATUS_WIDTH
    command = f"blocklab demo --config c.toml --out {out} --steps 128"
    checks = page.index("Design checks")
    assert page.index('<p class="status no-verdict">') < checks < page.index(command, checks)
    text = "\n".join(report.text)
    assert text.index("design checks:") < text.index("next command") < text.index(f"--out {out}")
    assert command in text.replace(" \\\n    ", " ")  # continued lines read as one
    assert not re.search(r"\b(above|below)\b", line)


def test_task_options_on_the_default_task_change_its_defaults_one_by_one():
    """The demo's target is the teacher task with options of its own (`DegreeSweepConfig`): a
    --task-option changes one of them and keeps the rest; on another task the flags are all."""
    defaults = DegreeSweep.Config.demo().task_options
    one = configured(["demo", "--task-option", "n_in=3"])
    assert one.task_options == {**defaults, "n_in": "3"}  # read by the task's own options
    other = configured(["demo", "--task", "poly_target", "--task-option", "n_in=3"])
    assert other.task_options == {"n_in": "3"}
    # and the demo's own design is its form's, which degree-sweep's defaults are not
    demo, quick = configured(["demo"]), configured(["degree-sweep"])
    assert demo == DegreeSweep.Config.demo() and quick == DegreeSweep.Config()
    from blocklab.experiments.degree_sweep.config import DEMO_TEACHERS

    assert (demo.teachers, demo.seeds, other.teachers, other.seeds) == (DEMO_TEACHERS, 1, 1, 3)


def test_the_status_gives_the_next_run_as_keywords_that_run_takes(tmp_path, monkeypatch):
    """`status.next`: the changes of the next command as `blocklab.api.run`'s keywords (the flags'
    names), the config they make the one the next command runs; empty with nothing to change."""
    from blocklab import api

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text(TOML)
    report, line, _ = _page(tmp_path / "short", ["demo", "--config", "c.toml"])
    following = report.status.as_json()["next"]
    assert following == {"steps": 128} and line.endswith("--steps 128")
    found, _ = launch.find("demo")
    cfg = launch.resolve(found, "demo", None, tmp_path / "c.toml", api._given(found, following))
    assert cfg == configured(["demo", "--config", "c.toml", "--steps", "128"])
    assert Status(True, "VERDICT: x").as_json()["next"] == {}

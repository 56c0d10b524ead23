"""`blocklab.run` (served from `blocklab.api`): an experiment from Python runs the command's path
(the same config checks, store, run.json, report and page) and returns what `--json` prints,
status line included; and the status line itself, one rule for every report."""

from __future__ import annotations

import json

import pytest

from blocklab import load_runs
from blocklab.api import run
from blocklab.cli import main
from blocklab.errors import UserError
from blocklab.formatting import wrapped
from blocklab.reports import Status

# a tiny Adam sweep: two degrees, two budgets, two seeds of 4 steps on the teacher's small splits;
# what these tests read is that the call and the command make and say the same run, not its numbers
TINY = dict(
    optimizer="adam",
    degrees=("2", "3"),
    baselines=(),
    budgets=(40, 80),
    seeds=2,
    steps=4,
    lr_grid=(1e-2,),
    lr_extend=0,
    task_options={"n_train": 256, "n_val": 64, "n_test": 128},
    workers=1,
    n_boot=20,  # the intervals' width is not what these tests read
)
# TINY as the command line gives it
FLAGS = ["--optimizer", "adam", "--degrees", "2", "3", "--baselines", "--budgets", "40", "80"]
FLAGS += ["--seeds", "2", "--steps", "4", "--lr-grid", "1e-2", "--lr-extend", "0"]
FLAGS += ["--task-option", "n_train=256", "--task-option", "n_val=64"]
FLAGS += ["--task-option", "n_test=128", "--workers", "1", "--n-boot", "20"]


@pytest.mark.slow
def test_run_returns_what_the_command_prints_and_writes_the_same_run(tmp_path, capsys):
    out = tmp_path / "run"
    payload = run("degree-sweep", out=out, **TINY)
    # run.json records the call with its arguments
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["command"].startswith("blocklab.api.run('degree-sweep', out=")
    assert all(f"{k}={v!r}" in recorded["command"] for k, v in TINY.items() if k != "workers")
    assert recorded["status"] == payload["status"]
    assert f"**{payload['status']['line']}**" in (out / "report.md").read_text().splitlines()[:3]
    assert (out / "index.html").is_file() and payload["page"] == str(out / "index.html")
    # the command's words in the same directory: the same config makes the same trial ids, so it
    # finds every trial the call stored and fits none again
    stored = sorted(load_runs(out)["finished_at"])
    assert main(["degree-sweep", "--out", str(out), *FLAGS, "--quiet", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert sorted(load_runs(out)["finished_at"]) == stored
    assert sorted(payload) == sorted(printed)
    assert payload["config"] == printed["config"] and payload["arms"] == printed["arms"]
    # two budgets and two seeds are too few for a verdict: the status says so, first and everywhere
    keys = ("verdict", "line", "next")
    assert {k: payload["status"][k] for k in keys} == {k: printed["status"][k] for k in keys}
    assert payload["status"]["verdict"] is False
    # the page's banner: the same status; its next command each route's own (a Python call's is
    # rebuilt from its config, a command's from its own words)
    api, cli = payload["status"]["banner"], printed["status"]["banner"]
    assert (api["head"], api["beside"]) == (cli["head"], cli["beside"])
    assert api["command"].startswith("blocklab degree-sweep ")
    assert payload["status"]["line"].startswith("NO VERDICT: ")
    assert "to change: " in payload["status"]["line"]
    # the next run's changes as run()'s own keywords: the seeds the replicates check asks for
    following = payload["status"]["next"]
    assert following["seeds"] > TINY["seeds"]
    failed = {c["name"] for c in payload["design_checks"] if not c["passed"]}
    assert "replicates" in failed
    # both counts and the exact measures, under the JSON contract's names
    assert payload["count"] == "nominal"
    assert payload["multipliers"] == payload["multipliers_nominal"]
    assert set(payload["multipliers_functional"]) == {"d=2", "d=3"}
    for arm in ("d=2", "d=3"):
        assert set(payload["exact"][arm]) >= {
            "separation_rank_per_param",
            "functional_dimension_per_param",
        }
        for cell in payload["arms"][arm]["budgets"].values():
            assert 0 < cell["functional_params"] < cell["block_params"]
    # the terminal prints the status line last, wrapped at its columns where it is longer
    assert main(["degree-sweep", "--out", str(out), *FLAGS]) == 0
    assert capsys.readouterr().out.rstrip().endswith(wrapped(payload["status"]["line"]))


def test_the_package_serves_run_without_importing_the_top_layer_first():
    import subprocess
    import sys

    import blocklab
    import blocklab.api

    assert blocklab.run is blocklab.api.run and "run" in dir(blocklab)
    # `import blocklab` alone loads no layer above its own: run arrives on first use
    script = "import sys, blocklab; print('blocklab.api' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_run_checks_the_config_as_the_command_line_does(tmp_path):
    with pytest.raises(UserError, match="did you mean 'steps'"):
        run("degree-sweep", out=tmp_path, step=5)
    with pytest.raises(UserError, match="restarts is not used"):  # a nested table given whole
        run("degree-sweep", out=tmp_path, train={"optimizer": "adam", "restarts": 2})
    # a shape key, flat as its flag or in its table, lands in the shape the checks read
    with pytest.raises(UserError, match="shape.width is not used"):
        run("degree-sweep", out=tmp_path, mode="depth", budgets=(800,), width=8)
    with pytest.raises(UserError, match="shape.scaled_residual is not used"):
        run("degree-sweep", out=tmp_path, shape={"residual": False, "scaled_residual": True})
    with pytest.raises(UserError, match="did you mean 'degree-sweep'"):
        run("degree-swep", out=tmp_path)
    with pytest.raises(UserError, match="budget"):
        run("degree-sweep", out=tmp_path, budgets=(0,))
    with pytest.raises(UserError, match="no 'huge' form"):
        run("degree-sweep", out=tmp_path, form="huge")
    assert not any(tmp_path.iterdir())  # nothing written before the config resolved


def test_a_verdict_reads_as_its_first_sentence_and_a_refusal_as_its_reason():
    said = Status.of_verdict("d=3 is the most parameter-efficient arm. Parameters ...", "x")
    assert said == Status(True, "VERDICT: d=3 is the most parameter-efficient arm")
    refused = Status.of_verdict(None, "design checks failed: plateau")
    assert refused.as_json() == {
        "verdict": False,
        "line": "NO VERDICT: design checks failed: plateau",
        "next": {},
        "next_cost": {"core_seconds": None, "reason": "no next command: nothing to change"},
    }


def test_findings_sum_up_in_one_line_led_by_the_tally_of_their_verdicts():
    findings = [{"part": f"p{i}", "verdict": "agrees"} for i in range(5)]
    assert Status.of_findings(findings).line == "FINDINGS: 5 findings: 5 agrees"
    assert Status.of_findings([]).line == "FINDINGS: none"
    # the commonest first; a verdict one finding alone holds names that finding
    findings += [{"part": "p5", "verdict": "differs"}, {"part": "p6", "verdict": "differs"}]
    findings.append({"part": "fit", "setting": "3 points", "model": "mlp", "verdict": "b > 0"})
    line = Status.of_findings(findings).line
    assert line == "FINDINGS: 8 findings: 5 agrees; 2 differs; fit 3 points model=mlp: b > 0"
    alone = [{"part": f"p{i}", "verdict": f"v{i}"} for i in range(5)]
    line = Status.of_findings(alone, shown=2).line
    assert line == "FINDINGS: 5 findings: p0: v0; p1: v1; 3 more, each with a verdict of its own"
    assert Status.of_findings(alone[:1]).line == "FINDINGS: 1 finding: p0: v0"
    # findings without a verdict: each by what was measured, labelled by where it belongs
    measured = [{"q": q, "measured": f"m = {2 * q}"} for q in (1, 2, 4, 8)]
    line = Status.of_findings(measured).line
    assert line == "FINDINGS: 4 findings: q=1: m = 2; q=2: m = 4; q=4: m = 8; and 1 more"


def test_plan_prices_a_run_from_python_as_plan_does_and_fits_nothing(tmp_path):
    import blocklab

    given = dict(
        out=tmp_path / "x", seeds=1, degrees=["2"], baselines=[], depths=[1, 2], steps=8,
        warm_start=20, task_options={"n_train": 256, "n_val": 64, "n_test": 256},
    )  # fmt: skip
    planned = blocklab.plan("degree-sweep", **given)
    assert planned["trials_new"] > 0 and planned["trials_stored"] == 0
    assert planned["units"] == 1 and planned["teachers"] == 1 and planned["seeds"] == 1
    assert not (tmp_path / "x").exists()  # nothing fitted, nothing written
    # an experiment that prices nothing is refused, as --plan is
    with pytest.raises(UserError, match="no plan"):
        blocklab.plan("seprank degree", out=tmp_path / "y")

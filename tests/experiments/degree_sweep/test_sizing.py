"""A degree run sized to a resolution (`--target-resolution`, `--plan`): the power calculation of
`degree_sweep.analysis.pilot` on recorded spreads, where they come from, what a plan costs, and the
claims a sized run's JSON gains."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from test_ladder import TINY

from blocklab import load_rungs
from blocklab.cli import main
from blocklab.errors import UserError
from blocklab.experiments.degree_sweep import DegreeSweepConfig, sizing
from blocklab.experiments.degree_sweep.analysis import coverage
from blocklab.experiments.degree_sweep.sizing import Spreads, plan_command
from blocklab.experiments.degree_sweep.sizing import size as size_run
from blocklab.experiments.degree_sweep.sizing import size_for as size
from blocklab.sample_size import units_for

DEMO = DegreeSweepConfig.demo()


def _spreads(widest=0.3, units=3, df=2.0, cost=100.0):
    return Spreads(widest, units, df, 0.95, cost, "planted")


def test_the_plan_is_the_one_power_calculation_in_whole_teachers():
    plan = size(_spreads(), 0.1, seeds=2, arms=3)
    need = units_for(0.3, 3, 0.1, df=2.0)
    assert plan.teachers == math.ceil(need / 2) and plan.units == 2 * plan.teachers
    assert plan.core_seconds == pytest.approx(plan.units * 100.0)
    assert plan.trials == plan.units * 3
    # no more cores work at once than there are trials
    assert plan.seconds(10_000) == pytest.approx(plan.core_seconds / plan.trials)
    assert plan.seconds(2) == pytest.approx(plan.core_seconds / 2)
    # a finer resolution needs more units; an unbounded interval sizes nothing
    assert size(_spreads(), 0.03, 2).units > plan.units
    assert size(_spreads(widest=math.inf), 0.1, 1).units is None
    assert set(plan.json()) == {
        "target", "units", "units_low", "units_high", "teachers", "seeds", "core_seconds",
        "gpu_seconds",
    }  # fmt: skip
    # the units' interval from the spread's own uncertainty (3 units: df 2) holds the point
    assert plan.json()["units_low"] < plan.units < plan.json()["units_high"]


def test_the_demos_design_is_sized_from_its_recorded_run(tmp_path):
    cfg = dataclasses.replace(DEMO, target_resolution=0.1)
    sized, plan = size_run(cfg, tmp_path)
    demo = sizing.DEMO_SPREADS
    need = units_for(demo["widest"], demo["units"], 0.1, df=demo["df"])
    assert sized.teachers == plan.teachers == need and plan.spreads.source == demo["source"]
    # more iterations a rung is the same design, sized by the demo's teachers recorded at its
    # own iterations where there is such a run (2,048), else by the demo's
    steps = lambda n: dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=n))  # noqa: E731
    assert size_run(steps(1024), tmp_path)[0].teachers == need
    at = sizing.RECORDED_SPREADS[2048]
    longer, plan = size_run(steps(2048), tmp_path)
    assert longer.teachers == units_for(at["widest"], at["units"], 0.1, df=at["df"])
    assert plan.spreads.source == at["source"] and longer.teachers != need
    # more chains: the same size, at the cost per unit measured at them, else scaled by them
    def chained(n):
        train = dataclasses.replace(longer.train, restarts=n)
        return size_run(dataclasses.replace(steps(2048), train=train), tmp_path)

    four, at_four = chained(4)
    assert four.teachers == longer.teachers
    assert at_four.spreads.core_seconds_per_unit == at["cost_by_chains"]["4"]
    eight, at_eight = chained(8)
    assert eight.teachers == longer.teachers
    assert at_eight.core_seconds == pytest.approx(4 * plan.core_seconds)
    assert "scaled from 2 chains to 8" in at_eight.spreads.source
    # another width is not the same design, and is not sized
    wider = dataclasses.replace(cfg, shape=dataclasses.replace(cfg.shape, width=4))
    with pytest.raises(UserError, match="holds none"):
        size_run(wider, tmp_path)


def _record(out, cfg, widest, units, teachers, df):
    entry = {"design": sizing.design(cfg), "widest": widest, "units": units,
             "teachers": teachers, "df": df, "level": 0.95, "core_seconds_per_unit": 50.0,
             "source": "the run in out"}  # fmt: skip
    (out / sizing.SPREADS_FILE).write_text(json.dumps(entry))


def test_a_run_in_out_sizes_it_and_a_run_never_shrinks(tmp_path):
    cfg = dataclasses.replace(DEMO, target_resolution=0.1)
    _record(tmp_path, cfg, widest=0.2, units=5, teachers=5, df=4)
    sized, plan = size_run(cfg, tmp_path)
    assert plan.spreads.source == "the run in out"
    assert sized.teachers == units_for(0.2, 5, 0.1, df=4)
    # a run of 30 teachers already narrower than needed keeps them all
    _record(tmp_path, cfg, widest=0.02, units=30, teachers=30, df=29)
    assert size_run(cfg, tmp_path)[0].teachers == 30
    # teachers given on the command line stay as given; the plan still says what R needs
    pinned, plan = size_run(dataclasses.replace(cfg, teachers=7), tmp_path, pinned=True)
    assert pinned.teachers == 7 and plan.teachers == units_for(0.02, 30, 0.1, df=29)
    # a record written before chains left the design (its train holds them) is still read
    _record(tmp_path, cfg, widest=0.2, units=5, teachers=5, df=4)
    entry = json.loads((tmp_path / sizing.SPREADS_FILE).read_text())
    entry["design"]["train"]["restarts"] = cfg.train.restarts
    (tmp_path / sizing.SPREADS_FILE).write_text(json.dumps(entry))
    assert size_run(cfg, tmp_path)[1].spreads.source == "the run in out"
    # a record of another design is not read
    other = dataclasses.replace(cfg, depths=(1, 2, 4))
    _record(tmp_path, other, widest=0.2, units=5, teachers=5, df=4)
    assert size_run(cfg, tmp_path)[1].spreads.source == sizing.DEMO_SPREADS["source"]


def test_plan_prints_the_plan_alone_and_fits_nothing(tmp_path, capsys):
    out = tmp_path / "p"
    argv = ["demo", "--target-resolution", "0.1", "--plan", "--json", "--out", str(out)]
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    assert list(got) == ["plan"]
    plan = got["plan"]
    contract = {"units", "teachers", "seeds", "core_seconds", "gpu_seconds", "trials_new"}
    contract |= {"trials_stored", "continued", "refit", "kept", "units_low", "units_high"}
    assert contract <= set(plan)
    assert plan["units"] == plan["teachers"] * plan["seeds"] and plan["core_seconds"] > 0
    assert plan["units_low"] <= plan["units"] <= plan["units_high"]
    assert not (out / "blocklab.sqlite").exists()
    assert main([*argv[:-3], "--out", str(out)]) == 0  # the words: each way to run it
    text = capsys.readouterr().out
    assert "--executor ray" in text and "--executor slurm" in text and "--device cuda" in text


def test_plan_without_a_resolution_prices_the_run_as_its_config_gives_it(tmp_path, capsys):
    assert main(["demo", "--plan", "--json", "--out", str(tmp_path / "p")]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["teachers"], plan["seeds"]) == (DEMO.teachers, DEMO.seeds)
    assert "units_low" not in plan and plan["trials_stored"] == 0 and plan["core_seconds"] > 0
    assert not (tmp_path / "p").exists()


def test_the_plans_command_sets_what_it_sized():
    plan = size(_spreads(), 0.1, seeds=1)
    words = ["blocklab", "demo", "--teachers", "3", "--seeds=1", "--plan", "--json", "--quiet"]
    got = plan_command(words, plan)
    assert got[:3] == ["blocklab", "demo", "--quiet"]
    assert got[3:] == ["--target-resolution", "0.1", "--teachers", str(plan.teachers),
                       "--seeds", "1"]  # fmt: skip


def test_a_finished_run_records_its_spreads_and_a_pinned_rerun_words_its_claims(
    ladder_run, tmp_path, capsys
):  # fmt: skip
    out = ladder_run.copy(tmp_path / "run")  # TINY's run (conftest), to run again in
    first = ladder_run.printed
    assert "claims" not in first  # only a sized run's JSON words its claims
    entry = json.loads((out / sizing.SPREADS_FILE).read_text())
    design = entry["design"]  # the run's config less its size and reading
    assert design["shape"]["width"] == 4 and design["degrees"] == ["2", "3"]
    assert not set(sizing.NOT_DESIGN) & set(design) and "steps" not in design["train"]
    assert entry["units"] == 3 and entry["teachers"] == 1
    stored = sorted(load_rungs(out)["finished_at"])
    again = ["degree-sweep", "--out", str(out), "--json", *TINY, "--teachers", "1"]
    assert main([*again, "--target-resolution", "0.5"]) in (0, 1)
    second = json.loads(capsys.readouterr().out)
    assert second["status"]["line"] == first["status"]["line"]
    claims = second["claims"]
    assert [c["quantity"] for c in claims] == ["m(d=2)"] * len(claims)  # d=4 did not run
    assert {c["word"] for c in claims} <= {"supported", "refuted", "undecided",
                                            "no constant multiplier"}  # fmt: skip
    assert {c["count"] for c in claims} <= {"nominal", "functional"}
    assert sorted(load_rungs(out)["finished_at"]) == stored  # nothing fitted again


def test_the_sized_coverage_simulation_sizes_from_its_first_units():
    rows = coverage.simulate_sized("pilot", 3, 0.1, 12, sigma=1.0, replications=3, seed=1)
    assert {r.quantity for r in rows} == set(coverage.SIZED)
    # noisy units need more than 3 teachers for +-10%: the rule grows the run, up to its cap
    assert rows[0].units_median > 3 and rows[0].units_max <= 12
    fixed = coverage.simulate_sized("fixed", 4, 0.1, 4, sigma=0.1, replications=2)
    assert fixed[0].units_median == 4 and all(0 <= r.coverage <= 1 for r in fixed)

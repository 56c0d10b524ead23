"""A run's plan before it runs (`engine.pricing`, the degree sweep's price hook): its trials met
with the store as a sweep meets them, priced from the store's own fits where it holds the same
networks, and the next command a report proposes priced by the same plan."""

from __future__ import annotations

import contextlib
import io
import json
import math
import shlex
from dataclasses import replace

import pytest
from test_ladder import TINY

from blocklab.cli import main
from blocklab.engine import pricing as engine_pricing
from blocklab.experiments.degree_sweep import pricing
from blocklab.experiments.degree_sweep.config import DegreeSweepConfig
from blocklab.fitting import continuation
from blocklab.frames import rung_records
from blocklab.launch import resolve
from blocklab.sample_size import units_for, units_interval, variance_factor
from blocklab.store import DB_NAME, Store

pytestmark = pytest.mark.slow  # the shared ladder run


def _plan(out, *more) -> dict:
    printed = io.StringIO()
    argv = ["degree-sweep", *TINY, *more, "--out", str(out), "--plan", "--json"]
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    return json.loads(printed.getvalue())["plan"]


def _cfg(*more):
    from blocklab.cli.experiment import flags
    from blocklab.cli.main import build_parser

    args = build_parser().parse_args(["degree-sweep", *TINY, *more])
    from blocklab.experiments.degree_sweep.experiment import DegreeSweep

    return resolve(DegreeSweep, "degree-sweep", None, None, flags(DegreeSweep, args))


def test_a_finished_run_plans_nothing_new_and_prices_its_next_command_as_plan_does(ladder_run):
    plan = _plan(ladder_run.out)
    stored = len({r["id"] for r in Store(ladder_run.out / DB_NAME, read_only=True).records()})
    assert (plan["trials_new"], plan["trials_stored"], plan["core_seconds"]) == (0, stored, 0.0)
    # the contract's keys, each of its type
    for key in ("units", "teachers", "seeds", "trials_new", "trials_stored"):
        assert isinstance(plan[key], int)
    for key in ("continued", "refit", "kept"):
        assert isinstance(plan[key], int)
    assert plan["units"] == plan["teachers"] * plan["seeds"] == 3
    # the status's next command costs what --plan on that command says, from the same store
    status = ladder_run.printed["status"]
    assert set(status["next_cost"]) >= {"core_seconds", "reason"}
    command = status["banner"]["command"]
    assert command, "the tiny run proposes a next command"
    # the next command whole, as the status gives it, with --plan
    argv = [w for w in shlex.split(command)[1:] if w != "--json"] + ["--plan", "--json"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    again = json.loads(printed.getvalue())["plan"]
    assert again["core_seconds"] == status["next_cost"]["core_seconds"]
    assert again["reason"] == status["next_cost"]["reason"]
    assert status["next_cost"]["core_seconds"] > 0
    # report.md gives the command with the same words the banner gives its cost
    assert f"its cost: {status['banner']['cost']}" in (ladder_run.out / "report.md").read_text()


def test_more_seeds_are_new_trials_priced_by_the_stored_fits_of_their_networks(ladder_run):
    store = Store(ladder_run.out / DB_NAME, read_only=True)
    records = [r for r in store.records() if r["status"] == "done"]
    plan = _plan(ladder_run.out, "--seeds", "4")
    assert plan["trials_new"] * 3 == len(records)  # one seed more of three
    assert plan["trials_stored"] == len(records)
    # each new trial at the mean of its cell's stored seconds (same iterations and examples)
    by_cell: dict[str, list[float]] = {}
    for r in records:  # a ladder's seconds: its rungs'
        seconds = sum(rung["metrics"]["seconds"] for rung in rung_records(r))
        by_cell.setdefault(engine_pricing.cell(r["config"]), []).append(seconds)
    expected = sum(sum(v) / len(v) for v in by_cell.values())
    assert plan["core_seconds"] == pytest.approx(expected, abs=0.1)
    assert plan["basis"].startswith("measured") and not plan["upper_bound"]
    assert plan["gpu_seconds"] < plan["core_seconds"]


# a ladder continues a stored one where the doubling schedule of its checks opens on the stored
# one's (`continuation.opens`): from 128 iterations, not from the ladder run's 8
LONGER = ["--seeds", "1", "--steps", "128", "--degrees", "2"]


@pytest.fixture(scope="module")
def longer_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("priced") / "longer"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["degree-sweep", *TINY, *LONGER, "--out", str(out)]) in (0, 1)
    return out


def test_more_iterations_continue_the_stored_ladders_fit_by_fit(longer_run):
    plan = _plan(longer_run, *LONGER, "--steps", "256")
    store = Store(longer_run / DB_NAME, read_only=True)
    cfg = _cfg(*LONGER, "--steps", "256")
    specs = pricing.planned(cfg)
    ladders = [s for s in specs if continuation.key(s) is not None]
    assert plan["trials_continued"] == len(ladders) > 0
    assert plan["trials_new"] == len(specs) - len(ladders)  # the referees fit afresh
    assert plan["trials_stored"] == 0
    # the counts the run itself says as it continues (`continuation.actions` on each fit state)
    met = engine_pricing.meet(specs, store)
    said = {continuation.KEPT: 0, continuation.CONTINUED: 0, continuation.REFIT: 0}
    for spec in ladders:
        for row in continuation.actions(continuation.unpack(met.parents[spec.id].blob), spec.train):
            for action in row:
                said[action] += 1
    assert (plan["continued"], plan["refit"], plan["kept"]) == (
        said[continuation.CONTINUED],
        said[continuation.REFIT],
        said[continuation.KEPT],
    )
    assert sum(said.values()) == len(ladders) * 2 * 2  # two rungs of two chains each
    assert plan["core_seconds"] >= 0 and plan["basis"].startswith("measured")


def test_a_plan_that_adds_iterations_says_what_the_stores_earlier_continuation_changed(
    longer_run, tmp_path
):
    out = tmp_path / "continued"
    import shutil

    shutil.copytree(longer_run, out)
    assert "earlier continuation" not in str(_plan(out, *LONGER, "--steps", "256")["note"])
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["degree-sweep", *TINY, *LONGER, "--steps", "256", "--out", str(out)]) in (0, 1)
    plan = _plan(out, *LONGER, "--steps", "512")
    assert plan["trials_continued"] > 0
    assert "earlier continuation, from 128 to 256 iterations" in plan["note"]
    assert "median" in plan["note"] and "certified fits" in plan["note"]


def test_an_empty_directory_of_a_new_design_says_why_it_has_no_price(tmp_path, ladder_run):
    cfg = _cfg()
    plan = pricing.price(cfg, tmp_path, time_here=False)
    assert plan.trials_new == len({s.id for s in pricing.planned(cfg)}) and plan.trials_stored == 0
    assert plan.core_seconds is None and "never fitted" in plan.reason
    assert plan.cost() == {**plan.cost(), "core_seconds": None, "reason": plan.reason}
    # planted: a plan that never met the store counts the finished run's trials as new
    blind = engine_pricing.price_specs(pricing.planned(cfg), None, time_here=False)
    seen = pricing.price(cfg, ladder_run.out, time_here=False)
    assert blind.trials_new > 0 and seen.trials_new == 0


def test_the_demo_prices_from_its_recorded_run_where_no_store_holds_its_networks(tmp_path):
    plan = pricing.price(DegreeSweepConfig.demo(), tmp_path, time_here=False)
    assert plan.basis.startswith("recorded") and plan.core_seconds > 0
    assert plan.trials_new == len({s.id for s in pricing.planned(DegreeSweepConfig.demo())})


def test_the_units_a_resolution_needs_come_with_their_interval():
    # two degrees of freedom: the variance's 95% interval spans a factor of about 150
    assert variance_factor(2) == pytest.approx(146, rel=0.01)
    assert variance_factor(30) < 3
    point = units_for(0.39, 6, 0.1, 3.0)
    low, high = units_interval(0.39, 6, 0.1, 3.0)
    assert low < point < high and high / low > 10
    # the same spread measured on many more units: a narrow interval around the same point
    low2, high2 = units_interval(0.39 * math.sqrt(6 / 60), 60, 0.1, 59.0)
    assert low2 <= units_for(0.39 * math.sqrt(6 / 60), 60, 0.1, 59.0) <= high2
    assert high2 / low2 < 3
    assert units_interval(0.39, 6, 0.1, math.inf) is None  # a bootstrap's spread: no chi-square


def test_the_plan_json_of_a_sized_run_carries_the_units_interval(tmp_path):
    printed = io.StringIO()
    argv = ["demo", "--out", str(tmp_path), "--target-resolution", "0.1", "--plan", "--json"]
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    plan = json.loads(printed.getvalue())["plan"]
    assert plan["units_low"] <= plan["units"] <= plan["units_high"]
    assert plan["trials_new"] > 0 and plan["core_seconds"] > 0
    cfg = replace(DegreeSweepConfig.demo(), teachers=plan["teachers"])
    assert plan["trials_new"] == len({s.id for s in pricing.planned(cfg)})

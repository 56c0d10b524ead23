"""Every experiment that trains prices a run before it runs (`--plan`): the trials its config
plans, met with the store in --out (new, or stored and kept), and their cost from the store's
measured trials, the timings file's run of the very config, or the networks timed here. The
store is planted (records of the planned trials, by this code) or, once, written by a tiny run;
nothing here times a network but the one check that timing runs (`_adam_timed`)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from blocklab.cli import main
from blocklab.engine import pricing
from blocklab.engine.trial import code_modules
from blocklab.experiments import (
    _pricing,
    collapse,
    depth_width,
    mad,
    needle,
    sanford_match,
    sanford_qsa,
)
from blocklab.fingerprint import code
from blocklab.fitting.timing import AdamCosts
from blocklab.specs import TrainConfig
from blocklab.store import DB_NAME, Store

SHORT = TrainConfig(steps=4, batch_size=16, eval_points=2)
CHEAP = 10.0  # core-seconds each new trial is timed at here (`_adam_timed`, replaced)
PLANTED = 2.0  # the seconds a planted trial took, which prices the new trials of its networks

# each experiment at a size whose plan a test counts by hand: (config, trials it plans)
TINY = {
    "collapse": (
        collapse.CollapseConfig(depth=2, width=8, seq_len=8, n_train=128, seeds=2,
                                variants=("pure", "skip"), train=SHORT),
        2 * 2,  # variants x seeds
    ),
    "sanford qsa": (
        sanford_qsa.QsaConfig(qs=(1,), dims=(2,), seq_len=6, n_train=128, seeds=2, train=SHORT),
        2 * 2,  # attention and fully connected x seeds
    ),
    "needle": (
        needle.NeedleConfig(seq_lens=(4,), tau1s=(3.0,), draws=4, samples=8,
                            trained_seq_lens=(8,), seeds=2, train=SHORT),
        3 * 2,  # kernels x seeds
    ),
    "depth-width": (
        depth_width.DepthWidthConfig(depths=(1, 2), budgets=(800, 3000), seeds=2, vocab=300,
                                     seq_len=8, n_train=128, max_chars=50000, train=SHORT),
        2 * 2 * 2,  # depths x widths x seeds
    ),
    "sanford match": (
        sanford_match.MatchConfig(tasks=("match2",), widths=(6,), seeds=2, n_train=128,
                                  lr_extend=0, train=SHORT),
        # per model: the search's 3 rates, and seed 1's final (seed 0's is a search trial)
        2 * (3 + 1),
    ),
    "mad": (
        mad.MadConfig(tasks=("icr",), blocks=("softmax_attention",), levels=2, seeds=2,
                      n_train=128, budget=3000, lr_grid=(3e-3, 1e-2), lr_extend=0, train=SHORT),
        # the search's 2 rates at level 0; the finals: 2 levels x 2 seeds, less seed 0's at 0
        2 + 3,
    ),
    "mad --sweep-width": (
        dataclasses.replace(mad.MadConfig.sweep_width(), blocks=("softmax_attention",),
                            widths=(16,), sweep_pairs=(4,), sweep_seq_lens=(32,), seeds=2,
                            n_train=128, lr_extend=0, train=SHORT),
        3 + 1,  # the search's 3 rates; seed 1's final
    ),
}  # fmt: skip
# each experiment's home module: its price hook, and the function that plans its trials
HOME = {
    "collapse": (collapse.experiment, "plan"),
    "sanford qsa": (sanford_qsa.experiment, "plan"),
    "needle": (needle.experiment, "plan_trained"),
    "depth-width": (depth_width.experiment, "plan"),
    "sanford match": (sanford_match.experiment, "searched"),
    "mad": (mad.experiment, "searched"),
    "mad --sweep-width": (mad.experiment, "searched"),
}


def _specs(name: str, cfg) -> list:
    """The distinct trials a run of `cfg` fits where every search chose the grid's first rate."""
    home, planner = HOME[name]
    if planner == "searched":
        at, finals = home.searched(cfg)
        found = [f(lr) for f in at.values() for lr in cfg.lr_grid]
        found += [s for _, s in finals(dict.fromkeys(at, cfg.lr_grid[0]))]
    else:
        found = [s for _, s in getattr(home, planner)(cfg)]
    return list({s.id: s for s in found}.values())


def plant(out, specs, score=lambda spec: 0.5) -> None:
    """Each of `specs` stored finished by this code, at `PLANTED` seconds and the validation
    score `score(spec)` gives."""
    with Store(out / DB_NAME) as store:
        for spec in specs:
            store.put({
                "id": spec.id, "experiment": "planted", "status": "done", "seed": spec.seed,
                "config": spec.config(),
                "metrics": {"seconds": PLANTED, "val_metric": score(spec)},
                "provenance": {"code": code(code_modules(spec))},
            })  # fmt: skip


def plant_points(out, cfg) -> None:
    """Needle's random-weight settings stored by this code."""
    codes = code(needle.experiment.RANDOM_MODULES)
    with Store(out / DB_NAME) as store:
        for _, _, rid, config in needle.experiment.plan_random(cfg):
            store.put({"id": rid, "experiment": "needle-random", "status": "done", "seed": 0,
                       "config": config, "metrics": {}, "provenance": {"code": codes}})  # fmt: skip


@pytest.fixture
def cheap(monkeypatch):
    """Networks timed here at `CHEAP` a trial, and needle's draws at nothing, so that a plan
    says which trials it timed by its cost."""
    monkeypatch.setattr(pricing, "_adam_timed", lambda specs: CHEAP * len(specs))
    monkeypatch.setattr(needle.experiment, "_drawn", lambda cfg, settings: 0.0)


@pytest.mark.parametrize("name", list(TINY))
def test_a_plan_counts_new_then_stored_then_the_added_seeds(name, tmp_path, cheap):
    """An empty --out: every planned trial is new, timed here. The same trials stored: all kept,
    nothing to fit. One seed more: its trials are new, priced by the stored trials of their
    networks."""
    cfg, count = TINY[name]
    price = HOME[name][0].price
    plan = price(cfg, tmp_path)
    assert (plan.trials_new, plan.trials_stored) == (count, 0)
    assert plan.core_seconds == pytest.approx(CHEAP * count) and plan.basis.startswith("timed")

    specs = _specs(name, cfg)
    assert len(specs) == count
    # a search's scores best at the grid's first rate, which no tiny config extends past
    first = getattr(cfg, "lr_grid", (None,))[0]
    plant(tmp_path, specs, lambda spec: 1.0 if spec.train.lr == first else 0.5)
    if name == "needle":
        assert price(cfg, tmp_path).extra["random_settings_stored"] == 0
        plant_points(tmp_path, cfg)
    plan = price(cfg, tmp_path)
    assert (plan.trials_new, plan.trials_stored) == (0, count), plan
    assert plan.core_seconds == 0 and plan.extra["seeds"] == 2
    if name == "needle":
        assert plan.extra == {"seeds": 2, "random_settings": 1, "random_settings_stored": 1}

    more = dataclasses.replace(cfg, seeds=3)
    plan = price(more, tmp_path)
    added = len(_specs(name, more)) - count
    assert added > 0 and (plan.trials_new, plan.trials_stored) == (added, count)
    assert plan.core_seconds == pytest.approx(PLANTED * added)
    assert plan.basis.startswith("measured")


def _search_scores(best: float):
    """A planted search's validation scores: highest at `best`, lower the farther a rate is."""
    return lambda spec: 1.0 - abs(math.log(spec.train.lr / best))


def test_a_stored_search_plans_the_finals_at_the_rates_it_chose(tmp_path, cheap):
    """The search's trials stored with their best rate inside the grid: the plan reads the
    choice as the run does and plans the finals at it (seed 0's is the search's own trial);
    stored at that rate, they are kept, and the note says the searches are stored."""
    cfg, _ = TINY["sanford match"]
    at, finals = sanford_match.experiment.searched(cfg)
    plant(tmp_path, [f(lr) for f in at.values() for lr in cfg.lr_grid], _search_scores(3e-3))
    plan = sanford_match.experiment.price(cfg, tmp_path)
    assert (plan.trials_new, plan.trials_stored) == (2, 6)  # seed 1 of each model at 3e-3
    assert plan.extra["searches_to_run"] == 0 and "are stored" in plan.note
    plant(tmp_path, [s for _, s in finals(dict.fromkeys(at, 3e-3))])
    plan = sanford_match.experiment.price(cfg, tmp_path)
    assert (plan.trials_new, plan.trials_stored) == (0, 8)
    # the grid's first rate would have planned other finals: the choice is read, not assumed
    assert {s.id for _, s in finals(dict.fromkeys(at, 1e-3))} != {
        s.id for _, s in finals(dict.fromkeys(at, 3e-3))
    }


def test_a_search_at_an_edge_plans_its_next_round_and_leaves_the_finals_open(tmp_path, cheap):
    """Stored scores best at the grid's top rate, with an extension left: the search goes on
    past it (a new trial per model at the next rate), so its choice is not known yet and the
    finals are counted at the grid's first rate; the note says so."""
    cfg = dataclasses.replace(TINY["sanford match"][0], lr_extend=1)
    at, _ = sanford_match.experiment.searched(cfg)
    plant(tmp_path, [f(lr) for f in at.values() for lr in cfg.lr_grid], _search_scores(1e-2))
    plan = sanford_match.experiment.price(cfg, tmp_path)
    # per model: the next rate (3e-2) and seed 1's final at the first rate (1e-3); seed 0's final
    # at 1e-3 is a stored search trial
    assert (plan.trials_new, plan.trials_stored) == (2 * 2, 6)
    assert plan.extra["searches_to_run"] == 2 and plan.extra["search_trials"] == 2 * 4
    assert "2 of 2 learning-rate searches still to run" in plan.note
    assert "first rate (0.001)" in plan.note


def test_the_recorded_run_of_the_very_config_prices_an_all_new_plan(tmp_path, monkeypatch, cheap):
    """The timings file's run of this config (by its fingerprint) prices a plan whose every trial
    is new, its whole run again (seconds times cores); a config it did not run, or a plan with
    stored trials, is priced otherwise."""
    import blocklab.timings as timings

    cfg, count = TINY["collapse"]
    entry = {"command": "collapse", "form": "", "seconds": 30.0, "machine": {"cores": 2},
             "config_fingerprint": timings.config_fingerprint(cfg), "commit": "abc1234",
             "date": "2026-12-01", "source": "benchmarks/command_times.py"}  # fmt: skip
    monkeypatch.setattr(timings, "entries", lambda: [entry])
    plan = collapse.experiment.price(cfg, tmp_path)
    assert plan.core_seconds == 60.0 and plan.basis.startswith("recorded")
    assert "`blocklab collapse`" in plan.basis and "commit abc1234" in plan.basis
    other = collapse.experiment.price(dataclasses.replace(cfg, seeds=3), tmp_path)
    assert other.basis.startswith("timed")
    plant(tmp_path, _specs("collapse", cfg)[:1])
    partly = collapse.experiment.price(cfg, tmp_path)
    assert partly.trials_new == count - 1 and "recorded" not in partly.basis


def test_the_quick_collapse_run_is_recorded_at_its_config():
    """The package's timings file holds the quick collapse run at the config it runs now (the
    timings test holds every entry to it), so its plan in an empty --out reads it."""
    cfg = collapse.CollapseConfig()
    assert _pricing.Recorded.of(cfg, ("collapse",), 15) is not None
    assert _pricing.Recorded.of(dataclasses.replace(cfg, seeds=4), ("collapse",), 20) is None


def test_an_adam_trial_is_priced_at_its_steps_evaluations_and_wsd_branch():
    """A trial's timed parts at its steps: every step, the monitor's validation passes, the
    final validation and the test pass; under wsd the branch's decay steps and its pass too."""
    parts = AdamCosts(data=1.0, step=0.01, val=0.5, test=2.0)
    cosine = TrainConfig(steps=100, eval_points=4)  # passes at 0, 25, 50, 75, 100, and the end
    assert parts.seconds(cosine) == pytest.approx(1.0 + 100 * 0.01 + 6 * 0.5 + 2.0)
    wsd = TrainConfig(steps=100, eval_points=4, schedule="wsd", decay=0.2)
    # the branch: half the steps (50), decaying over their last fifth (10 steps), and its pass
    assert parts.seconds(wsd) == pytest.approx(1.0 + 110 * 0.01 + 7 * 0.5 + 2.0)


def test_adam_trials_are_timed_once_per_network(monkeypatch):
    """Trials of one network (seeds and rates apart) are timed once, each priced at its own
    steps; another network is timed on its own."""
    from blocklab.fitting import timing

    calls = []

    def timed(spec, *args, **kwargs):
        calls.append(spec.shape.residual)
        return AdamCosts(0.0, 0.01, 0.0, 0.0)

    monkeypatch.setattr(timing, "adam_costs", timed)
    cfg, _ = TINY["collapse"]
    specs = _specs("collapse", cfg)  # pure and skip, two seeds each
    longer = dataclasses.replace(specs[0], train=dataclasses.replace(SHORT, steps=40))
    total = pricing._adam_timed([*specs, longer])
    assert sorted(calls) == [False, True]
    assert total == pytest.approx(0.01 * (4 * 4 + 40))


def test_timing_an_adam_trial_trains_its_network_here():
    """The timed source on a real network: a token task's (ids, not floats) parts, positive."""
    cfg, _ = TINY["mad"]
    spec = _specs("mad", cfg)[0]
    parts = pricing._adam_timed([spec])
    assert parts > 0


def test_a_tiny_searched_run_leaves_nothing_its_plan_does_not_count(tmp_path, cheap, capsys):
    """One plan, no drift: after a tiny run of the match experiment (its search decided by what
    it trained), the plan of the same config keeps every stored trial and fits nothing."""
    out = tmp_path / "run"
    argv = ["sanford", "match", "--tasks", "match2", "--widths", "6", "--seeds", "2"]
    argv += ["--n-train", "128", "--steps", "4", "--batch-size", "16", "--eval-points", "2"]
    assert main([*argv, "--out", str(out), "--quiet", "--workers", "1"]) == 0
    with Store(out / DB_NAME, read_only=True) as store:
        stored = len(store.records())
    capsys.readouterr()
    assert main([*argv, "--out", str(out), "--plan", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["trials_new"], plan["trials_stored"]) == (0, stored)
    assert plan["searches_to_run"] == 0


def test_plan_is_offered_by_every_experiment_that_trains(tmp_path, cheap, capsys):
    """--plan prints the plan and fits nothing; the seprank experiments, which train nothing,
    offer none."""
    argv = ["collapse", "--depth", "2", "--width", "8", "--seq-len", "8", "--n-train", "128"]
    argv += ["--seeds", "2", "--variants", "pure", "skip", "--steps", "4"]
    assert main([*argv, "--out", str(tmp_path), "--plan"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("plan: 4 new trials to fit, 0 stored trials kept whole")
    assert not (tmp_path / DB_NAME).exists()
    assert main(["seprank", "degree", "--plan"]) == 2
    assert "unrecognized argument --plan" in capsys.readouterr().err

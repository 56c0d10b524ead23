"""Per-arm depths (`--arm-depths`): each named arm climbs depths of its own at --width, so arms of
other degrees meet at equal block counts (`preflight.meeting_words`); and the negative control
(`--control`): a second d=3 arm fitting d=3's teachers from seeds of its own, its rows paired with
d=3's by the seed they stand beside. Planned, not fitted: no test here trains."""

from __future__ import annotations

import dataclasses

import pytest

from blocklab import config as cfgmod
from blocklab.cli import build_parser
from blocklab.cli.main import main
from blocklab.errors import UserError
from blocklab.experiments.degree_sweep import DegreeSweepConfig, exact, plan, preflight, sizing
from blocklab.experiments.degree_sweep.config import CONTROL_LABEL, CONTROL_SEED_OFFSET
from blocklab.experiments.degree_sweep.networks import Networks

# at width 3 a layer costs 18 (d=2), 27 (d=3), 36 (d=4): these depths meet at 36, 72 and 108
MEETING = ("d=2:2,4,6", "d=3:1,2,4", "d=4:1,2,3")


def config(**given) -> DegreeSweepConfig:
    """The quick defaults without the mlp baseline, one teacher and seed, with `given`."""
    base = {"baselines": (), "teachers": 1, "seeds": 1}
    return DegreeSweepConfig(**{**base, **given})


def from_flags(*words: str) -> DegreeSweepConfig:
    """The config `blocklab degree-sweep WORDS` resolves, as the command resolves it."""
    args = build_parser().parse_args(["degree-sweep", *words])
    flags = cfgmod.overrides(args, DegreeSweepConfig, skip=("lr", "flatten"))
    return cfgmod.resolve(DegreeSweepConfig, DegreeSweepConfig(), None, flags, "degree-sweep")


def rungs(cfg: DegreeSweepConfig) -> dict[str, list[tuple[int, int]]]:
    """Per arm, its (depth, budget) rungs as the run plans them."""
    out: dict[str, list[tuple[int, int]]] = {}
    for (budget, label), (_, shape) in plan.shapes(cfg).items():
        assert shape.block_params == budget  # a rung's budget is what it costs
        out.setdefault(label, []).append((shape.depth, budget))
    return {label: sorted(r) for label, r in out.items()}


def test_each_named_arm_climbs_its_own_depths_at_what_they_cost():
    got = rungs(config(arm_depths=MEETING, baselines=("mlp",)))
    assert got["d=2"] == [(2, 36), (4, 72), (6, 108)]  # 18 k
    assert got["d=3"] == [(1, 27), (2, 54), (4, 108)]  # 27 k
    assert got["d=4"] == [(1, 36), (2, 72), (3, 108)]  # 36 k
    assert [depth for depth, _ in got["mlp"]] == [1, 2, 4, 8]  # not named: --depths


def test_the_flag_takes_comma_lists_as_toml_does():
    # the command line splits a list flag's words at commas; the entries come back whole
    flagged = from_flags("--arm-depths", *MEETING, "--baselines")
    assert flagged.arm_depths == MEETING
    assert flagged == config(arm_depths=MEETING, teachers=1, seeds=3)
    spaced = from_flags("--arm-depths", "d=2:6, 2, 4", "--baselines")
    assert spaced.depths_by_arm()["d=2"] == (2, 4, 6)


def test_the_plan_says_where_each_pair_the_answer_compares_meets():
    said = preflight.meeting_words(config(arm_depths=MEETING, control=True, baselines=("mlp",)))
    assert "d=2/d=4 at 36, 72, 108;" in said
    assert "d=2/d=3 at 36*, 72*, 108;" in said and "d=4/d=3 at 36*, 72*, 108;" in said
    assert said.endswith(f"{CONTROL_LABEL}/d=3 at 27, 54, 108")  # it climbs d=3's depths
    assert "mlp" not in said  # the answer compares degrees only
    # one depth list for all (1, 2, 4, 8): d=3 meets the others only between its rungs
    shared = preflight.meeting_words(config())
    assert "d=2/d=4 at 36, 72, 144;" in shared and "d=2/d=3 at 36*, 72*, 144*;" in shared


def test_ladders_planned_trials_and_their_rows_read_the_arms_depths():
    cfg = config(arm_depths=MEETING, teachers=2)
    cells = plan.shapes(cfg)
    planned = plan.trials(cfg, cells, dict.fromkeys(cells, cfg.train.lr))
    assert cfg.staged and len(planned) == 3 * 2  # one ladder per (arm, teacher, seed)
    by = {(s.arm.label, s.data_seed): (keys, s) for keys, s in planned}
    keys, d2 = by[("d=2", 1)]
    assert d2.ladder == (2, 4, 6) and d2.shape.depth == 6 and d2.budget == 108
    assert keys["rungs"] == {2: 36, 4: 72, 6: 108}
    assert by[("d=4", 0)][0]["rungs"] == {1: 36, 2: 72, 3: 108}
    # fresh fits: one trial per rung at its count
    off = dataclasses.replace(cfg, ladder="off", referee=False)
    fresh = plan.trials(off, cells, dict.fromkeys(cells, cfg.train.lr))
    d3 = sorted((s.shape.depth, s.budget) for _, s in fresh if s.arm.label == "d=3")
    assert d3 == [(1, 27), (1, 27), (2, 54), (2, 54), (4, 108), (4, 108)]


def test_the_checks_before_any_fit_and_the_exact_measures_read_the_arms_depths():
    cfg = config(arm_depths=MEETING, control=True)
    cells = plan.shapes(cfg)
    nets = Networks(cfg, cells)
    assert {(label, depth) for label, depth, _ in nets.specs} == {
        (label, depth) for label, r in rungs(cfg).items() for depth, _ in r
    }
    counts = exact.functional_counts(cfg, cells, nets)
    assert set(counts) == set(cells)
    assert counts[(108, "d=2")]["params"] == 108 and counts[(27, "d=3")]["params"] == 27
    assert counts[(54, CONTROL_LABEL)] == counts[(54, "d=3")]  # the same network at seed 0
    ranks = preflight.input_ranks(cfg, cells, nets)
    assert ranks["d=2"]["depth"] in (2, 4, 6) and ranks["d=4"]["depth"] in (1, 2, 3)
    # an arm of no integer degree is measured at its own deepest rung, not --depths'
    frac = config(degrees=("2.5",), arm_depths=("d=2.5:1,3",))
    assert exact._depth_near(frac.arms()[0], frac, None) == 3


def test_the_control_fits_d3s_teachers_from_seeds_of_its_own():
    cfg = config(control=True, teachers=2, seeds=2, depths=(1, 2))
    arms = {a.label: a for a in cfg.arms()}
    control = arms[CONTROL_LABEL]
    assert dataclasses.replace(control, label="d=3") == arms["d=3"]  # d=3's block and degree
    cells = plan.shapes(cfg)
    planned = plan.trials(cfg, cells, dict.fromkeys(cells, cfg.train.lr))
    d3 = {(s.data_seed, s.seed): (k, s) for k, s in planned if s.arm.label == "d=3"}
    ctl = {(s.data_seed, s.seed - CONTROL_SEED_OFFSET): (k, s) for k, s in planned
           if s.arm.label == CONTROL_LABEL}  # fmt: skip
    assert set(ctl) == set(d3) == {(t, s) for t in range(2) for s in range(2)}
    for unit, (keys, trial) in ctl.items():
        _, twin = d3[unit]
        assert trial.seed == CONTROL_SEED_OFFSET + twin.seed and trial.id != twin.id
        assert trial.data_seed == twin.data_seed  # the same teacher
        assert trial.ladder == twin.ladder and trial.shape == twin.shape
        assert keys["seed"] == twin.seed  # its rows pair with d=3's by (teacher, seed)
        assert trial.arm.degree == 3.0
    assert not {s.id for _, s in ctl.values()} & {s.id for _, s in d3.values()}


def test_the_controls_rows_and_refits_keep_the_seed_they_stand_beside():
    cfg = config(control=True, depths=(1, 2), ladder="off", roundings=2, seeds=2)
    cells = plan.shapes(cfg)
    planned = plan.trials(cfg, cells, dict.fromkeys(cells, cfg.train.lr))
    ours = [(k, s) for k, s in planned if s.arm.label == CONTROL_LABEL]
    assert ours and all(k["seed"] == s.seed - CONTROL_SEED_OFFSET for k, s in ours)
    assert {k.get("rounding", 0) for k, s in ours if not k.get("referee")} == {0, 1}
    refits = [(k, s) for k, s in ours if k.get("referee")]
    assert refits and all(k["seed"] == 0 and s.seed == CONTROL_SEED_OFFSET for k, s in refits)
    # no other arm's rows are told their seed: theirs is the trial's own
    assert all("seed" not in k for k, s in planned if s.arm.label != CONTROL_LABEL)


def test_the_control_climbs_d3s_own_depths():
    cfg = config(control=True, arm_depths=("d=3:1,3",))
    assert cfg.depths_by_arm()[CONTROL_LABEL] == (1, 3)
    assert [d for d, _ in rungs(cfg)[CONTROL_LABEL]] == [1, 3]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"arm_depths": ("d=5:1,2",)}, "names 'd=5', no arm of this run; did you mean 'd=4'?"),
        ({"arm_depths": ("2:1,2",)}, "did you mean 'd=2'?"),
        ({"arm_depths": ("d=2:1,2,1",)}, "d=2 lists a depth twice"),
        ({"arm_depths": ("d=2:1,0",)}, "a depth is a positive integer, got '0'"),
        ({"arm_depths": ("d=2:1,x",)}, "a depth is a positive integer, got 'x'"),
        ({"arm_depths": ("d=2:1", "d=2:2")}, "names d=2 twice"),
        ({"arm_depths": ("1,2",)}, "is not LABEL:DEPTHS"),
        ({"arm_depths": ("d=2:1",), "mode": "depth", "budgets": (100,)}, "--mode width"),
        ({"arm_depths": ("d=2:1",), "mode": "depth"}, "and --mode depth solves widths instead"),
        ({"arm_depths": ("d=2:1",), "budgets": (100,)}, "and --budgets solve all shapes instead"),
        ({"arm_depths": ("d=2:1",), "depths": ()}, "nothing sets the depths of d=3, d=4"),
        ({"control": True, "degrees": ("2", "4")}, "d=3 arm: add 3 to --degrees"),
        ({"control": True, "arm_depths": (f"{CONTROL_LABEL}:1",)}, "climbs d=3's depths"),
    ],
)
def test_bad_input_is_refused_saying_why(given, said):
    with pytest.raises(UserError, match=None) as refused:
        config(**given)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_the_command_refuses_an_unknown_label_in_one_line(tmp_path, capsys):
    argv = ["degree-sweep", "--arm-depths", "d=2:2,4,6", "d=33:1,2", "--baselines"]
    assert main([*argv, "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean 'd=3'?" in err
    assert "Traceback" not in err and not (tmp_path / "r").exists()


def test_what_the_config_does_not_read_fails():
    assert "arm_depths" not in DegreeSweepConfig().unused()
    assert "arm_depths" in config(budgets=(100,)).unused()
    assert "arm_depths" in config(budgets=(100,), mode="depth").unused()
    # every arm named: --depths sets nothing
    assert "depths" in config(arm_depths=MEETING).unused()
    assert "depths" not in config(arm_depths=MEETING[:2]).unused()
    with pytest.raises(UserError, match="depths is not used by degree-sweep: --arm-depths"):
        from_flags("--arm-depths", *MEETING, "--baselines", "--depths", "1", "2")
    with pytest.raises(UserError, match="arm_depths is not used by degree-sweep: --budgets"):
        from_flags("--arm-depths", "--budgets", "100")


def test_a_design_names_the_arms_depths_and_the_control_only_where_given():
    # a run recorded before the fields existed still sizes a run of its design
    assert not {"arm_depths", "control"} & set(sizing.design(DegreeSweepConfig()))
    ours = sizing.design(config(arm_depths=MEETING, control=True))
    assert ours["arm_depths"] == list(MEETING) and ours["control"] is True


def _demo(*words):
    from blocklab.experiments.degree_sweep import DegreeSweep

    return cfgmod.resolve(DegreeSweep.Config, DegreeSweep.Config.demo(), None,
                          cfgmod.overrides(build_parser().parse_args(["demo", *words]),
                                           DegreeSweep.Config, DegreeSweep.no_flags))  # fmt: skip


def test_the_demos_depths_give_way_to_shapes_the_user_gives():
    demo = _demo()
    assert demo.arm_depths and demo.control
    assert _demo("--budgets", "100", "200").arm_depths == ()
    assert _demo("--depths", "1", "2").depths_by_arm()["d=2"] == (1, 2)
    two = _demo("--degrees", "2", "4")  # no d=3: no control, and no entry for d=3
    assert not two.control and [e.split(":")[0] for e in two.arm_depths] == ["d=2", "d=4"]
    with pytest.raises(UserError, match="--arm-depths"):  # what the user gives is checked
        _demo("--budgets", "100", "--arm-depths", "d=2:1")


def test_the_plan_says_where_the_arms_meet_and_where_they_never_do():
    said = preflight.meeting_words(DegreeSweepConfig.demo())
    assert "d=2/d=4 at 36, 72, 108" in said and "d=2/d=3 at 36*, 72*, 108" in said
    assert f"{CONTROL_LABEL}/d=3 at 27, 54, 108" in said
    apart = dataclasses.replace(
        DegreeSweepConfig.demo(), arm_depths=("d=2:1", "d=3:4", "d=4:1"), control=False
    )
    assert "d=2/d=3 never (no matched contrast)" in preflight.meeting_words(apart)

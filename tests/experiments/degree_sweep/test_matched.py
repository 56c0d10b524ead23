"""The matched answer (`degree_sweep.analysis.matched`, `matched_checks`): planted multipliers
recovered where the arms meet, interpolation never beyond a ladder, the words of the comparisons
and the hypotheses, and every check the answer rests on at passed, edge and failed."""

import math

import numpy as np
import pytest
from scipy import stats as st

from blocklab.experiments.degree_sweep.analysis import hypotheses as hy
from blocklab.experiments.degree_sweep.analysis import matched as mt
from blocklab.experiments.degree_sweep.analysis import matched_checks as mc
from blocklab.experiments.degree_sweep.analysis.cells import (
    BY_DESIGN,
    EDGE,
    FAILED,
    PASSED,
    cluster_wilson,
    wilson,
)
from blocklab.experiments.degree_sweep.report import answer

# the demo's design at width 3: a layer costs 18, 27, 36
DEPTHS = {"d=2": (2, 4, 6), "d=3": (1, 2, 4), "d=4": (1, 2, 3), mt.CONTROL: (1, 2, 4)}
COST = {"d=2": 18, "d=3": 27, "d=4": 36, mt.CONTROL: 27}


def rows_of(m, teachers=10, alpha=1.6, sigma=0.05, tau=0.0, seed=0, half=None, spike=None):
    """Rung rows of a planted run: log L = a_t - alpha log P + alpha log m_arm (+ noise), two
    chains a rung (the second worse), `half`: arm -> the factor its losses at half the
    iterations carry; `spike`: (teacher, arm, depth, factor) a test loss off by `factor`."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(teachers):
        a_t = rng.normal(-3, 0.5)
        shift = {a: rng.normal(0, tau) for a in m}
        for arm, depths in DEPTHS.items():
            if arm not in m:
                continue
            for depth in depths:
                p = COST[arm] * depth
                log_l = a_t - alpha * math.log(p) + alpha * (math.log(m[arm]) + shift[arm])
                test = math.exp(log_l + rng.normal(0, sigma))
                if spike and spike[:3] == (t, arm, depth):
                    test *= spike[3]
                k = (half or {}).get(arm, 1.0)
                rows.append({
                    "arm": arm, "teacher": t, "seed": 0, "budget": p, "block_params": p,
                    "status": "done", "test_loss": test, "train_loss": test,
                    "restart_test_losses": [test, 2 * test], "restart_val_losses": [test, 2 * test],
                    "restart_train_losses": [test, 2 * test],
                    "restart_half_test_losses": [k * test, 2 * test],
                    "restart_half_val_losses": [k * test, 2 * test],
                    "restart_half_train_losses": [k * test, 2 * test],
                    "converged": True, "width": 3, "depth": depth,
                    "functional_params": p * (1 - (int(arm[2]) - 1) / (int(arm[2]) * 3)),
                })  # fmt: skip
    return rows


PLANTED = {"d=2": 0.8, "d=3": 1.0, "d=4": 1.0, mt.CONTROL: 1.0}


def test_planted_multipliers_are_recovered_where_the_arms_meet():
    got = mt.matched(rows_of(PLANTED), n_boot=100)
    assert got.alpha == pytest.approx(1.6, rel=0.05)
    assert got.get("m2/m4").m == pytest.approx(0.8, rel=0.05)
    assert got.get("m(d=2)").m == pytest.approx(0.8, rel=0.05)
    assert got.get("m(d=4)").m == pytest.approx(1.0, rel=0.05)
    assert got.control.low <= 1 <= got.control.high
    for e in got.estimates.values():
        assert e.low < e.m < e.high and e.pi_low <= e.low and e.high <= e.pi_high
        assert e.teachers == e.units == 10
    # d=2 and d=4 meet at 36, 72, 108; d=3 is interpolated at 36 and 72 and met at 108
    assert got.get("m2/m4").budgets == (36, 72, 108) and got.get("m2/m4").interpolated == ()
    assert got.get("m(d=2)").budgets == (36, 72, 108)
    assert got.get("m(d=2)").interpolated == (36, 72)


def test_contrasts_name_each_unit_pair_and_count():
    got = mt.matched(rows_of(PLANTED, teachers=3), n_boot=0)
    pairs = {(c.pair, c.budget, c.interpolated) for c in got.contrasts}
    assert ("d=2/d=4", 36, False) in pairs and ("d=2/d=3", 36, True) in pairs
    assert ("d=4/d=3", 108, False) in pairs
    assert len(got.contrasts) == 3 * 3 * 3  # 3 units, 3 pairs, 3 counts each
    c = got.contrasts[0]
    assert set(c.json()) == {"unit", "pair", "budget", "log_ratio", "interpolated"}


def test_interpolation_is_log_log_and_never_beyond_a_ladder():
    rungs = [(27, math.log(1.0)), (54, math.log(0.25))]
    y, interp = mt.at_count(rungs, 36)
    w = (math.log(36) - math.log(27)) / (math.log(54) - math.log(27))
    assert interp and y == pytest.approx((1 - w) * 0 + w * math.log(0.25))
    assert mt.at_count(rungs, 54) == (math.log(0.25), False)
    assert mt.at_count(rungs, 18) is None and mt.at_count(rungs, 72) is None
    assert mt.meet([(18, 0.0), (36, 0.0), (72, 0.0)], rungs) == [
        (36, -y, True)
    ]  # 18 and 72 lie outside d=3's rungs: no contrast there


def test_yuen_matches_the_trimmed_mean_and_the_t_test_without_trimming():
    v = np.random.default_rng(1).standard_t(3, 20)
    tr = mt.yuen(v)
    assert tr.mean == pytest.approx(st.trim_mean(v, mt.TRIM))
    assert tr.df == 20 - 2 * 4 - 1
    plain = mt.yuen(v, trim=0.0)
    assert plain.se == pytest.approx(st.sem(v)) and plain.df == 19


def test_one_wild_teacher_moves_the_trimmed_mean_less_than_the_plain_one():
    rows = rows_of(PLANTED, teachers=12, spike=(0, "d=2", 4, 30.0))
    e = mt.matched(rows, n_boot=0).get("m2/m4")
    assert abs(math.log(e.m / 0.8)) < abs(math.log(e.plain / 0.8))


@pytest.mark.parametrize(
    "low, high, word",
    [(0.7, 0.9, "beats"), (1.1, 1.3, "loses to"), (0.96, 1.04, "equivalent"),
     (0.9, 1.04, "undecided"), (0.0, math.inf, "undecided")],
)  # fmt: skip
def test_versus_words(low, high, word):
    assert hy.interval_word(low, high) == word
    assert hy.interval_word(low, high, silenced=True) == "undecided"


def test_hypothesis_words_and_h_fd_values():
    s = hy.shares(rows_of(PLANTED, teachers=2), width=3)
    assert s["d=2"] == pytest.approx(5 / 6) and s["d=4"] == pytest.approx(0.75)
    p = hy.predictions(s)
    assert p["m(d=2)"]["H_fd"] == pytest.approx(0.933, abs=1e-3)
    assert p["m(d=4)"]["H_fd"] == pytest.approx(1.037, abs=1e-3)
    assert p["m2/m4"]["H_fd"] == pytest.approx(0.9) and p["m2/m4"]["h(d)"] == 1.0
    assert p["m(d=2)"]["h(d)"] == pytest.approx(1.057, abs=1e-3)
    # a run where H_fd holds: each arm's multiplier is s_3 / s_a
    fd = {**PLANTED, "d=2": p["m(d=2)"]["H_fd"], "d=4": p["m(d=4)"]["H_fd"]}
    got = mt.matched(rows_of(fd), n_boot=0)
    words = {
        e["quantity"]: {n: h["word"] for n, h in e["hypotheses"].items()}
        for e in hy.answer(got, p, silenced=False).entries
    }
    assert words["m2/m4"] == {"h(d)": "refuted", "no_difference": "refuted", "H_fd": "consistent"}
    silenced = hy.answer(got, p, silenced=True)
    assert {h["word"] for e in silenced.entries for h in e["hypotheses"].values()} == {
        "undecided"
    }
    assert {v["word"] for v in silenced.versus} == {"undecided"}
    said = [answer.said(v) for v in hy.answer(got, p, False).versus]
    assert any(s.startswith("d=2 beats d=4 per parameter by 10%") for s in said)


@pytest.mark.parametrize(
    "half, outcome",
    [(None, PASSED), ({"d=2": 1.5}, FAILED)],
)
def test_robustness_passes_a_stable_fit_and_fails_a_biased_half(half, outcome):
    rows = rows_of(PLANTED, half=half)
    full = mt.matched(rows, n_boot=0)
    check = mc.robustness(rows, full, 0)
    assert check.outcome == outcome
    variants = {v for _, v, *_ in check.shifts}
    assert variants == {"half iterations", "half the chains"}


@pytest.mark.parametrize("bias, outcome", [(0.01, PASSED), (0.03, FAILED)])
def test_robustness_stops_tightening_at_a_quarter_of_the_margin(bias, outcome):
    # 60 teachers read m to about +-1.5%: a quarter of that half width (0.4%) would fail any
    # bias at all; the floor, a quarter of the equivalence margin (1.2%), lets a 1% bias of the
    # half-iteration fits pass and fails a 3% one, at any number of teachers
    rows = rows_of(PLANTED, teachers=60, half={"d=2": (1 + bias) ** 1.6})
    full = mt.matched(rows, n_boot=0)
    assert mc.ROBUST_SHARE * full.get("m(d=2)").half_width < 0.01
    check = mc.robustness(rows, full, 0)
    assert check.outcome == outcome
    assert check.threshold == pytest.approx(mc.ROBUST_SHARE * math.log1p(hy.MARGIN))


def test_robustness_at_its_edge_when_the_half_moves_by_noise():
    rows = rows_of(PLANTED, sigma=0.05)
    rng = np.random.default_rng(3)
    for r in rows:  # each teacher's half-iteration fit off by noise of no mean
        k = math.exp(rng.normal(0, 0.3))
        r["restart_half_test_losses"] = [k * r["test_loss"], 2 * r["test_loss"]]
    full = mt.matched(rows, n_boot=0)
    assert mc.robustness(rows, full, 0).outcome == EDGE


def test_robustness_cannot_pass_a_store_without_what_it_reads():
    rows = rows_of(PLANTED)
    for r in rows:
        for k in ("test", "val", "train"):
            r[f"restart_half_{k}_losses"] = [None, None]
        r["restart_test_losses"] = r["restart_test_losses"][:1]
        r["restart_val_losses"] = r["restart_val_losses"][:1]
    check = mc.robustness(rows, mt.matched(rows, n_boot=0), 0)
    assert check.outcome == EDGE and check.unmeasured


def test_generalization_reads_the_geometric_mean_with_its_own_band():
    rows = rows_of(PLANTED, teachers=10)
    for r in rows:
        r["restart_train_losses"] = list(r["restart_test_losses"])
    spiky = next(r for r in rows if r["arm"] == "d=3" and r["depth"] == 4 and r["teacher"] == 0)
    spiky["restart_train_losses"] = [spiky["test_loss"] / 30, 1.0]  # one fit tests 30x its train
    check = mc.generalization(rows)
    # the figure is exp(mean log ratio) = 30^(1/10), inside its own band, not the mean of losses
    assert check.figure == pytest.approx(30 ** (1 / 10))
    assert check.band[0] < check.figure < check.band[1]
    assert check.outcome == EDGE
    assert mc.generalization(rows_of(PLANTED)).outcome == PASSED
    for r in rows:
        r["restart_train_losses"] = [t / 2 for t in r["restart_test_losses"]]
    assert mc.generalization(rows).outcome == FAILED


def _estimate(low, high, plain_low, plain_high):
    return mt.Estimate("control", mt.CONTROL, "d=3", 0.0, low, high, 1.0, plain_low, plain_high,
                       1.0, 0.1, 0.5, 2.0, 10, 10, 5, 0.0, (), (), ())  # fmt: skip


@pytest.mark.parametrize(
    "bounds, outcome",
    [((0.9, 1.1, 0.9, 1.1), PASSED), ((0.9, 1.1, 1.01, 1.2), EDGE),
     ((1.05, 1.2, 1.02, 1.3), FAILED)],
)  # fmt: skip
def test_negative_control_words(bounds, outcome):
    assert mc.control_check(_estimate(*bounds)).outcome == outcome
    not_run = mc.control_check(None)
    assert not_run.outcome == EDGE and not not_run.ran
    assert not_run.remedy(None)[0].key == "control"


def test_the_negative_control_fails_a_planted_difference():
    rows = rows_of({**PLANTED, mt.CONTROL: 1.3}, teachers=10)
    assert mc.control_check(mt.matched(rows, n_boot=0).control).outcome == FAILED
    rows = rows_of(PLANTED, teachers=10, sigma=0.1)
    assert mc.control_check(mt.matched(rows, n_boot=0).control).outcome == PASSED


def test_checks_the_design_holds_say_by_design_unless_it_could_fail():
    rows = rows_of(PLANTED, teachers=3)
    width, replicates = mc.by_design(rows, 3, failed_trials=0)
    assert width.outcome == BY_DESIGN and replicates.outcome == BY_DESIGN
    assert mc.by_design(rows, 3, failed_trials=1)[1].outcome == PASSED
    rows[0]["width"] = 4
    assert mc.by_design(rows, 3, 0)[0].outcome == FAILED
    short = [r for r in rows if r["teacher"] < 2]
    assert mc.by_design(short, 3, 0)[1].outcome == FAILED


def test_cluster_wilson_widens_with_clustered_rungs():
    # 10 ladders of 4 rungs: the same 30 of 40 spread evenly, or whole ladders failing
    even = cluster_wilson([3] * 10, [4] * 10)
    clustered = cluster_wilson([4] * 7 + [0, 1, 1], [4] * 10)
    lo, hi = wilson(30, 40)
    assert even == pytest.approx((lo, hi), abs=0.02)
    assert clustered[1] - clustered[0] > hi - lo


def test_teachers_to_decide_grows_as_the_interval_must_shrink():
    e = mt.matched(rows_of({**PLANTED, "d=2": 0.97}, teachers=4, sigma=0.2), n_boot=0).get("m2/m4")
    need = mc.teachers_to_decide(e, 4)
    assert need is None or need > 4


def test_the_contrasts_figure_draws_each_teacher_and_each_interval(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from blocklab.experiments.degree_sweep.analysis.answered import answer_run
    from blocklab.experiments.degree_sweep.report import curves

    kept = {}
    monkeypatch.setattr(curves, "save", lambda fig, path: kept.setdefault("fig", fig))
    res = answer_run(rows_of(PLANTED, teachers=7, tau=0.1), 50, 0.95, 3, [])
    curves.contrasts(SimpleNamespace(matched=res), tmp_path / "c.png")
    ax = kept["fig"].axes[0]
    lines = {}
    for ln in ax.get_lines():
        lines.setdefault(ln.get_label(), []).append(ln)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["m(d=2)", "m(d=4)", "m_2 / m_4", "control"]
    teachers = lines["each teacher"]
    assert [len(ln.get_ydata()) for ln in teachers] == [7] * 4
    # the grey points are each teacher's multiplier; the filled point, their trimmed mean
    got = res.estimates.get("m(d=2)")
    assert sorted(teachers[0].get_ydata()) == pytest.approx(sorted(np.exp(got.per_teacher)))
    trimmed = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_mfc() != "white"]
    assert trimmed[0].get_ydata()[0] == pytest.approx(math.exp(got.log_m))
    # each hypothesis's prediction where it has one: h(d) and H_fd on the three quantities
    assert len(lines["the note's h(d)"]) == len(lines["H_fd"]) == 3


def test_a_run_is_sized_by_the_wider_of_m2_over_m4_and_m_d2():
    from blocklab.experiments.degree_sweep.analysis.answered import SIZED_BY, answer_run

    # teachers spread by tau 0.3: m(d=2), which reads d=3 between its rungs, comes out wider
    res = answer_run(rows_of({**PLANTED, "d=3": 1.0}, teachers=8, tau=0.3), 0, 0.95, 3, [])
    widths = {f.name: f.interval.half_width_log() for f in res.decision.findings}
    assert set(SIZED_BY) <= set(widths) and res.decision.decisive == ("m2/m4",)
    assert res.decision.widest == max(widths[n] for n in SIZED_BY)
    assert widths["d=2"] > widths["m2/m4"]  # so m_2 / m_4 alone would size it short

"""The learning check: chance as the best constant guess's score, a trained score at chance, and a
loss that never moved, read from planted rows."""

import pytest

from blocklab.analysis import learned
from blocklab.analysis.learned import CHANCE_MARGIN, UNMOVED_TOL, Chance, checks, unmoved
from blocklab.tasks import make_task

NEEDLE = {"seq_len": 4, "dim": 4, "n_train": 64, "n_val": 16, "n_test": 64}
QSA = {"seq_len": 6, "q": 2, "dim": 2, "n_train": 256, "n_val": 16, "n_test": 512}


def row(variant, seed, score, losses=(0.7, 0.3), steps=None, status="done", task="needle"):
    """A finished trial's row as `experiments._trials.row` gives it, with the keys read here."""
    options = NEEDLE if task == "needle" else QSA
    return {
        "variant": variant,
        "seed": seed,
        "status": status,
        "task": task,
        "task_options": options,
        "test_metric": score if status == "done" else None,
        "curve_step": list(steps if steps is not None else range(len(losses))),
        "curve_val_loss": list(losses),
    }


def test_chance_is_the_commonest_label_of_a_balanced_task():
    # the needle task holds exactly half D1 sequences in every split
    assert learned.chance("needle", NEEDLE) == Chance(0.5, True)


def test_chance_of_a_tolerance_task_is_the_mean_guess_within_the_tolerance():
    said = learned.chance("qsa", QSA)
    stated = make_task("qsa", **QSA).make(0).info["chance"]  # predicting 0, on the same split
    assert said.higher_is_better and said.score == pytest.approx(stated, abs=0.02)
    assert 0 < said.score < 0.3


def test_chance_of_an_mse_task_is_the_training_mean_near_one():
    options = {"n_train": 512, "n_val": 64, "n_test": 512}
    said = learned.chance("teacher", options)
    assert not said.higher_is_better and 0.7 < said.score < 1.3


def test_a_score_at_chance_is_flagged_and_one_clearly_above_is_not():
    rows = [row("flat", s, 0.5 + 0.01 * s) for s in range(3)]  # 0.51 on average
    rows += [row("learns", s, 0.9) for s in range(3)]
    flat, learns = checks(rows, ("variant",))
    assert flat.group == {"variant": "flat"} and flat.trials == 3
    assert flat.score == pytest.approx(0.51) and flat.chance.score == 0.5
    assert flat.at_chance and flat.gain == pytest.approx(0.02)
    assert not learns.at_chance and learns.as_json()["gain"] == pytest.approx(0.8)


def test_the_margin_is_a_share_of_the_way_to_perfect():
    accuracy, mse = Chance(0.5, True), Chance(1.0, False)
    edge = 0.5 + CHANCE_MARGIN * 0.5
    assert accuracy.holds(edge - 1e-6) and not accuracy.holds(edge + 1e-6)
    assert accuracy.holds(0.3)  # below chance is no better than chance
    # mse: lower is better, perfect is 0
    assert mse.holds(1.0 - CHANCE_MARGIN + 1e-6) and not mse.holds(0.5)
    assert mse.gain(0.5) == pytest.approx(0.5)


def test_a_loss_that_never_moved_is_flagged():
    flat = 0.693
    rows = [row("stuck", 0, 0.9, losses=(flat, flat * (1 - UNMOVED_TOL / 2)))]
    rows += [row("stuck", 1, 0.9, losses=(flat, 0.2))]
    rows += [row("moves", 0, 0.9, losses=(flat, flat * (1 - 2 * UNMOVED_TOL)))]
    stuck, moves = checks(rows, ("variant",))
    assert (stuck.unmoved, stuck.read) == (1, 2) and not stuck.at_chance
    assert (moves.unmoved, moves.read) == (0, 1)


def test_a_curve_that_cannot_tell_is_not_read():
    assert unmoved(row("x", 0, 0.9, losses=(0.5, 0.5), steps=(10, 20))) is None  # no step 0
    assert unmoved(row("x", 0, 0.9, losses=(0.5,))) is None
    assert unmoved(row("x", 0, 0.9, losses=(0.5, float("nan")))) is None
    assert unmoved(row("x", 0, None, losses=(0.5, 0.5), status="diverged")) is None
    assert unmoved(row("x", 0, 0.9, losses=(0.5, 0.5))) is True


def test_diverged_trials_count_in_no_score(monkeypatch):
    rows = [row("v", 0, 0.9), row("v", 1, None, status="diverged")]
    (only,) = checks(rows, ("variant",))
    assert only.trials == 1 and only.score == 0.9 and only.read == 1
    gone = checks([row("v", 0, None, status="diverged")], ("variant",))[0]
    assert gone.score is None and not gone.at_chance


def test_each_task_is_made_once(monkeypatch):
    made = []

    def chance(task, options):
        made.append(task)
        return Chance(0.5, True)

    monkeypatch.setattr(learned, "chance", chance)
    rows = [row(v, s, 0.9) for v in ("a", "b") for s in range(2)]
    rows.append(row("c", 0, 0.2, task="qsa"))
    checks(rows, ("variant",))
    assert made == ["needle", "qsa"]

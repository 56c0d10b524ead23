"""A command's progress: one display for every sweep it runs. In a log each finished trial's line
says how long the command has run and how long the rest will take at the pace so far, over the
whole command's trials, the phases not yet planned included."""

from __future__ import annotations

import re

from blocklab.engine import progress as progress_mod
from blocklab.models import parse_arm


def _spec(id_="a"):
    fields = {"id": id_, "arm": parse_arm("3"), "describe": lambda self: "d=3 seed=0"}
    return type("Spec", (), fields)()


def _err(capsys) -> str:
    """What the display said, less the line each phase with trials to run starts with."""
    lines = capsys.readouterr().err.splitlines(keepends=True)
    return "".join(line for line in lines if not line.rstrip().endswith("] started"))


def _done(value=0.5):
    return {"status": "done", "metrics": {"metric": "mse", "test_metric": value}}


def test_a_log_line_carries_elapsed_time_and_eta(monkeypatch, capsys):
    now = iter([100.0, 130.0])  # the start, then a trial 30 s later
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: next(now))
    bar = progress_mod.Progress()
    bar.phase("fits", 4)
    bar.update(_spec(), _done())
    line = _err(capsys)
    assert line.startswith("[fits 1/4, 30s elapsed, ETA 1m30s] d=3 seed=0: mse=0.5")


def test_phases_share_one_total_and_the_expected_phase_counts_from_the_start(monkeypatch, capsys):
    now = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: next(now))
    bar = progress_mod.Progress()
    bar.expect(6)  # the seeds, planned after the search
    bar.phase("lr search", 2)
    bar.update(_spec(), _done())
    first = _err(capsys)
    assert first.startswith("[lr search 1/8, 10s elapsed, ETA 1m10s]")
    bar.expect(-6)
    bar.phase("seeds", 6)
    bar.update(_spec(), _done())
    assert _err(capsys).startswith("[seeds 2/8, 20s elapsed, ETA 1m00s]")


def test_a_sweep_given_a_flag_closes_its_own_display_and_leaves_the_commands_open():
    mine, own = progress_mod.display(True)
    assert own and mine.enabled
    shared = progress_mod.Progress(enabled=False)
    assert progress_mod.display(shared) == (shared, False)
    assert not shared  # a display that is off reads false, as the flag did


def test_a_searched_sweep_counts_search_and_seeds_on_one_display(
    tmp_path, capsys, tiny_searched_sweep
):
    from blocklab.engine.executors import Resources
    from blocklab.experiments import degree_sweep
    from blocklab.store import Store

    bar = progress_mod.Progress()
    one = Resources(workers=1, ensemble=1)
    degree_sweep.run(tiny_searched_sweep, Store(tmp_path), resources=one, progress=bar)
    lines = _err(capsys).splitlines()
    # the checks before any trial, each said as it begins
    staged = [re.match(r"\[\d+(m\d+)?s\] ", line) is not None for line in lines]
    stages = [line.split("] ", 1)[1] for line, st in zip(lines, staged, strict=True) if st]
    assert stages[0].startswith("checking that every input reaches the output")
    assert "choosing each cell's learning rate" in stages
    # 2 rates searched with 2 seeds expected (4), then the seed-0 trial at the chosen rate is
    # the search's: the seeds train 1 more, and the count runs on over one total
    trials = [line for line, st in zip(lines, staged, strict=True) if not st]
    assert [line.split(",")[0] for line in trials] == [
        "[lr search 1/4",
        "[lr search 2/4",
        "[seeds 3/3",
    ]


def test_a_counted_analysis_prints_a_line_at_each_quarter_in_a_log(capsys):
    bar = progress_mod.Progress()
    on_draw = bar.counter("analysis: {} bootstrap", "draw")
    for done in range(1, 101):
        on_draw("multiplier", done, 100)
    lines = _err(capsys).splitlines()
    assert [line.split(",")[0] for line in lines] == [
        f"[analysis: multiplier bootstrap {n}/100 draws" for n in (25, 50, 75, 100)
    ]
    off = progress_mod.Progress(enabled=False).counter("analysis: {} bootstrap", "draw")
    off("multiplier", 100, 100)
    assert capsys.readouterr().err == ""


def test_on_a_terminal_a_counted_analysis_is_a_bar(monkeypatch, capsys):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    bar = progress_mod.Progress()
    with bar.analysing(8):
        on_draw = progress_mod.current().counter("analysis: {} bootstrap", "draw")
        for done in range(1, 41):
            on_draw("multiplier", done, 40)
    err = capsys.readouterr().err
    assert err.startswith("analysing 8 trials\n")
    assert "analysis: multiplier bootstrap" in err and "40/40" in err
    assert "[analysis:" not in err  # no log lines beside the bar


def test_the_analysis_is_current_only_while_it_runs():
    bar = progress_mod.Progress()
    assert not progress_mod.current()  # a report written outside a command shows nothing
    with bar.analysing(3):
        assert progress_mod.current() is bar
    assert progress_mod.current() is not bar and not progress_mod.current()


def test_only_trials_stored_before_the_command_make_it_a_resumed_run(capsys):
    bar = progress_mod.Progress()
    bar.phase("lr search", 2)
    bar.update(_spec("a"), _done())
    bar.update(_spec("b"), _done())
    capsys.readouterr()
    # the seeds reuse the search's trial "a": this command's own, not a resumed run's
    bar.phase("seeds", 1, stored={"a"})
    assert "resuming" not in capsys.readouterr().err
    bar.phase("seeds, more", 2, stored={"a", "old"})  # "old" was stored before it began
    assert _err(capsys) == "resuming seeds, more: 2 of 4 trials stored, 2 to fit\n"
    with bar.analysing(4):
        pass
    assert capsys.readouterr().err == "analysing 4 trials\n"


def test_a_command_that_fits_nothing_says_it_re_analyses(capsys):
    bar = progress_mod.Progress()
    bar.phase("lr search", 0, stored={"a", "b"})
    bar.phase("seeds", 0, stored={"b", "c"})
    with bar.analysing(3):
        pass
    assert capsys.readouterr().err == "all 3 trials stored: re-analysing\n"
    quiet = progress_mod.Progress(enabled=False)
    quiet.phase("seeds", 1, stored={"a"})
    with quiet.analysing(2):
        pass
    assert capsys.readouterr().err == ""


def test_on_a_terminal_no_bar_is_drawn_until_a_trial_is_to_train(monkeypatch, capsys):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    bar = progress_mod.Progress()
    bar.expect(6)  # the seeds a search plans: a rerun's search, all stored, trains none
    bar.phase("lr search", 0, stored={"a", "b"})
    assert capsys.readouterr().err == ""
    bar.expect(-6)
    bar.phase("seeds", 2, stored={"a"})
    bar.close()
    err = capsys.readouterr().err
    assert err.startswith("resuming seeds: 1 of 3 trials stored, 2 to fit\n")
    assert "seeds:" in err and "0/2" in err


def test_a_phase_in_a_log_says_it_started_with_the_estimate_where_trials_are_weighed(capsys):
    bar = progress_mod.Progress()
    bar.weigh({"a": 60.0, "b": 60.0}, parallel=2)
    bar.phase("fits", 2)
    assert capsys.readouterr().err == "[fits 0/2, ETA 1m00s] started\n"
    bar.close()


def test_weighed_trials_read_the_eta_off_the_work_left_not_the_count(monkeypatch, capsys):
    """A large fit first and a small one left: the ETA is the small one's share, where the
    count would say as long again."""
    now = iter([0.0, 0.0, 90.0])  # the start, the phase, the large fit done
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: next(now))
    bar = progress_mod.Progress()
    bar.weigh({"a": 90.0, "b": 10.0}, parallel=1)
    bar.phase("fits", 2)
    bar.update(_spec("a"), _done())
    assert _err(capsys).startswith("[fits 1/2, 1m30s elapsed, ETA 10s]")
    bar.close()


def test_a_silent_stretch_gets_a_heartbeat_line_and_stages_say_when_they_begin(capsys):
    bar = progress_mod.Progress()
    bar.stage("checking the design")
    assert capsys.readouterr().err.endswith("] checking the design\n")
    bar.BEAT = 0.2
    bar.phase("fits", 3)
    import time

    time.sleep(0.6)
    bar.close()
    assert "] running" in capsys.readouterr().err


def test_a_display_kept_open_after_its_sweep_says_no_running(tmp_path, capsys):
    """A caller's display outlives the sweep (a script's, `blocklab.run`'s) and still expects
    trials of a phase that never comes: once the sweep ended it beats no more, until the next
    sweep's phase begins."""
    import time

    from _specs import small_trial
    from blocklab.engine import sweep
    from blocklab.specs import TrainConfig
    from blocklab.store import Store

    bar = progress_mod.Progress()
    bar.BEAT = 0.2
    bar.expect(5)  # trials a later phase would plan: the count stays below the total
    spec = small_trial("2", 0, TrainConfig(steps=2, batch_size=8, lr=1e-2, eval_points=1))
    sweep.run([spec], Store(tmp_path), "t", progress=bar)
    capsys.readouterr()
    time.sleep(0.6)
    assert "running" not in capsys.readouterr().err
    bar.phase("seeds", 1)
    time.sleep(0.6)
    bar.close()
    assert "] running" in capsys.readouterr().err

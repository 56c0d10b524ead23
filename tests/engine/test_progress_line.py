"""A command's progress: one display for every sweep it runs. In a log each finished trial's line
says how long the command has run and how long the rest will take, over the whole command's
trials, the phases not yet planned included. Time here is a fake clock and the ticks are driven
by hand: no test sleeps or times anything."""

from __future__ import annotations

import re
import sys
import threading

import pytest

from blocklab.engine import progress as progress_mod
from blocklab.models import parse_arm


def _spec(id_="a"):
    fields = {"id": id_, "arm": parse_arm("3"), "describe": lambda self: "d=3 seed=0"}
    return type("Spec", (), fields)()


def _err(capsys) -> str:
    """What the display said, less the line each phase with trials to run starts with."""
    lines = capsys.readouterr().err.splitlines(keepends=True)
    return "".join(line for line in lines if not line.rstrip().endswith("] started"))


def _done(value=0.5, seconds=None):
    metrics = {"metric": "mse", "test_metric": value}
    return {"status": "done", "metrics": metrics | ({"seconds": seconds} if seconds else {})}


class Clock:
    """The display's time, moved by hand."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Ticks:
    """A ticker maker whose ticks a test gives by hand (`tick`): `live` the ticker now running,
    None once it was stopped."""

    def __init__(self):
        self.live, self.made, self.periods = None, 0, []

    def __call__(self, period, tick):
        self.made += 1
        self.periods.append(period)
        ticks = self

        class Fake:
            def stop(self):
                assert ticks.live is self, "stopped twice, or not the ticker running"
                ticks.live = None

        self.live, self._tick = Fake(), tick
        return self.live

    def tick(self):
        assert self.live is not None, "no ticker runs"
        self._tick()


def _display(now=0.0, **kw):
    clock, ticks = Clock(now), Ticks()
    return progress_mod.Progress(clock=clock, ticker=ticks, **kw), clock, ticks


def _bars(err: str) -> list[str]:
    """Each state a terminal's bar was drawn in, in order (tqdm redraws it after a \\r)."""
    return [part.strip() for part in re.split(r"[\r\n]", err) if "|" in part]


def test_a_log_line_carries_elapsed_time_and_eta(capsys):
    bar, clock, _ = _display(100.0)
    bar.phase("fits", 4)
    clock.now = 130.0  # a trial 30 s later: nothing weighed, the count's pace
    bar.update(_spec(), _done(seconds=28.0))
    line = _err(capsys)
    assert line == "[fits 1/4, 30s elapsed, ETA 1m30s] d=3 seed=0: mse=0.5 (28.0s)\n"


def test_phases_share_one_total_and_the_expected_phase_counts_from_the_start(capsys):
    bar, clock, _ = _display()
    bar.expect(6)  # the seeds, planned after the search
    bar.phase("lr search", 2)
    clock.now = 10.0
    bar.update(_spec(), _done())
    first = _err(capsys)
    assert first.startswith("[lr search 1/8, 10s elapsed, ETA 1m10s]")
    bar.expect(-6)
    bar.phase("seeds", 6)
    clock.now = 20.0
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
    bar, _, _ = _display()
    bar.weigh({"a": 60.0, "b": 60.0}, parallel=2)
    bar.phase("fits", 2)
    assert capsys.readouterr().err == "[fits 0/2, ETA 1m00s est.] started\n"
    bar.close()


def test_weighed_trials_read_the_eta_off_the_work_left_not_the_count(capsys):
    """A large fit first and a small one left: the ETA is the small one's share, where the
    count would say as long again."""
    bar, clock, _ = _display()
    bar.weigh({"a": 90.0, "b": 10.0}, parallel=1)
    bar.phase("fits", 2)
    clock.now = 90.0
    bar.update(_spec("a"), _done(seconds=90.0))
    assert _err(capsys).startswith("[fits 1/2, 1m30s elapsed, ETA 10s]")
    bar.close()


def test_finished_fits_scale_the_estimate_of_the_rest_by_what_they_measured(capsys):
    """Largest first: a fit that took twice its estimate doubles the estimate of those left (60 s),
    where the pace per trial would say 3 more of its own 200 s (10 min)."""
    bar, clock, _ = _display()
    bar.weigh({"a": 100.0, "b": 10.0, "c": 10.0, "d": 10.0}, parallel=1)
    bar.phase("fits", 4)
    clock.now = 200.0
    bar.update(_spec("a"), _done(seconds=200.0))
    assert _err(capsys).startswith("[fits 1/4, 3m20s elapsed, ETA 1m00s] ")
    clock.now = 215.0  # 15 s into b, whose estimate is 2 x 10 s now
    bar.update(_spec("b"), _done(seconds=15.0))  # 215 measured of 110 estimated: 2 x 20 s
    assert _err(capsys).startswith("[fits 2/4, 3m35s elapsed, ETA 39s] ")
    bar.close()


def test_before_any_fit_finishes_the_eta_is_the_estimate_less_the_time_on_those_running(capsys):
    """Two workers on the two largest fits: the estimate of all four, less the 60 s each worker
    put into its fit, over 2; once the running fits outrun their estimate the ETA is at least
    what the others are estimated to take ('>'), and with only overdue fits left it says so."""
    bar, clock, ticks = _display()
    bar.weigh({"a": 100.0, "b": 100.0, "c": 50.0, "d": 50.0}, parallel=2)
    bar.phase("fits", 4)
    assert capsys.readouterr().err == "[fits 0/4, ETA 2m30s est.] started\n"
    clock.now = 60.0
    assert bar.clock() == "1m00s elapsed, ETA 1m30s est."
    clock.now = 150.0  # a and b past their 100 s: c and d's 100 s on 2 workers is left at least
    assert bar.clock() == "2m30s elapsed, ETA >50s est."
    clock.now = 160.0
    bar.update(_spec("c"), _done(seconds=50.0))  # as estimated: a, b and d are left
    bar.update(_spec("d"), _done(seconds=50.0))
    capsys.readouterr()
    clock.now = 400.0
    assert bar.clock() == "6m40s elapsed, past est."


def test_a_worker_left_idle_at_the_end_gives_the_last_fit_none_of_its_time(capsys):
    """Two workers: a and b end at 100 s, c at 150 s, and d, begun at 100 s on the worker b
    freed, is all that is left: at 175 s it has had 75 of its 100 s, not the idle worker's 25
    besides (which would put it past its estimate)."""
    bar, clock, _ = _display()
    bar.weigh({"a": 100.0, "b": 100.0, "c": 50.0, "d": 100.0}, parallel=2)
    bar.phase("fits", 4)
    clock.now = 100.0
    bar.update(_spec("a"), _done(seconds=100.0))
    bar.update(_spec("b"), _done(seconds=100.0))
    clock.now = 150.0
    bar.update(_spec("c"), _done(seconds=50.0))
    capsys.readouterr()
    clock.now = 175.0
    assert bar.clock() == "2m55s elapsed, ETA 25s"
    bar.close()


def test_with_no_estimate_the_eta_is_the_plain_pace_and_none_before_a_trial_ends(capsys):
    bar, clock, _ = _display()
    bar.phase("fits", 3)
    clock.now = 50.0
    assert bar.clock() == "50s elapsed"
    bar.update(_spec("a"), _done(seconds=50.0))
    assert bar.clock() == "50s elapsed, ETA 1m40s"
    bar.close()


def test_a_ladders_measured_seconds_are_its_rungs_summed():
    rungs = [{"depth": 1, "metrics": {"seconds": 2.0}}, {"depth": 2, "metrics": {"seconds": 5.0}}]
    ladder = {"status": "done", "metrics": {"seconds": 5.0, "ladder": rungs}}
    assert progress_mod.trial_seconds(ladder) == 7.0  # the top rung's own seconds are 5
    assert progress_mod.trial_seconds(_done(seconds=3.0)) == 3.0
    assert progress_mod.trial_seconds(_done()) is None


def test_on_a_terminal_the_bars_clock_moves_between_trials(monkeypatch, capsys):
    """A first fit of 10 min estimated: each tick redraws the bar's elapsed time and the
    estimate less that time, marked 'est.'; once it finishes, the scaled estimate, unmarked."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    bar, clock, ticks = _display()
    bar.weigh({"a": 600.0, "b": 300.0}, parallel=1)
    bar.phase("fits", 2)
    assert ticks.periods == [progress_mod.TICK] and progress_mod.TICK <= 5
    for now in (5.0, 10.0, 700.0):
        clock.now = now
        ticks.tick()
    clock.now = 800.0
    bar.update(_spec("a"), _done(seconds=800.0))  # 4/3 of its estimate: b's 300 s is 400 s
    clock.now = 900.0
    ticks.tick()
    bar.close()
    assert ticks.live is None
    states = [re.sub(r"\|[^|]*\|", "|", s) for s in dict.fromkeys(_bars(capsys.readouterr().err))]
    assert states == [
        "fits:   0%| 0/2 [0s, ETA 15m00s est.]",
        "fits:   0%| 0/2 [5s, ETA 14m55s est.]",
        "fits:   0%| 0/2 [10s, ETA 14m50s est.]",
        "fits:   0%| 0/2 [11m40s, ETA >5m00s est.]",
        "fits:  50%| 1/2 [13m20s, ETA 6m40s, d=3 mse=0.5]",
        "fits:  50%| 1/2 [15m00s, ETA 5m00s, d=3 mse=0.5]",
    ]


def test_a_silent_stretch_gets_a_heartbeat_line_and_stages_say_when_they_begin(capsys):
    bar, clock, ticks = _display()
    clock.now = 2.0
    bar.stage("checking the design")
    assert capsys.readouterr().err == "[2s] checking the design\n"
    bar.weigh({"a": 600.0}, parallel=1)
    bar.phase("fits", 1)
    capsys.readouterr()
    clock.now = 2.0 + bar.BEAT - 1
    ticks.tick()
    assert capsys.readouterr().err == ""  # less than a minute since the last line
    clock.now = 2.0 + bar.BEAT
    ticks.tick()
    assert capsys.readouterr().err == "[fits 0/1, 1m02s elapsed, ETA 9m00s est.] running\n"
    clock.now += bar.BEAT - 1
    ticks.tick()
    assert capsys.readouterr().err == ""  # the last line counts from the heartbeat
    bar.close()
    assert ticks.live is None


def test_a_display_kept_open_after_its_sweep_says_no_running(tmp_path, capsys):
    """A caller's display outlives the sweep (a script's, `blocklab.run`'s) and still expects
    trials of a phase that never comes: once the sweep ended its ticker is stopped, until the
    next sweep's phase begins."""
    from _specs import small_trial
    from blocklab.engine import sweep
    from blocklab.specs import TrainConfig
    from blocklab.store import Store

    bar, clock, ticks = _display()
    bar.expect(5)  # trials a later phase would plan: the count stays below the total
    spec = small_trial("2", 0, TrainConfig(steps=2, batch_size=8, lr=1e-2, eval_points=1))
    sweep.run([spec], Store(tmp_path), "t", progress=bar)
    assert ticks.made == 1 and ticks.live is None
    bar.phase("seeds", 1)
    capsys.readouterr()
    clock.now += bar.BEAT
    ticks.tick()
    bar.close()
    assert "] running" in capsys.readouterr().err


def test_the_ticker_ticks_until_stopped_and_leaves_no_thread(capsys):
    """The real ticker, at a period of 0: it ticks again and again on its own thread, `stop`
    ends that thread, and a tick that meets a closed stream ends it too."""
    three, calls = threading.Event(), []

    def tick():
        calls.append(1)
        if len(calls) >= 3:
            three.set()

    ticker = progress_mod.Ticker(0.0, tick)
    assert ticker.thread.daemon and ticker.thread.name == "blocklab-progress"
    three.wait()
    ticker.stop()
    assert not ticker.thread.is_alive() and len(calls) >= 3

    def closed():
        raise ValueError("I/O operation on closed file")

    broken = progress_mod.Ticker(0.0, closed)
    broken.thread.join(timeout=60)
    assert not broken.thread.is_alive()
    broken.stop()  # stopping an ended ticker is harmless


def _tickers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "blocklab-progress"]


@pytest.mark.parametrize("terminal", [False, True], ids=["log", "terminal"])
@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError], ids=["ctrl-c", "error"])
def test_a_sweep_stopped_by_ctrl_c_or_an_error_leaves_no_ticker(
    tmp_path, monkeypatch, capsys, terminal, stop
):
    """The real ticker runs while the sweep's trials do, and stops with the sweep however it
    ends: the display's own (a flag) closed, the command's (passed in) at rest."""
    from _specs import small_trial
    from blocklab.engine import sweep
    from blocklab.errors import Interrupted
    from blocklab.specs import TrainConfig
    from blocklab.store import Store

    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    assert not _tickers()
    seen = []

    def stopped(*args, **kwargs):
        seen.append(len(_tickers()))  # the ticker runs while the trial does
        raise stop("stopped")

    monkeypatch.setattr(sweep, "run_group", stopped)
    spec = small_trial("2", 0, TrainConfig(steps=2, batch_size=8, lr=1e-2, eval_points=1))
    for progress in (True, progress_mod.Progress()):
        with pytest.raises(Interrupted if stop is KeyboardInterrupt else RuntimeError):
            sweep.run([spec], Store(tmp_path), "t", progress=progress)
        assert not _tickers()
    assert seen == [1, 1]


def test_each_planned_trial_of_a_degree_sweep_has_a_line_of_its_own():
    """Trials of one cell and seed differ by their teacher: each trial's line names it, so no
    two of a run's lines read the same (the demo's ladders, and single fits with their
    roundings and referees)."""
    import dataclasses

    from blocklab.experiments.degree_sweep import DegreeSweepConfig, plan

    demo = dataclasses.replace(DegreeSweepConfig.demo(), teachers=3, seeds=1)
    single = DegreeSweepConfig(baselines=(), teachers=2, seeds=2, ladder="off", roundings=2)
    for cfg in (demo, single):
        cells = plan.shapes(cfg)
        planned = [s for _, s in plan.trials(cfg, cells, dict.fromkeys(cells, cfg.train.lr))]
        lines = [s.describe() for s in planned]
        assert len(set(lines)) == len(lines) == len({s.id for s in planned})
        named = [re.search(r" teacher=(\d+) seed=\d+", line) for line in lines]
        assert {int(m[1]) for m in named} == set(range(cfg.teachers))
        assert all(m[1] == str(s.data_seed) for m, s in zip(named, planned, strict=True))
    assert lines[2] == "teacher B=18 d=2 L=1 w=3 lm teacher=1 seed=0"

"""A command's progress: one display for every sweep it runs. In a log each finished trial's line
says how long the command has run and how long the rest will take at the pace so far, over the
whole command's trials, the phases not yet planned included."""

from __future__ import annotations

from blocklab.engine import progress as progress_mod
from blocklab.models import parse_arm


def _spec():
    return type("Spec", (), {"arm": parse_arm("3"), "describe": lambda self: "d=3 seed=0"})()


def _done(value=0.5):
    return {"status": "done", "metrics": {"metric": "mse", "test_metric": value}}


def test_a_log_line_carries_elapsed_time_and_eta(monkeypatch, capsys):
    now = iter([100.0, 130.0])  # the start, then a trial 30 s later
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: next(now))
    bar = progress_mod.Progress()
    bar.phase("fits", 4)
    bar.update(_spec(), _done())
    line = capsys.readouterr().err
    assert line.startswith("[fits 1/4, 30s elapsed, ETA 1m30s] d=3 seed=0: mse=0.5")


def test_phases_share_one_total_and_the_expected_phase_counts_from_the_start(monkeypatch, capsys):
    now = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: next(now))
    bar = progress_mod.Progress()
    bar.expect(6)  # the seeds, planned after the search
    bar.phase("lr search", 2)
    bar.update(_spec(), _done())
    first = capsys.readouterr().err
    assert first.startswith("[lr search 1/8, 10s elapsed, ETA 1m10s]")
    bar.expect(-6)
    bar.phase("seeds", 6)
    bar.update(_spec(), _done())
    assert capsys.readouterr().err.startswith("[seeds 2/8, 20s elapsed, ETA 1m00s]")


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
    lines = capsys.readouterr().err.splitlines()
    # 2 rates searched with 2 seeds expected (4), then the seed-0 trial at the chosen rate is
    # the search's: the seeds train 1 more, and the count runs on over one total
    assert [line.split(",")[0] for line in lines] == [
        "[lr search 1/4",
        "[lr search 2/4",
        "[seeds 3/3",
    ]

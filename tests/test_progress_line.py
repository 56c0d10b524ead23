"""A sweep's progress in a log: each finished trial's line says how long the phase has run and how
long the rest will take at the pace so far."""

from __future__ import annotations

from blocklab.engine import progress as progress_mod
from blocklab.models import parse_arm


def test_a_log_line_carries_elapsed_time_and_eta(monkeypatch, capsys):
    now = iter([100.0, 130.0])  # the start, then a trial 30 s later
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: next(now))
    bar = progress_mod.Progress(4, "fits")
    spec = type("Spec", (), {"arm": parse_arm("3"), "describe": lambda self: "d=3 seed=0"})()
    bar.update(spec, {"status": "done", "metrics": {"metric": "mse", "test_metric": 0.5}})
    line = capsys.readouterr().err
    assert line.startswith("[fits 1/4, 30s elapsed, ETA 1m30s] d=3 seed=0: mse=0.5")

"""benchmarks/busy.py: a GPU's busy share while a block runs, the mean of the driver's utilization
samples; none measured where no sampler runs (this CPU machine)."""

from __future__ import annotations

import sys

from _scripts import load


def _busy():
    return load("busy").Busy


def test_the_share_is_the_mean_of_the_samples_and_a_bad_reading_is_skipped():
    # a sampler that prints three readings, one unreadable, as nvidia-smi prints them
    fake = [sys.executable, "-c", "print('30'); print('[N/A]'); print('70')"]
    with _busy()(command=fake) as busy:
        pass
    assert busy.samples == [30.0, 70.0] and busy.share == 0.5
    assert busy.words() == "busy 50% of 2 samples"


def test_without_a_sampler_no_share_is_claimed(monkeypatch):
    Busy = _busy()
    monkeypatch.setattr("shutil.which", lambda name: None)
    with Busy() as busy:
        pass
    assert busy.share is None and "not measured" in busy.words()

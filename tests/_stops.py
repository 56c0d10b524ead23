"""Commands that end once their trials are stored: for a test that reads the store and what the
sweep said, which are whole by then, and not the analysis or the report, which the tests that
run the same experiments to the end read."""

from __future__ import annotations

import contextlib

import pytest


class TrialsStored(SystemExit):
    """What a command raises under `trials_only` once its trials are stored: an exit with
    status 0, as `_isolated` reads it."""

    def __init__(self):
        super().__init__(0)


@contextlib.contextmanager
def trials_only():
    """Commands run inside end once their trials are stored, before their analysis and report:
    each raises `TrialsStored`."""
    from blocklab import launch

    def stored(*args, **kwargs):
        raise TrialsStored

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(launch.Display, "analysing", stored)
        yield

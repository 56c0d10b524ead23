"""Every figure a test saves is checked before it is written: each visible axis has a label, and
a numeric one states its unit in parentheses (the rule is in `_plots`)."""

from __future__ import annotations

import pytest

from _plots import check_labels


@pytest.fixture(autouse=True)
def _figures_state_their_units(monkeypatch):
    from matplotlib.figure import Figure

    savefig = Figure.savefig

    def checked(self, fname, *args, **kwargs):
        check_labels(self, fname)
        return savefig(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", checked)

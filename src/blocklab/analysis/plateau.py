"""Whether a trial plateaued: the criterion a run's rows were read by, and the test of one row
against a tolerance, as the experiments that train to a plateau (the degree sweep, Sanford's
Match, the token suite's width sweep) read their rows."""

from __future__ import annotations

from typing import Any


def plateau_rule(rows) -> str:
    """The plateau criterion the rows were read by (`monitor.TrialMonitor.plateau`): "wsd", the
    run of half the steps against the full run, or "cosine", the fall over the last quarter."""
    return "wsd" if rows and all(r.get("schedule") == "wsd" for r in rows) else "cosine"


def plateaued(r: dict[str, Any], tol: float) -> bool:
    """A finished trial whose more training would have gained less than `tol` of its final
    value (`plateau_improvement`, which the trial measured)."""
    value = r.get("plateau_improvement")
    return r["status"] == "done" and value is not None and value < tol

"""The code that made a trial: a hash of the source of the modules it ran.

A trial's id hashes its config, so an edit to a block's code leaves the id unchanged; the stored
fingerprint is what tells a rerun that a finished trial was made by other code. The modules are
the trial's blocks, task and measures (plugins' modules alike) and the engine every trial runs
through (`ENGINE`); what an experiment decides about a trial is already in its config and id.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

# the modules every trial runs through: the network, the training loops, the task interface
ENGINE = (
    "blocklab.blocks.base",
    "blocklab.fitting.ensemble",
    "blocklab.fitting.fit",  # second-order fits: the fitters and the float64 floor
    "blocklab.jacobian",  # the residuals' Jacobian and J^T J the fitters read
    "blocklab.fitting.converge",  # restarts of second-order fits
    "blocklab.fitting.ladder",  # depth ladders of them
    "blocklab.fitting.continuation",  # a fit continued to a larger budget
    "blocklab.fitting.batched",  # a rung's chains, or a cohort's ladders, fitted as one computation
    "blocklab.fitting.cohorts",  # ladders of one shape climbed together
    "blocklab.fitting.certify",  # when a fit has converged
    "blocklab.fitting.network",  # a trial's data and network, initialized
    "blocklab.engine.trial",  # a trial's run and record
    "blocklab.models",
    "blocklab.fitting.monitor",
    "blocklab.fitting.stacked",
    "blocklab.fitting.stacked_adamw",  # the ensemble's optimizer
    "blocklab.tasks.base",
    "blocklab.fitting.train",
)

# where a recorded module now lives: a stored trial names the modules that made it, and a module
# that only moved (the same text under a new name) must still count as the code that made it
MOVED = {
    f"blocklab.engine.{old}": f"blocklab.fitting.{new}"
    for old, new in {
        "certify": "certify",
        "continuation": "continuation",
        "converge": "converge",
        "ensemble": "ensemble",
        "fit": "fit",
        "fit_batched": "batched",
        "fit_plan": "estimate",
        "fit_timing": "timing",
        "fit_units": "cohorts",
        "ladder": "ladder",
        "monitor": "monitor",
        "stacked": "stacked",
        "stacked_adamw": "stacked_adamw",
        "train": "train",
    }.items()
} | {
    "blocklab.engine.fit_bench": "blocklab.bench.fits",
    "blocklab.fitting.units": "blocklab.fitting.cohorts",
}


def source(module: str) -> bytes | None:
    """The source of an imported (or importable) module, found where it moved to (`MOVED`);
    None when it has none here."""
    module = MOVED.get(module, module)
    mod = sys.modules.get(module)
    if mod is None:
        try:
            mod = importlib.import_module(module)
        except Exception:  # a plugin that is gone, or breaks on import: no source to compare
            return None
    path = getattr(mod, "__file__", None)
    try:
        return Path(path).read_bytes() if path else None
    except OSError:
        return None


def fingerprint(modules: Iterable[str]) -> str | None:
    """16 hex digits over the modules' names (as recorded: a moved module keeps its hash) and
    sources; None when one has no source here."""
    digest = hashlib.sha256()
    for name in sorted(set(modules)):
        text = source(name)
        if text is None:
            return None
        digest.update(name.encode() + b"\0" + hashlib.sha256(text).digest())
    return digest.hexdigest()[:16]


# within `once()`: each set of modules' fingerprint, hashed the first time `code` is asked for it
_hashed: dict[tuple[str, ...], str | None] | None = None


@contextlib.contextmanager
def once() -> Iterator[None]:
    """Within it, `code` hashes each set of modules once: a run that costs its trials and then
    runs them (`engine.sweep.work_left`, `engine.sweep.run`) reads every source once, and a
    module edited meanwhile keeps the fingerprint of the code the run imported. Nested uses
    share the outermost one's."""
    global _hashed
    outer = _hashed
    if outer is None:
        _hashed = {}
    try:
        yield
    finally:
        _hashed = outer


def code(modules: Iterable[str]) -> dict[str, object]:
    """What a stored trial records about the code that made it."""
    names = sorted(set(modules) | set(ENGINE))
    if _hashed is None:
        return {"fingerprint": fingerprint(names), "modules": names}
    key = tuple(names)
    if key not in _hashed:
        _hashed[key] = fingerprint(names)
    return {"fingerprint": _hashed[key], "modules": names}


def moved_only(recorded: dict[str, object] | None, modules: Iterable[str]) -> bool:
    """Whether a stored trial's code record is the code of `modules` now, some of them recorded
    under the names they have since moved from (`MOVED`): the same modules, the same text. Its
    fingerprint differs from theirs, which hashes the names too, yet the trial is current."""
    names = (recorded or {}).get("modules") or ()
    if {MOVED.get(m, m) for m in names} != set(modules):  # type: ignore[union-attr]
        return False
    return is_current(recorded)


def not_imported(recorded: dict[str, object] | None) -> list[str]:
    """The plugins (modules outside the package) of a stored trial's code record that have no
    source here: this process has not imported them and cannot import them by name (a file
    given to `--import` when the trial ran, not given now). Their code is not other code, it is
    code this process cannot read; the package's own modules are never in the list."""
    names = [str(m) for m in (recorded or {}).get("modules") or ()]  # type: ignore[union-attr]
    return sorted(m for m in names if m.partition(".")[0] != "blocklab" and source(m) is None)


def is_current(recorded: dict[str, object] | None) -> bool:
    """Whether a stored trial's code record matches the code here now; a trial stored without
    one was made by code this store cannot tell, so it is not current."""
    if not recorded or not recorded.get("fingerprint"):
        return False
    return fingerprint(recorded.get("modules", ())) == recorded["fingerprint"]

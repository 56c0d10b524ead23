"""A command that imports plugins, run in this process and undone as it ends: a plugin registers
for the life of its process, so a command run here leaves its modules, its registry entries and
its paths behind for the next test. `isolated` runs one as a fresh interpreter would see it, on
`path` and in `cwd` (an interpreter's PYTHONPATH and directory), and then removes every module
the command imported from outside the package and the installed libraries with what they
registered, and forgets the entry points it scanned. A fresh interpreter per command costs
seconds of importing torch; the same commands run through one in `test_plugins` (a module name
and an entry point found on PYTHONPATH) and `test_main_guard` (scripts)."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import blocklab
from blocklab import plugins
from blocklab.blocks import BLOCKS
from blocklab.cli import main
from blocklab.experiments import EXPERIMENTS
from blocklab.measures import MEASURES
from blocklab.tasks import TASKS

REGISTRIES = (BLOCKS, TASKS, MEASURES, EXPERIMENTS)
# where the modules a command may import and keep live: the package and the installed libraries
KEPT = tuple(Path(p).resolve() for p in (blocklab.__path__[0], sys.prefix, sys.base_prefix))


@dataclass(frozen=True)
class Ran:
    """What a command returned and printed, as `subprocess.run` would give it."""

    returncode: int
    stdout: str
    stderr: str


def _ours(module) -> bool:
    """Whether a module comes from the package or an installed library (kept after a command)."""
    files = [getattr(module, "__file__", None), *getattr(module, "__path__", [])]
    files = [Path(f).resolve() for f in files if f]
    return not files or all(any(f.is_relative_to(root) for root in KEPT) for f in files)


def isolated(*args: str, path: tuple[Path, ...] = (), cwd: Path | None = None) -> Ran:
    """`blocklab ARGS` in this process, as in a fresh interpreter on `path` run from `cwd`."""
    modules, sys_path, here = set(sys.modules), list(sys.path), os.getcwd()
    plugged = [r._plugged for r in REGISTRIES]
    stdout, stderr = io.StringIO(), io.StringIO()
    sys.path[:0] = [str(Path(p).resolve()) for p in path]
    importlib.invalidate_caches()  # files written since a folder was last read
    plugins._entry_points.cache_clear()  # read again, on the new path
    for registry in REGISTRIES:  # each scans its entry points on its first lookup, as in a new one
        registry._plugged = registry.group is None
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main(list(args))
            except SystemExit as exit:  # `--help`, as the interpreter would end
                code = exit.code or 0
    finally:
        os.chdir(here)
        sys.path[:] = sys_path
        for name in set(sys.modules) - modules:
            if not _ours(sys.modules[name]):
                del sys.modules[name]
        # what the removed modules registered goes with them; what the package registered as
        # it imported more of itself stays, as its modules do
        for registry, was in zip(REGISTRIES, plugged, strict=True):
            for name, entry in list(registry._items.items()):
                if entry.__module__ not in sys.modules:
                    del registry._items[name]
            registry._plugged = was
        plugins._entry_points.cache_clear()
    return Ran(code, stdout.getvalue(), stderr.getvalue())

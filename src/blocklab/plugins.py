"""Blocks, tasks and measures from outside the package.

A plugin is a module that registers entries the way the package's own files do
(`@BLOCKS.register` on a `Block` subclass, named after its module). Three ways in:

- `--import MODULE_OR_PATH` on any command, or `import = [...]` in a TOML config: a dotted
  module name (importable from `sys.path`), or a `.py` file, imported under its file stem, so
  `my_block.py` adds block `my_block`. A spec is a file when it ends in `.py` or holds a `/`.
- entry points of installed distributions, in the groups of `GROUPS`: a registry loads its group
  on its first lookup (`registry.Registry`), so commands that look nothing up never pay for the
  scan.

Loading a plugin twice is a no-op, and a plugin that fails is one `UserError` naming it. Pool
workers start with the package's own entries only: what they must import travels with the work
as `canonical` specs (`executors.Resources.plugins`). No torch here.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from blocklab.errors import UserError

GROUPS = {"block": "blocklab.blocks", "task": "blocklab.tasks", "measure": "blocklab.measures"}


def is_path(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def canonical(spec: str, base: str | Path | None = None) -> str:
    """A file's absolute path (a relative one read from `base`, else the working directory), so a
    worker elsewhere finds it; a module name as given."""
    spec = str(spec).strip()
    if not spec:
        raise UserError("--import needs a module name or a .py file")
    if not is_path(spec):
        return spec
    path = Path(spec).expanduser()
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return str(path.resolve())


def load(specs: Iterable[str], base: str | Path | None = None) -> tuple[str, ...]:
    """Import each plugin once; returns their canonical specs, in order, without repeats."""
    out: list[str] = []
    for spec in specs:
        resolved = canonical(spec, base)
        if is_path(resolved):
            _load_file(resolved, given=spec)
        else:
            _load_module(resolved)
        if resolved not in out:
            out.append(resolved)
    return tuple(out)


def _failed(what: str, exc: BaseException) -> UserError:
    message = " ".join(str(exc).split())  # one line, whatever the plugin's message holds
    return UserError(f"{what} failed to import: {type(exc).__name__}: {message}")


def _load_module(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception as exc:
        raise _failed(f"plugin {name!r}", exc) from None


def _load_file(path: str, given: str) -> None:
    file = Path(path)
    if not file.is_file():
        raise UserError(f"plugin {given!r}: no such file {path}")
    name = file.stem
    if not name.isidentifier():
        raise UserError(
            f"plugin {given!r}: the file's name must be a Python identifier "
            f"(it names the module and what it registers)"
        )
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        if where and Path(where).resolve() == file:
            return
        raise UserError(
            f"plugin {given!r}: module name {name!r} is already taken "
            f"(by {where or 'a built-in module'}); rename the file"
        )
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise UserError(f"plugin {given!r}: cannot be imported as a module")
    module = importlib.util.module_from_spec(spec)
    # in sys.modules before it runs, as an import would be: pickle and `factory=` find it there
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise _failed(f"plugin {given!r}", exc) from None


@functools.lru_cache(maxsize=1)
def _entry_points():
    from importlib import metadata

    return metadata.entry_points()


def load_entry_points(group: str) -> None:
    """Import every entry point of `group` (each names a module, or an object in one, whose
    import registers its entries)."""
    for ep in _entry_points().select(group=group):
        try:
            ep.load()
        except Exception as exc:
            what = f"plugin {ep.name} = {ep.value} (entry point group {group})"
            raise _failed(what, exc) from None

"""One registry per kind (blocks, tasks, measures, experiments): name -> class; duplicates fail,
typos hint. A registry with an entry-point group loads its plugins (`blocklab.plugins`) on its
first lookup or listing, not at import: `blocklab --help` never scans the installed packages."""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from typing import Generic, TypeVar

from blocklab.errors import UserError
from blocklab.plugins import load_entry_points

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, group: str | None = None):
        self.kind = kind
        self.group = group  # the entry-point group of this kind's plugins
        self._items: dict[str, T] = {}
        self._plugged = group is None

    def _plug(self) -> None:
        """Load the entry points once; a failure is raised again at the next lookup."""
        if self._plugged:
            return
        self._plugged = True  # first: a plugin that looks names up while loading must not recurse
        try:
            load_entry_points(self.group)
        except BaseException:
            self._plugged = False
            raise

    def register(self, cls: T) -> T:
        """Class decorator; the name is the entry's (`entry_name`): one family per file, one
        experiment per home."""
        name = entry_name(cls.__module__)
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        cls.name = name  # type: ignore[attr-defined]
        self._items[name] = cls
        return cls

    def get(self, name: str) -> T:
        self._plug()
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._items, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(sorted(self._items))
            raise UserError(f"unknown {self.kind} {name!r}{hint} (known: {known})") from None

    def names(self) -> list[str]:
        self._plug()
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        self._plug()
        return name in self._items


def entry_name(module: str) -> str:
    """What a class defined in `module` registers as: an experiment whose home is a package under
    `blocklab.experiments` (`blocklab.experiments.<home>.<module>`) by its home, so the home's
    modules may be named for what they hold; anything else by its module's last component."""
    parts = module.split(".")
    if len(parts) > 3 and parts[:2] == ["blocklab", "experiments"]:
        return parts[2]
    return parts[-1]


def import_submodules(package_name: str) -> None:
    """Import every module of a package so its `@register` decorators run (one file, one entry)."""
    package = importlib.import_module(package_name)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_") and info.name != "base":
            importlib.import_module(f"{package_name}.{info.name}")

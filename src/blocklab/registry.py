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
    def __init__(self, kind: str, group: str | None = None, home: str | None = None):
        self.kind = kind
        self.group = group  # the entry-point group of this kind's plugins
        # a package whose entries each live in a subpackage of their own, named after it
        # (`blocklab.experiments`: `blocklab.experiments.collapse.experiment` is `collapse`)
        self.home = home
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

    def name_of(self, module: str) -> str:
        """The name an entry defined in `module` registers under: within `home`, the subpackage
        directly under it; anywhere else, the module's own name (one family per file)."""
        if self.home and module.startswith(f"{self.home}."):
            return module[len(self.home) + 1 :].split(".")[0]
        return module.rsplit(".", 1)[-1]

    def register(self, cls: T) -> T:
        """Class decorator; the name is `name_of` the defining module."""
        name = self.name_of(cls.__module__)
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


# a family's modules that hold its base types, not an entry
NOT_ENTRIES = ("base", "manifest")


def import_submodules(package_name: str) -> None:
    """Import every module and subpackage of a package so its `@register` decorators run: a
    family's entries, a module each (blocks, tasks, measures) or a home each (experiments, whose
    home's `__init__` imports its manifest). Private modules (`_trials`) and the base types
    (`NOT_ENTRIES`) register nothing and are left out."""
    package = importlib.import_module(package_name)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_") and info.name not in NOT_ENTRIES:
            importlib.import_module(f"{package_name}.{info.name}")

"""What every executor is (`engine.executors` runs them on a local pool, `engine.clusters` on Ray
or Slurm): an `Executor` runs a picklable `fn(item, device)` on each item and yields
`(index, result)` as items finish; a worker that died raises `WorkerLost`; `call_in_worker` is
what a Ray task or a Slurm job runs on each item, as a pool worker runs it: the plugins it is given
imported first, torch at the worker's thread count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from blocklab import plugins as plugin_loader


class WorkerLost(RuntimeError):
    """A worker process or job died (killed, out of memory, preempted) before returning."""


class Executor:
    name = ""

    def __init__(self, workers: int, options: dict[str, Any], plugins: tuple[str, ...] = ()):
        self.workers = max(1, workers)
        self.options = options
        self.plugins = tuple(plugins)  # canonical specs each worker imports first

    def imap_unordered(
        self, fn: Callable, items: Iterable, device: str
    ) -> Iterator[tuple[int, Any]]:
        """Yield (index, fn(item, device)) as each finishes, index counting the items as read.

        Consume it in a for loop (or close it): leaving the loop early stops the running work.
        """
        raise NotImplementedError


def call_in_worker(
    fn: Callable, item: Any, device: str, threads: int, plugins: tuple[str, ...] = ()
) -> Any:
    import torch

    plugin_loader.load(plugins)
    torch.set_num_threads(threads)
    return fn(item, device)

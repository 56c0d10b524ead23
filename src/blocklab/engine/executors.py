"""Where a sweep's batches of work run: in this process, on a Ray cluster, or as Slurm jobs.

Every executor runs a picklable `fn(item, device)` on each item and yields `(index, result)` as
items finish, in completion order; index counts the items in the order they were read. The local
executor reads an item only when a worker is free for it, so a sweep leases a batch just before it
starts (`blocklab.engine.leases`); Ray and Slurm read all at the start. Executors only compute; the
calling process is the one writer of the store, so a worker that dies loses at most the items it
was running, and a rerun resumes from what was stored.

- local: this process (one worker, or one item), or a pool of worker processes (`pool_context`).
- ray (`clusters.RayExecutor`): Ray core tasks, on the cluster at `address=...` or on a local
  Ray instance started (and stopped) here with one CPU per worker. A HOST:PORT address that
  accepts no connection fails within seconds, in one line (ray.init itself would retry for many
  minutes).
- slurm (`clusters.SlurmExecutor`): a submitit job array; `cluster=local` runs the same jobs as
  processes on this machine.

Each worker runs torch with one thread per CPU it holds (one, unless options say more): for small
models two single-threaded processes beat one process with two threads. On any exception, here
or in the loop that consumes the results (Ctrl-C included), running work stops at once and the
exception is raised again; a worker that died raises WorkerLost. A pool worker dies with the
process that started it, however that one dies (kill -9 included): orphaned, it would finish its
work in hand and then wait for more forever.

A worker imports the plugins it is given (`blocklab.plugins`) before it runs anything, so a
block from a plugin resolves by name there as in the parent: pool workers and cluster jobs
start with the package's own entries only.

`Resources` gathers what a sweep is told about where its trials run. torch is imported only
where threads are set, so the command line can name executors and their defaults without it.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import multiprocessing
import os
import tempfile
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from blocklab.engine.executor_base import Executor, WorkerLost
from blocklab.engine.processes import (
    check_main_importable,
    hangup_held,
    init_worker,
    why_died,
)
from blocklab.errors import UserError

EXECUTORS = ("local", "ray", "slurm")
ENSEMBLE = 16  # most members per ensemble: past this, batching gains little and holds memory

# the options each executor takes, with their types: they arrive as strings from the command line
OPTIONS: dict[str, dict[str, type]] = {
    # threads: torch threads per worker process (1 by default: see the module docstring)
    "local": {"threads": int},
    "ray": {"address": str, "num_cpus": float, "num_gpus": float, "max_retries": int},
    "slurm": {
        **dict.fromkeys(("folder", "cluster", "partition", "account", "qos", "constraint"), str),
        **dict.fromkeys(("time", "cpus_per_task", "gpus_per_node", "array_parallelism"), int),
        **dict.fromkeys(("mem_gb", "poll"), float),
    },
}


@contextlib.contextmanager
def worker_threads(threads: int):
    """This process at a worker's torch thread count while inside, the count before restored
    after: for work run here as a worker would run it (a trial that needs no pool, or a fit's
    cost timed at the rate a worker will see)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class LocalExecutor(Executor):
    name = "local"

    def imap_unordered(self, fn, items, device):
        items = iter(items)
        # a look at the first two: one item alone runs here, without starting a pool
        first = list(itertools.islice(items, 2 if self.workers > 1 else 0))
        threads = self.options.get("threads", 1)
        if self.workers <= 1 or len(first) <= 1:
            for i, item in enumerate(itertools.chain(first, items)):
                with worker_threads(threads):  # as in a pool worker: results do not depend on it
                    result = fn(item, device)
                yield i, result
            return
        check_main_importable()  # before any worker starts: a worker that cannot import it hangs
        context = pool_context()
        env = dict(os.environ)  # a forked worker starts with the fork server's: it takes this one
        fd, report = tempfile.mkstemp(prefix="blocklab-worker-")  # where a failed start says why
        os.close(fd)
        # a file the workers count themselves in as they start, each to take the next GPU (a file
        # lock, not a semaphore: multiprocessing's tracker complains of those on a hangup)
        slots = f"{report}.slots" if device == "cuda" else None
        with hangup_held():  # the pool starts multiprocessing's resource tracker
            pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=context,
                initializer=init_worker,
                initargs=(os.getpid(), self.plugins, threads, device, slots, report, env),
            )
        queue = enumerate(itertools.chain(first, items))
        pending: dict = {}
        started: dict = {}  # pid -> process: the pool forgets a dead one, its exit code with it
        try:
            while True:
                # one item per free worker: the next is read only when a worker can start it
                for i, item in itertools.islice(queue, self.workers - len(pending)):
                    with hangup_held():  # a submit may start a worker
                        pending[pool.submit(fn, item, device)] = i
                    started.update(pool._processes or {})
                if not pending:
                    break
                ready, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in ready:
                    yield pending.pop(future), future.result()
        except BrokenProcessPool as exc:
            _stop(pool)
            raise WorkerLost(why_died(report, started.values())) from exc
        except BaseException:
            _stop(pool)
            raise
        finally:
            for path in filter(None, (report, slots)):
                with contextlib.suppress(OSError):
                    os.remove(path)
        pool.shutdown()


# what every pool worker imports before its first trial: torch and the trial's code, and torch's
# compiler front end, which a torch optimizer imports as it is made (a second or so on a CPU)
PRELOAD = ("torch", "torch._dynamo", "blocklab.engine.trial", "blocklab.engine.processes")


def pool_context():
    """How pool workers start: forked from one server process per command, which imports PRELOAD
    once, where the platform has one (`forkserver`); else each spawned, a fresh interpreter that
    imports torch itself (seconds of CPU a worker). A forked worker is as fresh as a spawned one: it
    holds no state of the command (the server forks before it runs anything but imports), imports
    the command's main script and plugins itself, and takes the command's path, directory and
    environment as it starts (`processes.init_worker`)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def _stop(pool: ProcessPoolExecutor) -> None:
    # terminate rather than wait: what is running is lost anyway, what finished was handed back
    for process in list((pool._processes or {}).values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


def make_executor(
    name: str,
    workers: int,
    options: dict[str, str] | None = None,
    plugins: tuple[str, ...] = (),
) -> Executor:
    if name not in EXECUTORS:
        close = difflib.get_close_matches(name, EXECUTORS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UserError(f"unknown executor {name!r}{hint} (known: {', '.join(EXECUTORS)})")
    known, typed = OPTIONS[name], {}
    for key, value in (options or {}).items():
        if key not in known:
            names = ", ".join(sorted(known)) or "none"
            raise UserError(f"unknown option {key!r} for the {name} executor (known: {names})")
        try:
            typed[key] = known[key](value)
        except (TypeError, ValueError):
            kind = {str: "text", int: "an integer", float: "a number"}[known[key]]
            raise UserError(f"executor option {key}={value!r} must be {kind}") from None
    if typed.get("threads", 1) < 1:
        raise UserError(f"executor option threads={typed['threads']} must be >= 1")
    if name == "local":
        return LocalExecutor(workers, typed, plugins)
    from blocklab.engine import clusters  # their extras are imported when they run

    return {"ray": clusters.RayExecutor, "slurm": clusters.SlurmExecutor}[name](
        workers, typed, plugins
    )


WORKERS_ENV = "BLOCKLAB_WORKERS"


def default_workers() -> int:
    """The processes a command starts when `--workers` is not given: `BLOCKLAB_WORKERS` where it
    is set (a machine shared with other work, or a test run whose own workers each take their
    share of the cores), else one per CPU core, at most 8."""
    given = os.environ.get(WORKERS_ENV, "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            raise UserError(f"{WORKERS_ENV} must be a whole number >= 1, got {given!r}")
        return int(given)
    return max(1, min(os.cpu_count() or 1, 8))


@dataclass(frozen=True)
class Resources:
    """Where and how a sweep's trials run; none of it is part of a trial, so results and ids do
    not depend on it. Trials sharing an architecture train as ensembles of up to `ensemble`
    members (1: each alone); the batches of work run on `executor` with `workers` processes or
    tasks, each of which first imports `plugins` (canonical specs, `plugins.load`)."""

    workers: int = 1
    device: str = "auto"
    ensemble: int = ENSEMBLE
    executor: str = "local"
    executor_options: dict[str, str] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()

    @property
    def threads(self) -> int:
        """The torch threads each worker runs with."""
        return int(self.executor_options.get("threads", 1))

    def __post_init__(self):
        for name in ("workers", "ensemble"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name} must be >= 1, got {getattr(self, name)}")
        make_executor(self.executor, self.workers, self.executor_options)  # checks name, options

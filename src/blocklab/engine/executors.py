"""Where a sweep's units of work run: in this process, on a Ray cluster, or as Slurm jobs.

Every executor runs a picklable `fn(item, device)` on each item and yields `(index, result)` as
items finish, in completion order; index counts the items in the order they were read. The local
executor reads an item only when a worker is free for it, so a sweep claims a unit just before it
starts (`blocklab.engine.claims`); Ray and Slurm read all at the start. Executors only compute; the
calling process is the one writer of the store, so a worker that dies loses at most the items it
was running, and a rerun resumes from what was stored.

- local: this process (one worker, or one item), or a pool of spawned processes.
- ray: Ray core tasks, on the cluster at `address=...` or on a local Ray instance started (and
  stopped) here with one CPU per worker. A HOST:PORT address that accepts no connection fails
  within seconds, in one line (ray.init itself would retry for many minutes).
- slurm: a submitit job array; `cluster=local` runs the same jobs as processes on this machine.

Each worker runs torch with one thread per CPU it holds (one, unless options say more): for small
models two single-threaded processes beat one process with two threads. On any exception, here
or in the loop that consumes the results (Ctrl-C included), running work stops at once and the
exception is raised again; a worker that died raises WorkerLost. A pool worker dies with the
process that started it, however that one dies (kill -9 included): orphaned, it would finish its
work in hand and then wait for more forever.

A worker imports the plugins it is given (`blocklab.plugins`) before it runs anything, so a
block from a plugin resolves by name there as in the parent: spawned processes and cluster jobs
start with the package's own entries only.

`Resources` gathers what a sweep is told about where its trials run. torch is imported only
where threads are set, so the command line can name executors and their defaults without it.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import itertools
import logging
import multiprocessing
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from blocklab import plugins as plugin_loader
from blocklab.engine.processes import (
    check_main_importable,
    hangup_held,
    init_worker,
    interruptible_children,
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
SLURM_TIME = 24 * 60  # minutes; submitit's own default (5) would kill most trials
REACH_SECONDS = 10.0  # how long a Ray cluster's address may take to accept a connection


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


def _call(fn: Callable, item: Any, device: str, threads: int, plugins: tuple[str, ...] = ()) -> Any:
    import torch

    plugin_loader.load(plugins)
    torch.set_num_threads(threads)
    return fn(item, device)


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
        context = multiprocessing.get_context("spawn")
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
                initargs=(os.getpid(), self.plugins, threads, device, slots, report),
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


def _stop(pool: ProcessPoolExecutor) -> None:
    # terminate rather than wait: what is running is lost anyway, what finished was handed back
    for process in list((pool._processes or {}).values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


class RayExecutor(Executor):
    name = "ray"

    def connect(self) -> bool:
        """Connect to Ray unless connected; True when this call did (and so should disconnect)."""
        ray = _import("ray", "ray")
        if ray.is_initialized():
            return False
        address = self.options.get("address")
        if address:
            check_reachable(address)
        # no address: Ray starts a local instance, which must not take more CPUs than workers
        start = {} if address else {"num_cpus": self.workers, "include_dashboard": False}
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, **start)
        except ConnectionError as exc:
            raise UserError(f"cannot connect to the Ray cluster at {address}: {exc}") from None
        return True

    def imap_unordered(self, fn, items, device):
        items = list(items)
        if not items:
            return
        ray = _import("ray", "ray")
        lost = (
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.OutOfMemoryError,
            ray.exceptions.ObjectLostError,
            ray.exceptions.LocalRayletDiedError,
        )
        cpus = self.options.get("num_cpus", 1)
        task = ray.remote(_call).options(
            num_cpus=cpus,
            # Ray hides every GPU from a task that asks for none
            num_gpus=self.options.get("num_gpus", 1 if device.startswith("cuda") else 0),
            # a dead worker stops the sweep, as with the other executors; a rerun resumes
            max_retries=self.options.get("max_retries", 0),
        )
        connected = self.connect()
        pending = {}
        try:
            for i, item in enumerate(items):
                pending[task.remote(fn, item, device, max(1, int(cpus)), self.plugins)] = i
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                index = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except lost as exc:
                    raise WorkerLost(f"the Ray worker running item {index} died: {exc}") from exc
                yield index, result
        except BaseException:
            with contextlib.suppress(Exception):
                for ref in pending:
                    ray.cancel(ref, force=True)
            raise
        finally:
            if connected:  # stops a local instance this started; only disconnects from a cluster
                ray.shutdown()


def check_reachable(address: str, timeout: float = REACH_SECONDS) -> None:
    """Raise a one-line UserError unless something accepts a connection at a HOST:PORT (or
    ray://HOST:PORT) address within `timeout` seconds. ray.init retries an unreachable cluster
    for many minutes, printing a warning every few seconds; a wrong address should cost seconds.
    Other forms ("auto", "local") are left to Ray, which resolves and reports them itself."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:  # refused, timed out, no such host
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise UserError(
            f"cannot reach the Ray cluster at {address}: {reason} "
            "(is `ray start --head` running there, and the port open?)"
        ) from None


class SlurmExecutor(Executor):
    name = "slurm"

    def imap_unordered(self, fn, items, device):
        items = list(items)
        if not items:
            return
        submitit = _import("submitit", "slurm")
        from submitit.core.utils import FailedJobError, UncompletedJobError

        options = self.options
        cluster = options.get("cluster", "slurm")
        try:
            executor = submitit.AutoExecutor(options.get("folder", "submitit"), cluster=cluster)
        except (ValueError, RuntimeError) as exc:  # an unknown cluster, or no Slurm here
            raise UserError(f"slurm executor: {exc} (cluster=local runs jobs here)") from None
        cpus = options.get("cpus_per_task", 1)
        parallel = options.get("array_parallelism", self.workers)
        executor.update_parameters(  # None leaves a parameter to the cluster's default
            timeout_min=options.get("time", SLURM_TIME),
            cpus_per_task=cpus,
            mem_gb=options.get("mem_gb"),
            gpus_per_node=options.get("gpus_per_node", 1 if device.startswith("cuda") else None),
            slurm_array_parallelism=parallel,
            **{f"slurm_{k}": options.get(k) for k in ("partition", "account", "qos", "constraint")},
        )
        run = functools.partial(_call, fn, device=device, threads=cpus, plugins=self.plugins)
        # Slurm throttles an array itself; submitit's local executor would start every job at once
        limit = len(items) if cluster == "slurm" else parallel
        todo, running = list(range(len(items))), []
        try:
            while todo or running:
                batch, todo = todo[: limit - len(running)], todo[limit - len(running) :]
                if batch:
                    with interruptible_children():  # local jobs are cancelled by SIGINT
                        jobs = executor.map_array(run, [items[i] for i in batch])
                    running += zip(jobs, batch, strict=True)
                finished = [(job, i) for job, i in running if job.done()]
                if not finished:
                    time.sleep(options.get("poll", 0.5))
                for job, index in finished:
                    running.remove((job, index))
                    try:
                        result = job.result()
                    except UncompletedJobError as exc:
                        how = "raised" if isinstance(exc, FailedJobError) else "died"
                        raise WorkerLost(
                            f"job {job.job_id} (item {index}) {how}; its log: {job.paths.stderr}"
                        ) from exc
                    yield index, result
        except BaseException:
            with contextlib.suppress(Exception):
                for job, _ in running:
                    job.cancel(check=False)
            raise


def _import(module: str, extra: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(
            f"the {extra} executor needs the extra: pip install 'blocklab[{extra}]'"
        ) from None


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
    classes = {"local": LocalExecutor, "ray": RayExecutor, "slurm": SlurmExecutor}
    return classes[name](workers, typed, plugins)


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
    members (1: each alone); the units of work run on `executor` with `workers` processes or
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

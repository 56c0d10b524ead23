"""The executors that run a sweep's batches elsewhere: Ray core tasks (`RayExecutor`) on a cluster
or a local Ray instance, and Slurm job arrays through submitit (`SlurmExecutor`). Each runs
`executor_base.call_in_worker` on every item, as a pool worker does, and yields results as they
finish; `executors.make_executor` builds them from the command line's options. Their extras (`ray`,
`submitit`) are imported when they run, with a one-line error naming the extra to install."""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import socket
import time

from blocklab.engine.executor_base import Executor, WorkerLost, call_in_worker
from blocklab.engine.processes import interruptible_children
from blocklab.errors import UserError

SLURM_TIME = 24 * 60  # minutes; submitit's own default (5) would kill most trials
REACH_SECONDS = 10.0  # how long a Ray cluster's address may take to accept a connection


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
        task = ray.remote(call_in_worker).options(
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
        run = functools.partial(
            call_in_worker, fn, device=device, threads=cpus, plugins=self.plugins
        )
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

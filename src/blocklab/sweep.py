"""Running trials: a trial is a frozen spec; a sweep runs the unfinished ones in a process pool.

Workers use one torch thread each: for small models two single-threaded processes beat one
process with two threads. Only the parent writes to the store, one commit per finished trial.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch

from blocklab import __version__
from blocklab.errors import UserError
from blocklab.models import Arm, Net
from blocklab.store import Store
from blocklab.tasks import TaskData, make_task
from blocklab.train import TrainConfig, as_record, train


@dataclass(frozen=True)
class TrialSpec:
    task: str
    task_options: dict[str, Any]
    arm: Arm
    budget: int
    depth: int
    width: int
    bias: bool
    norm: str
    activation: str
    residual: bool
    train: TrainConfig
    seed: int
    data_seed: int | None = None  # None: the task's data follow the trial seed
    ff: str = "none"  # feed-forward sublayer per layer (models.FEED_FORWARD)
    flatten: bool = False  # a sequence task fed as one flat vector (fully connected baseline)
    # measures taken at initialization and after training, e.g. ("collapse", "seprank(templates=3)")
    measures: tuple[str, ...] = ()

    def config(self) -> dict[str, Any]:
        config = dataclasses.asdict(self)
        if not self.measures:  # trials without measures keep the ids they always had
            del config["measures"]
        return config

    @functools.cached_property
    def id(self) -> str:
        text = json.dumps(self.config(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        shape = f"L={self.depth} w={self.width} lr={self.train.lr:g}"
        return f"{self.task} B={self.budget} {self.arm.label} {shape} seed={self.seed}"


class WorkerDied(RuntimeError):
    def __init__(self, finished: int):
        super().__init__(
            f"a worker process died (killed, or out of memory); {finished} finished trials are kept"
        )
        self.finished = finished


class Interrupted(Exception):
    def __init__(self, finished: int):
        super().__init__(f"interrupted; {finished} finished trials are kept")
        self.finished = finished


@functools.lru_cache(maxsize=4)
def task_data(task: str, options_json: str, seed: int) -> TaskData:
    """A task's data, cached: trials and shape checks that share a task make it once."""
    return make_task(task, **json.loads(options_json)).make(seed)


def device_name(requested: str = "auto") -> str:
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def _to(split, device):
    return dataclasses.replace(split, x=split.x.to(device), y=split.y.to(device))


def build_model(spec: TrialSpec, data: TaskData) -> Net:
    """The network a spec describes, shaped for the task's data."""
    # sequences embed each position's features; vectors are flattened
    n_in = data.input_shape[-1] if data.sequence else math.prod(data.input_shape)
    return Net(
        spec.arm,
        spec.depth,
        spec.width,
        n_in,
        data.n_out,
        seq_len=data.seq_len,
        pooled=data.sequence and not data.per_position,
        flatten=spec.flatten,
        bias=spec.bias,
        norm=spec.norm,
        activation=spec.activation,
        residual=spec.residual,
        ff=spec.ff,
        vocab=data.vocab,
    )


def run_trial(spec: TrialSpec, device: str = "cpu") -> dict[str, Any]:
    """Build data and model from the spec and train; exceptions become a 'failed' record."""
    base = {"id": spec.id, "seed": spec.seed, "config": spec.config()}
    try:
        task = make_task(spec.task, **spec.task_options)
        data_seed = spec.seed if spec.data_seed is None else spec.data_seed
        data = task_data(spec.task, json.dumps(spec.task_options, sort_keys=True), data_seed)
        data = dataclasses.replace(
            data,
            train=_to(data.train, device),
            val=_to(data.val, device),
            test=_to(data.test, device),
        )
        torch.manual_seed(spec.seed)  # the initialization follows the trial seed
        model = build_model(spec, data).to(device)
        at_init = take_measures(spec, model, data)
        threshold = spec.train.threshold if spec.train.threshold is not None else task.threshold
        result = train(model, data, spec.train, spec.seed, threshold)
        record = {**base, **as_record(result)}
        record["metrics"].update(
            metric=task.metric,
            higher_is_better=task.higher_is_better,
            params=model.param_counts(),
            device=device,
        )
        if spec.measures:
            trained = take_measures(spec, model, data)
            record["metrics"]["measures"] = {
                name: {"init": at_init[name], "trained": trained[name]} for name in spec.measures
            }
        return record
    except Exception as exc:  # a broken trial must not stop the sweep; it is retried next run
        tail = traceback.format_exc(limit=-3)
        return {
            **base,
            "status": "failed",
            "metrics": {},
            "curves": {},
            "error": f"{type(exc).__name__}: {exc}\n{tail}",
        }


MEASURE_INPUTS = 64  # test sequences a trial's measures read


def take_measures(spec: TrialSpec, model: Net, data: TaskData) -> dict[str, dict[str, Any]]:
    """Each of the spec's measures on the model, fed the first test inputs of the task."""
    from blocklab.measures import parse_measure

    if not spec.measures:
        return {}
    if data.vocab is not None:
        raise UserError("measures read float inputs; a token task feeds ids")
    x = data.test.x[:MEASURE_INPUTS]  # (B, T, F)
    if not data.sequence:  # a vector's coordinates are its variables
        x = x.reshape(x.shape[0], -1, 1)  # (B, F, 1)
    seq_len, dim = x.shape[1], x.shape[2]
    was_training = model.training
    model.eval()
    try:
        return {
            text: parse_measure(text).measure(model, seq_len, dim, spec.seed, inputs=x)
            for text in spec.measures
        }
    finally:
        model.train(was_training)


def _init_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops the pool
    torch.set_num_threads(1)


def _git_commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.lru_cache(maxsize=1)
def provenance(device: str = "cpu") -> dict[str, Any]:
    import numpy

    return {
        "blocklab": __version__,
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "device": device if device != "cuda" else torch.cuda.get_device_name(0),
        "host": platform.node(),
        "platform": platform.platform(),
    }


class Progress:
    """A tqdm bar on a terminal, one plain line per trial otherwise."""

    def __init__(self, total: int, label: str, enabled: bool = True):
        self.total, self.count, self.label, self.bar = total, 0, label, None
        self.enabled = enabled and total > 0
        if self.enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit="trial", file=sys.stderr)

    def update(self, spec: TrialSpec, record: dict[str, Any]) -> None:
        self.count += 1
        if not self.enabled:
            return
        m = record.get("metrics", {})
        value = m.get("test_metric")
        what = f"{m.get('metric')}={value:.4g}" if value is not None else record["status"]
        if self.bar is not None:
            self.bar.set_postfix_str(f"{spec.arm.label} {what}", refresh=False)
            self.bar.update(1)
        else:
            print(
                f"[{self.label} {self.count}/{self.total}] {spec.describe()}: {what} "
                f"({m.get('seconds', 0):.1f}s)",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(
    specs: Iterable[TrialSpec],
    store: Store,
    experiment: str,
    *,
    workers: int = 1,
    device: str = "auto",
    label: str = "trials",
    progress: bool = True,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run every spec not finished in the store; return {id: stored record} for all specs."""
    specs = list({s.id: s for s in specs}.values())  # identical trials run once
    done = store.finished(s.id for s in specs)
    todo = [s for s in specs if s.id not in done]
    device = device_name(device)
    prov = provenance(device)
    bar = Progress(len(todo), label, enabled=progress)
    finished = 0

    def save(spec: TrialSpec, record: dict[str, Any]) -> None:
        nonlocal finished
        record.update(experiment=experiment, provenance=prov, finished_at=time.time())
        store.put(record)
        finished += 1
        bar.update(spec, record)
        if on_record:
            on_record(record)

    try:
        if workers <= 1 or len(todo) <= 1 or device == "cuda":
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                for spec in todo:
                    save(spec, run_trial(spec, device))
            finally:
                torch.set_num_threads(threads)
        else:
            _run_pool(todo, workers, device, save)
    except KeyboardInterrupt:
        raise Interrupted(finished) from None
    except BrokenProcessPool:
        raise WorkerDied(finished) from None
    finally:
        bar.close()
    return {r["id"]: r for r in store.records(ids=[s.id for s in specs])}


def _run_pool(todo, workers, device, save) -> None:
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(todo)),
        mp_context=get_context("spawn"),
        initializer=_init_worker,
    )
    try:
        pending = {pool.submit(run_trial, spec, device): spec for spec in todo}
        while pending:
            ready, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in ready:
                save(pending.pop(fut), fut.result())
    except BaseException:
        # stop at once: running trials are lost (they are not finished), finished ones are stored
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))

"""Running trials: a trial is a frozen spec (`blocklab.specs`); a sweep runs the unfinished ones.

Trials that share an architecture train together as one ensemble (`blocklab.engine.ensemble`), and
the units of work run on an executor (`blocklab.engine.executors`: a local process pool by default,
Ray or Slurm). Workers use one torch thread each: for small models two single-threaded processes
beat one process with two threads. Only the parent writes to the store, one commit per finished unit
of work; sweeps sharing a store split its trials (`blocklab.engine.claims`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from blocklab.engine import converge
from blocklab.engine.claims import POLL, Claims
from blocklab.engine.devices import device_name
from blocklab.engine.ensemble import train_ensemble
from blocklab.engine.executors import Resources, WorkerLost, make_executor
from blocklab.engine.monitor import as_record
from blocklab.engine.progress import Progress, display
from blocklab.engine.provenance import provenance
from blocklab.engine.reuse import other_precision, stored_since, trial_precision
from blocklab.engine.train import train
from blocklab.errors import Interrupted, UserError, WorkerDied
from blocklab.fingerprint import code
from blocklab.models import Net
from blocklab.models import code_modules as arm_modules
from blocklab.specs import TrialSpec, ensemble_key, plan_units
from blocklab.store import Store
from blocklab.tasks import TaskData, make_task


@functools.lru_cache(maxsize=4)
def task_data(task: str, options_json: str, seed: int) -> TaskData:
    """A task's data, cached: trials and shape checks that share a task make it once."""
    return make_task(task, **json.loads(options_json)).make(seed)


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
        bottleneck=data.bottleneck,
        flatten=spec.flatten,
        bias=spec.bias,
        norm=spec.norm,
        activation=spec.activation,
        residual=spec.residual,
        ff=spec.ff,
        vocab=data.vocab,
        scaled_residual=spec.scaled_residual,
    )


@dataclass
class _Prepared:
    """A trial's task, data on the device, freshly initialized network and threshold."""

    task: Any
    data: TaskData
    model: Net
    threshold: float


def _prepare(spec: TrialSpec, device: str, cache: dict | None = None) -> _Prepared:
    """The trial's data (shared through `cache` by members reading the same), its network
    initialized by the trial seed, and its threshold."""
    task = make_task(spec.task, **spec.task_options)
    data_seed = spec.seed if spec.data_seed is None else spec.data_seed
    cache = {} if cache is None else cache
    if data_seed not in cache:  # members of one ensemble reading the same data share it
        data = task_data(spec.task, json.dumps(spec.task_options, sort_keys=True), data_seed)
        moved = {split: _to(getattr(data, split), device) for split in ("train", "val", "test")}
        cache[data_seed] = dataclasses.replace(data, **moved)
    data = cache[data_seed]
    model = init_model(spec, data, device, spec.seed)  # the initialization follows the trial seed
    threshold = spec.train.threshold if spec.train.threshold is not None else task.threshold
    return _Prepared(task, data, model, threshold)


def init_model(spec: TrialSpec, data: TaskData, device: str, seed: int) -> Net:
    """The spec's network, initialized by `seed`, its unused parameters frozen."""
    torch.manual_seed(seed)
    model = build_model(spec, data).to(device)
    model.freeze_unused(data.train.x[:2])
    return model


def _record(spec: TrialSpec, p: _Prepared, result, device: str) -> dict[str, Any]:
    record = {"id": spec.id, "seed": spec.seed, "config": spec.config(), **as_record(result)}
    record["metrics"].update(
        metric=p.task.metric,
        higher_is_better=p.task.higher_is_better,
        params=p.model.param_counts(),
        device=device,
        precision=trial_precision(spec, device),
    )
    return record


def _failed(spec: TrialSpec) -> dict[str, Any]:
    tail = traceback.format_exc(limit=-3)
    exc = sys.exc_info()[1]
    return {
        "id": spec.id,
        "seed": spec.seed,
        "config": spec.config(),
        "status": "failed",
        "metrics": {},
        "curves": {},
        "error": f"{type(exc).__name__}: {exc}\n{tail}",
    }


def run_trial(spec: TrialSpec, device: str = "cpu") -> dict[str, Any]:
    """Build data and model from the spec and train; exceptions become a 'failed' record."""
    try:
        p = _prepare(spec, device)
        at_init = take_measures(spec, p.model, p.data)
        if spec.ladder:
            return _ladder_record(spec, p, device)
        if spec.train.second_order:
            p.model, result = converge.fit(
                p.model,
                functools.partial(init_model, spec, p.data, device),
                p.data,
                spec.train,
                spec.seed,
                p.threshold,
            )
        else:
            result = train(p.model, p.data, spec.train, spec.seed, p.threshold)
        record = _record(spec, p, result, device)
        if spec.measures:
            trained = take_measures(spec, p.model, p.data)
            record["metrics"]["measures"] = {
                name: {"init": at_init[name], "trained": trained[name]} for name in spec.measures
            }
        return record
    except Exception:  # a broken trial must not stop the sweep; it is retried next run
        return _failed(spec)


def _ladder_record(spec: TrialSpec, p: _Prepared, device: str) -> dict[str, Any]:
    """A depth ladder's trial (`converge.fit_ladder`): the top rung's record, as a trial fitted at
    that depth alone records it, with every rung's record under `metrics["ladder"]`."""
    rungs = converge.fit_ladder(
        spec.ladder,
        lambda depth, seed: init_model(
            dataclasses.replace(spec, depth=depth), p.data, device, seed
        ),
        p.data,
        spec.train,
        spec.seed,
        p.threshold,
    )
    steps = []
    for rung in rungs:
        rec = _record(spec, dataclasses.replace(p, model=rung.model), rung.result, device)
        steps.append({"depth": rung.depth, "exact_start": rung.exact_start, **rec})
    top = _record(spec, dataclasses.replace(p, model=rungs[-1].model), rungs[-1].result, device)
    top["metrics"]["ladder"] = [
        {k: v for k, v in step.items() if k not in ("id", "seed", "config")} for step in steps
    ]
    return top


def train_group(specs: list[TrialSpec], device: str = "cpu", path: str = "auto"):
    """Build the trials of one architecture and train them as one ensemble; returns what was
    built, the results and the forward path used (`ensemble.train_ensemble`)."""
    cache: dict = {}  # members reading the same data share one copy
    prepared = [_prepare(s, device, cache) for s in specs]
    results, path = train_ensemble(
        [p.model for p in prepared],
        [p.data for p in prepared],
        [s.train for s in specs],
        [s.seed for s in specs],
        [p.threshold for p in prepared],
        path=path,
    )
    return prepared, results, path


def run_group(specs: list[TrialSpec], device: str = "cpu") -> list[dict[str, Any]]:
    """One unit of work: a lone trial, trained by `train.train`, or trials sharing an
    architecture trained as one ensemble (`blocklab.engine.ensemble`). Each gets its own record."""
    if len(specs) == 1:
        return [run_trial(specs[0], device)]
    try:
        prepared, results, path = train_group(specs, device)
    except Exception:  # the whole ensemble failed; its trials are retried next run
        return [_failed(s) for s in specs]
    records = []
    for spec, p, result in zip(specs, prepared, results, strict=True):
        record = _record(spec, p, result, device)
        record["metrics"]["ensemble"] = {"members": len(specs), "path": path}
        records.append(record)
    return records


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


def code_modules(spec: TrialSpec) -> list[str]:
    """The modules whose code makes this trial besides the engine (`fingerprint.ENGINE`): its
    blocks (and what they name, such as a wrapped factory's module), task and measures."""
    from blocklab.measures import parse_measure

    modules = [type(make_task(spec.task, **spec.task_options)).__module__]
    modules += [type(parse_measure(text)).__module__ for text in spec.measures]
    return modules + arm_modules(spec.arm, spec.bias)


def check_builds(specs: list[TrialSpec], told: set[str] | None = None) -> None:
    """Build one network of each architecture here, before any work is handed out: a block whose
    parameters disagree with its `count_params` stops the run with one line (`models.Net`), and
    parameters that get no gradient are named, once per arm (`told` holds the arms told of):
    they train frozen (`models.Net.freeze_unused`)."""
    told = set() if told is None else told
    seen: set[str] = set()
    for spec in specs:
        key = ensemble_key(spec) or spec.id
        if key in seen:
            continue
        seen.add(key)
        data_seed = spec.seed if spec.data_seed is None else spec.data_seed
        data = task_data(spec.task, json.dumps(spec.task_options, sort_keys=True), data_seed)
        model = build_model(spec, data)
        frozen = model.freeze_unused(data.train.x[:2])
        if frozen and f"frozen {spec.arm.label}" not in told:
            told.add(f"frozen {spec.arm.label}")
            # one name per parameter of a layer, not one per layer: layers.*.block.spare.weight
            names = ", ".join(
                dict.fromkeys(re.sub(r"^layers\.\d+\.", "layers.*.", n) for n, _ in frozen)
            )
            print(
                f"blocklab: {spec.arm.label}: {sum(n for _, n in frozen)} parameters get no "
                f"gradient ({names}); they stay frozen at their initial values and are not "
                f"counted: the arm trains {model.param_counts()['blocks']} layer parameters at "
                f"budget {spec.budget}",
                file=sys.stderr,
                flush=True,
            )


def run(
    specs: Iterable[TrialSpec],
    store: Store,
    experiment: str,
    *,
    resources: Resources | None = None,
    label: str = "trials",
    progress: bool | Progress = True,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run every spec not finished in the store; return {id: stored record} for all specs.
    Only this process writes to the store, one commit per finished unit, so an interrupted
    sweep keeps everything that finished. Sweeps sharing a store split its trials: each claims
    a unit before it starts it, and waits at the end for the trials others hold (`claims`)."""
    res = resources or Resources()
    specs = list({s.id: s for s in specs}.values())  # identical trials run once
    codes = {s.id: code(code_modules(s)) for s in specs}
    # before the store is read: a trial another sweep stores after `done` is read then counts as
    # stored since (a record's finished_at is stamped just before it is committed)
    since = time.time()
    done, stale = store.reusable({i: c["fingerprint"] for i, c in codes.items()})
    store.say_stale(stale)
    device = device_name(res.device)
    done -= other_precision(specs, store, done, device)
    check_builds([s for s in specs if s.id not in done], store.told)
    prov = provenance(device)
    workers = res.workers  # several share a GPU: a small model's step waits on launches, not math
    # planned from every spec, finished or not, and each unit stored whole: a resumed sweep trains
    # each trial left in the unit an undisturbed one trains it in, and stores the same numbers
    units = plan_units(specs, res.ensemble, workers)
    units = [u for u in units if any(s.id not in done for s in u)]
    bar, own = display(progress)
    bar.phase(label, len(specs) - len(done))
    runner = (
        make_executor(res.executor, workers, res.executor_options, res.plugins) if units else None
    )
    try:
        with Claims(store) if units else contextlib.nullcontext() as claims:
            while units:
                taken: list[list[TrialSpec]] = []
                waiting: list[list[TrialSpec]] = []
                claimed = _claim(units, store, claims, done, since, taken, waiting)
                results = runner.imap_unordered(run_group, claimed, device)
                try:
                    for index, records in results:
                        now = time.time()
                        for record in records:
                            record.update(
                                experiment=experiment,
                                provenance={**prov, "code": codes[record["id"]]},
                                finished_at=now,
                            )
                        claims.store(store.put, records)
                        for spec, record in zip(taken[index], records, strict=True):
                            bar.update(spec, record)
                            if on_record:
                                on_record(record)
                finally:
                    results.close()  # stops running work at once when the loop above raised
                units = waiting
                if units and not taken:  # the rest is held by other sweeps: wait for them
                    time.sleep(POLL)
    # the count is the command's, not this sweep's: a command runs several sweeps on one store
    except KeyboardInterrupt:
        raise Interrupted(store.stored) from None
    except WorkerLost as exc:
        raise WorkerDied(store.stored, str(exc)) from None
    finally:
        if own:
            bar.close()
    return {r["id"]: r for r in store.records(ids=[s.id for s in specs])}


def _claim(units, store: Store, claims: Claims, done: set[str], since: float, taken, waiting):
    """Yield each unit's trials still to do that this sweep claims, appending them to `taken`;
    a unit another live sweep holds goes to `waiting`. Still to do: not in `done` (the trials
    the store had for reuse when the sweep began) and not stored by another sweep since `since`.
    A unit some of whose trials are done (an experiment listing a finished trial again) trains
    the rest. A trial another sweep tried and failed meanwhile counts as stored: a rerun retries
    it."""
    for unit in units:
        left = {s.id for s in unit} - done
        left -= stored_since(store, left, since)
        if not left:
            continue
        if not claims.claim(left):
            waiting.append(unit)
            continue
        stored = stored_since(store, left, since)  # by another sweep just before it let go
        claims.release(stored)
        left -= stored
        if left:
            taken.append([s for s in unit if s.id in left])
            yield taken[-1]

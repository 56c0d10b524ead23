"""One trial, an ensemble of trials sharing an architecture, or depth ladders of one shape: its
data made and its network built from the spec (`fitting.network`), trained (`train`, `ensemble`)
or fitted (`converge`, `cohorts`), measured, and turned into the record the store keeps.
`blocklab.engine.sweep` schedules these batches; nothing here knows of stores, leases or executors.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from blocklab.engine.reuse import trial_precision
from blocklab.errors import UserError
from blocklab.fitting import continuation, converge, ladder
from blocklab.fitting.cohorts import fit_ladders
from blocklab.fitting.ensemble import train_ensemble
from blocklab.fitting.monitor import as_record
from blocklab.fitting.network import init_model, task_data
from blocklab.fitting.train import train
from blocklab.models import Net
from blocklab.models import code_modules as arm_modules
from blocklab.specs import TrialSpec, fit_key
from blocklab.tasks import TaskData, make_task


def _to(split, device):
    return dataclasses.replace(split, x=split.x.to(device), y=split.y.to(device))


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
        data = task_data(spec.task, spec.task_options, data_seed)
        moved = {split: _to(getattr(data, split), device) for split in ("train", "val", "test")}
        cache[data_seed] = dataclasses.replace(data, **moved)
    data = cache[data_seed]
    model = init_model(spec, data, device, spec.seed)  # the initialization follows the trial seed
    threshold = spec.train.threshold if spec.train.threshold is not None else task.threshold
    return _Prepared(task, data, model, threshold)


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


def run_trial(
    spec: TrialSpec, device: str = "cpu", parent: continuation.Parent | None = None
) -> dict[str, Any]:
    """Build data and model from the spec and train; exceptions become a 'failed' record. A
    ladder trial continues `parent`'s fits where one is given (`fitting.continuation`)."""
    try:
        p = _prepare(spec, device)
        at_init = take_measures(spec, p.model, p.data)
        if spec.ladder:
            return _ladder_record(spec, p, device, parent)
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


def _ladder_record(
    spec: TrialSpec, p: _Prepared, device: str, parent: continuation.Parent | None = None
) -> dict[str, Any]:
    """A depth ladder's trial (`ladder.fit_ladder`): the top rung's record, as a trial fitted at
    that depth alone records it, with every rung's record under `metrics["ladder"]`, and its
    fits' states for a larger budget to continue (`record["fit_state"]`, which the sweep stores
    beside the record). Continuing `parent`, it says so under `metrics["continued"]`."""
    prior = continuation.unpack(parent.blob) if parent is not None else None
    climb = ladder.Climb(_rung_model(spec, p, device), p.data, spec.train, spec.seed, prior)
    rungs = ladder.run_climb(climb, spec.ladder, p.data, spec.train, p.threshold)
    record = _rungs_record(spec, p, rungs, device)
    record["fit_state"] = continuation.stored_state(spec, climb.states)
    if parent is not None:
        done = [a for row in climb.actions for a in row]
        record["metrics"]["continued"] = {
            "parent": parent.id,
            "from_steps": parent.steps,
            **{action: done.count(action) for action in continuation.ACTIONS},
        }
    return record


def _rung_model(spec: TrialSpec, p: _Prepared, device: str):
    """A ladder's `make_model`: the spec's network at a rung's depth, initialized by a seed."""
    return lambda depth, seed: init_model(spec.at_depth(depth), p.data, device, seed)


def _rungs_record(spec: TrialSpec, p: _Prepared, rungs, device: str) -> dict[str, Any]:
    """A ladder trial's record from its fitted rungs (`_ladder_record`)."""
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


def run_ladders(specs: list[TrialSpec], device: str = "cpu") -> list[dict[str, Any]]:
    """Depth ladders of one shape (`specs.fit_key`) climbed together, one batched fit per rung
    (`cohorts.fit_ladders`); each trial gets the record `run_trial` gives it alone, with
    `metrics["units"]` (the stored key): how many trials, and fits, each rung's computation held."""
    parents = getattr(specs, "parents", {})
    if parents:  # continued ladders are fitted one at a time (`ladder.fit_ladder`)
        return [run_trial(s, device, parents.get(s.id)) for s in specs]
    try:
        cache: dict = {}  # trials reading the same data share one copy
        prepared = [_prepare(s, device, cache) for s in specs]
        ladders = fit_ladders(
            specs[0].ladder,
            [_rung_model(s, p, device) for s, p in zip(specs, prepared, strict=True)],
            [p.data for p in prepared],
            specs[0].train,
            [s.seed for s in specs],
            [p.threshold for p in prepared],
        )
    except Exception:  # the whole group failed; its trials are retried next run
        return [_failed(s) for s in specs]
    records = []
    for spec, p, climb in zip(specs, prepared, ladders, strict=True):
        record = _rungs_record(spec, p, climb.rungs, device)
        record["fit_state"] = continuation.stored_state(spec, climb.states)
        members = len(specs) * spec.train.restarts
        record["metrics"]["units"] = {"units": len(specs), "members": members}
        records.append(record)
    return records


def run_group(specs: list[TrialSpec], device: str = "cpu") -> list[dict[str, Any]]:
    """One unit of work: a lone trial, trained by `train.train`, trials sharing an architecture
    trained as one ensemble (`blocklab.fitting.ensemble`), or depth ladders of one shape fitted
    together (`run_ladders`). Each gets its own record."""
    if len(specs) == 1:
        return [run_trial(specs[0], device, getattr(specs, "parents", {}).get(specs[0].id))]
    if fit_key(specs[0]) is not None:
        return run_ladders(specs, device)
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
    return modules + arm_modules(spec.arm, spec.shape.bias)

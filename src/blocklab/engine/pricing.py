"""What a run would do with its trials, and what that costs, before anything is fitted: the
`Plan` that `--plan` prints and a status's next step carries (`status.next_cost`).

A run's trials (`specs.TrialSpec`) meet the store in --out the way `engine.sweep.run` meets it:
a finished trial of the same code is kept whole (`Store.reusable`); a second-order ladder whose
stored twin ran fewer iterations continues it (`fitting.continuation`: each stored fit stands,
continues where its budget cut it, or fits again above a continued one); the rest are new.

A plan's cost is in core-seconds, from the first source that has one, which it names:
1. measured: a continued trial at each rung's measured seconds an iteration (its stored parent's)
   times the iterations it still runs; a new trial at the mean measured seconds of the stored
   trials of its cell (the same networks: arm, budget, ladder and shape), scaled by the
   iterations, chains and examples it runs against theirs. An upper bound where it runs more
   iterations than they did (a fit that certifies early costs less).
2. recorded: what the experiment's records say a trial of its design costs (`recorded`, a
   callable the experiment passes: the degree sweep's recorded runs).
3. timed here: a training step or a Levenberg-Marquardt iteration of each network timed on this
   machine, every fit at its full iterations (`fitting.estimate.choose`): an upper bound.
Where none applies, the plan carries no cost and says why (`reason`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from blocklab.engine.devices import GPU_OVER_CORE, spread_out
from blocklab.formatting import duration

MEASURED, RECORDED, TIMED = "measured", "recorded", "timed here"


@dataclass(frozen=True)
class Plan:
    """A run's trials against its store, and their cost. `trials_new`: trials fitted from the
    start; `trials_stored`: finished trials kept whole; `trials_continued`: stored trials whose
    ladders continue, and of their fits (one per rung and chain) how many `continued`, `refit`
    above a continued one, or stand as they ended (`kept`). `core_seconds` None: not estimated,
    `reason` says why; else `basis` says where it comes from (`MEASURED`, `RECORDED`,
    `TIMED`) and `bound` whether it is an upper bound. `extra`: the experiment's own keys of the
    plan's JSON (units, teachers, seeds)."""

    trials_new: int
    trials_stored: int
    trials_continued: int = 0
    continued: int = 0
    refit: int = 0
    kept: int = 0
    core_seconds: float | None = None
    basis: str = ""
    bound: bool = False
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    note: str | None = None  # what the experiment adds (what an earlier continuation changed)

    @property
    def gpu_seconds(self) -> float | None:
        """On one GPU, estimated (`devices.GPU_OVER_CORE`)."""
        return spread_out(self.core_seconds, 1, gpu=True)

    def seconds(self, cores: int) -> float | None:
        """Wall seconds on `cores` CPU cores, a trial to a core."""
        busy = self.trials_new + self.trials_continued
        return spread_out(self.core_seconds, min(cores, busy or 1), gpu=False)

    def json(self) -> dict[str, Any]:
        """The `plan` object of `--plan --json`."""
        return {
            **self.extra,
            "core_seconds": _round(self.core_seconds),
            "gpu_seconds": _round(self.gpu_seconds),
            "trials_new": self.trials_new,
            "trials_stored": self.trials_stored,
            "trials_continued": self.trials_continued,
            "continued": self.continued,
            "refit": self.refit,
            "kept": self.kept,
            "basis": self.basis or None,
            "upper_bound": self.bound,
            "reason": self.reason,
            "note": self.note,
        }

    def cost(self) -> dict[str, Any]:
        """The cost alone, as a status's `next_cost` carries it."""
        return {
            "core_seconds": _round(self.core_seconds),
            "reason": self.cost_reason(),
            "basis": self.basis or None,
            "upper_bound": self.bound,
            "note": self.note,
        }

    def cost_reason(self) -> str | None:
        return None if self.core_seconds is not None else (self.reason or "not estimated")

    def trials_said(self) -> str:
        """What the run does with its trials, in words."""
        said = [f"{self.trials_new} new trial{_s(self.trials_new)} to fit"]
        if self.trials_continued:
            said.append(
                f"{self.trials_continued} stored trial{_s(self.trials_continued)} continued "
                f"(of their fits, {self.continued} continue{_v(self.continued)} where the budget "
                f"cut it, {self.refit} above one fit{_v(self.refit)} again, {self.kept} "
                f"stand{_v(self.kept)} as it ended)"
            )
        said.append(f"{self.trials_stored} stored trial{_s(self.trials_stored)} kept whole")
        return ", ".join(said)

    def cost_said(self, cores: int | None = None) -> str:
        """The cost in words: core time, here on `cores` cores, on one GPU, and its source."""
        if self.core_seconds is None:
            return f"cost not estimated: {self.cost_reason()}"
        at_most = "at most " if self.bound else "about "
        said = f"{at_most}{duration(self.core_seconds)} of one core's fits"
        if cores:
            said += f" ({duration(self.seconds(cores))} here on {cores} cores"
            said += f", {duration(self.gpu_seconds)} on one GPU, estimated at {GPU_OVER_CORE:g} "
            said += "cores a GPU)"
        return f"{said}; {self.basis}"


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _v(n: int) -> str:
    """A verb's ending for `n` subjects: "continues", "continue"."""
    return "s" if n == 1 else ""


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 1)


@dataclass(frozen=True)
class Met:
    """The specs against the store: the ids kept whole, the `continuation.Parent` of each spec
    that continues one, and the stored finished records by id."""

    done: set[str]
    parents: dict[str, Any]
    records: dict[str, dict[str, Any]]


def meet(specs: Sequence[Any], store) -> Met:
    """Meet `specs` with `store` (None: no store yet) as `engine.sweep.run` would."""
    from blocklab.engine.trial import code_modules
    from blocklab.fingerprint import code, once
    from blocklab.fitting import continuation

    if store is None:
        return Met(set(), {}, {})
    with once():
        codes = {s.id: code(code_modules(s)) for s in specs}
    fingerprints = {i: c["fingerprint"] for i, c in codes.items()}
    done, _ = store.reusable(fingerprints, {i: c["modules"] for i, c in codes.items()})
    parents = continuation.parents([s for s in specs if s.id not in done], store, fingerprints)
    return Met(done, parents, {r["id"]: r for r in store.records() if r["status"] == "done"})


def meet_parents(specs: Sequence[Any], store) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(record, its parent's record) for each of `specs` the store holds finished by this code
    that continued a stored trial of fewer iterations (`continuation.parents`)."""
    from blocklab.engine.trial import code_modules
    from blocklab.fingerprint import code, once
    from blocklab.fitting import continuation

    specs = list({s.id: s for s in specs}.values())
    with once():
        codes = {s.id: code(code_modules(s)) for s in specs}
    fingerprints = {i: c["fingerprint"] for i, c in codes.items()}
    done, _ = store.reusable(fingerprints, {i: c["modules"] for i, c in codes.items()})
    found = continuation.parents([s for s in specs if s.id in done], store, fingerprints)
    if not found:
        return []
    ids = [*found, *(p.id for p in found.values())]
    records = {r["id"]: r for r in store.records(ids=ids)}
    return [
        (records[i], records[p.id]) for i, p in found.items() if i in records and p.id in records
    ]


def price_specs(
    specs: Iterable[Any],
    store,
    *,
    recorded: Callable[[list[Any]], tuple[float, str] | None] | None = None,
    time_here: bool = True,
    extra: dict[str, Any] | None = None,
) -> Plan:
    """The plan of running `specs` into `store` (None: an empty --out): what is kept, continued
    or new, and its cost from the first source that has one (the module's docstring).
    `recorded(new specs)`: (core-seconds, basis) from the experiment's records, or None;
    `time_here`: time the networks on this machine where nothing else prices them."""
    from blocklab.fitting import continuation

    specs = list({s.id: s for s in specs}.values())
    met = meet(specs, store)
    todo = [s for s in specs if s.id not in met.done]
    fits = {continuation.KEPT: 0, continuation.CONTINUED: 0, continuation.REFIT: 0}
    seconds, bound, unpriced = 0.0, False, []
    for spec in todo:
        parent = met.parents.get(spec.id)
        if parent is None:
            unpriced.append(spec)
            continue
        prior = continuation.unpack(parent.blob)
        for row in continuation.actions(prior, spec.train):
            for action in row:
                fits[action] += 1
        cost = _continued(spec, parent, met.records.get(parent.id))
        if cost is None:
            unpriced.append(spec)
        else:
            seconds, bound = seconds + cost, True
    new = [s for s in todo if s.id not in met.parents]
    kept_whole = len(specs) - len(todo)
    counts = dict(
        trials_new=len(new), trials_stored=kept_whole, trials_continued=len(todo) - len(new),
        continued=fits[continuation.CONTINUED], refit=fits[continuation.REFIT],
        kept=fits[continuation.KEPT], extra=dict(extra or {}),
    )  # fmt: skip
    said = []
    if len(todo) > len(unpriced):
        said.append("measured: the stored fits each continued trial continues")
    priced, more_bound, unpriced = _twins(unpriced, met.records.values())
    if priced:
        said.append(
            f"measured for {priced[0]} new: this store's fits of the same networks, scaled to "
            "the iterations, chains and examples each runs"
        )
        seconds, bound = seconds + priced[1], bound or more_bound
    if unpriced and recorded is not None and (found := recorded(unpriced)) is not None:
        said.append(f"{RECORDED} for {len(unpriced)} new: {found[1]}")
        seconds, unpriced = seconds + found[0], []
    if unpriced and time_here and (timed := _timed(unpriced)) is not None:
        said.append(
            f"{TIMED} for {len(unpriced)} new: an iteration of each network timed on this "
            "machine, every fit at its full iterations"
        )
        seconds, bound, unpriced = seconds + timed, True, []
    if unpriced:
        reason = (
            f"{len(unpriced)} new trial{_s(len(unpriced))} of networks this store never fitted, "
            "of a design no run recorded; `--plan` times them on this machine"
        )
        return Plan(reason=reason, **counts)
    return Plan(core_seconds=seconds, basis="; ".join(said) or "nothing left to fit",
                bound=bound, **counts)  # fmt: skip


def _continued(spec, parent, record: dict[str, Any] | None) -> float | None:
    """A continued ladder's core-seconds: each rung's share of its iterations still to run
    (`continuation.share`) times its chains' iterations, at the rung's measured seconds an
    iteration (its stored parent's). None where the parent's record carries no iterations."""
    from blocklab.fitting import continuation
    from blocklab.frames import rung_records

    if record is None:
        return None
    rungs = rung_records(record)
    shares = continuation.share(parent, spec.train)
    if len(rungs) != len(shares):
        return None
    total = 0.0
    for rung, share in zip(rungs, shares, strict=True):
        rate = _per_iteration(rung)
        if rate is None:
            return None
        total += rate * share * spec.train.steps * spec.train.restarts
    return total


def _per_iteration(rung: dict[str, Any]) -> float | None:
    """A rung's measured seconds an iteration: its seconds over its chains' iterations (a
    chain's warm start counted in, which makes it an upper bound)."""
    metrics = rung.get("metrics") or {}
    chains = [c.get("iterations") or 0 for c in metrics.get("restarts") or []]
    ran, seconds = sum(chains) or metrics.get("iterations"), metrics.get("seconds")
    if not ran or not seconds:
        return None
    return float(seconds) / float(ran)


def cell(config: dict[str, Any]) -> str:
    """The networks a trial fits (its config as stored, `TrialSpec.config`), whatever its seed,
    teacher (`data_seed`), training and arm's label (the negative control is d=3 under another
    name): the stored trials a new one is priced by."""
    import json

    kept = {k: v for k, v in config.items() if k not in ("seed", "data_seed", "train")}
    if isinstance(kept.get("arm"), dict):  # an arm's label names it; its block builds it
        kept["arm"] = {k: v for k, v in kept["arm"].items() if k != "label"}
    return json.dumps(kept, sort_keys=True, default=str)


# the training settings a fit's N is drawn by (`fitting.converge.examples`)
_DATA = ("data_ratio", "min_examples", "max_examples")


def _rescaled(spec, record: dict[str, Any]) -> tuple[float, bool] | None:
    """A stored trial's seconds rescaled to `spec` (the same networks): each rung's seconds times
    the ratio of the iterations its chains may run, and of its examples (an iteration is linear
    in N, `fitting.converge.examples` at the rung's parameters); whether that scales it up.
    None where the record carries no seconds."""
    from blocklab.fitting.converge import examples
    from blocklab.frames import rung_records

    train = (record.get("config") or {}).get("train") or {}
    chains = spec.train.steps * spec.train.restarts
    ran = (train.get("steps") or spec.train.steps) * (train.get("restarts") or 1)
    total, up = 0.0, chains > ran
    for rung in rung_records(record):
        metrics = rung.get("metrics") or {}
        seconds, n, params = metrics.get("seconds"), metrics.get("examples"), metrics.get("params")
        if not seconds:
            return None
        ratio = chains / ran
        params = params.get("total") if isinstance(params, dict) else params
        if n and params and all(k in train for k in _DATA):  # N by either's rule at these P
            then = SimpleNamespace(**{k: train[k] for k in _DATA})
            ratio *= examples(spec.train, int(params), None) / examples(then, int(params), None)
        up = up or ratio > 1
        total += float(seconds) * ratio
    return total, up


def _twins(specs: list[Any], records: Iterable[dict[str, Any]]):
    """New trials priced at the mean of the stored trials of their cell, each rescaled to the
    new trial (`_rescaled`): ((how many, core-seconds), whether any was scaled up, an upper
    bound as a certified fit stops early, and the specs with no stored trial of their cell)."""
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record.get("config"):
            by_cell.setdefault(cell(record["config"]), []).append(record)
    total, up, count, left = 0.0, False, 0, []
    for spec in specs:
        scaled = [_rescaled(spec, r) for r in by_cell.get(cell(spec.config()), [])]
        scaled = [x for x in scaled if x is not None]
        if not scaled:
            left.append(spec)
            continue
        total += math.fsum(t for t, _ in scaled) / len(scaled)
        up, count = up or any(u for _, u in scaled), count + 1
    return ((count, total) if count else None), up, left


def _timed(specs: list[Any]) -> float | None:
    """Core-seconds of `specs` with every fit at its full iterations, each network timed on
    this machine: second-order fits by `fitting.estimate.choose` (one worker), AdamW trials by
    `_adam_timed`; None where the second-order ones give no cost."""
    import io

    from blocklab.engine.devices import device_name
    from blocklab.fitting.estimate import choose

    second = [s for s in specs if s.train.second_order]
    total = _adam_timed([s for s in specs if not s.train.second_order])
    if not second:
        return total
    costs: dict[str, float] = {}
    # one worker on an idle core: core-seconds, whatever else the machine runs now
    choose(second, device_name("cpu"), 1, out=io.StringIO(), costs=costs, parallel=1.0)
    return total + math.fsum(costs.values()) if costs else None


def _adam_timed(specs: list[Any]) -> float:
    """Core-seconds of AdamW trials, each trained alone at its full steps
    (`timing.AdamCosts.seconds`), from the parts of each network (`cell`, at its batch size and
    precision) timed once on this machine, on one thread as a worker runs (`timing.adam_costs`).
    """
    from blocklab.engine.executors import worker_threads
    from blocklab.fitting import built
    from blocklab.fitting.timing import adam_costs

    timed: dict[tuple[str, int, str], Any] = {}
    total = 0.0
    with worker_threads(1), built.once():
        for spec in specs:
            key = (cell(spec.config()), spec.train.batch_size, spec.train.precision)
            if key not in timed:
                timed[key] = adam_costs(spec)
            total += timed[key].seconds(spec.train)
    return total

"""Running trials: a trial is a frozen spec (`blocklab.specs`); a sweep runs the unfinished ones.

Trials that share an architecture train together as one ensemble (`blocklab.fitting.ensemble`),
depth ladders of one shape fit together on a GPU (`blocklab.fitting.cohorts`), and the batches
of work run on an executor (`blocklab.engine.executors`: a local process pool by default, Ray or
Slurm). Workers use one torch thread each: for small models two single-threaded processes beat one
process with two threads. Only the parent writes to the store, one commit per finished batch of
work; sweeps sharing a store split its trials by leases (`blocklab.engine.leases`).
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from blocklab.engine.devices import device_name
from blocklab.engine.executor_base import WorkerLost
from blocklab.engine.executors import Resources, make_executor, worker_threads
from blocklab.engine.leases import POLL, Leases
from blocklab.engine.progress import Progress, display
from blocklab.engine.provenance import provenance
from blocklab.engine.reuse import other_precision, stored_since
from blocklab.engine.trial import code_modules, run_group
from blocklab.errors import Interrupted, WorkerDied
from blocklab.fingerprint import code, once
from blocklab.fitting import built, continuation
from blocklab.fitting.cohorts import batch_units
from blocklab.fitting.estimate import choose
from blocklab.specs import TrialSpec, batches
from blocklab.store import Store


def check_builds(specs: list[TrialSpec], told: set[str] | None = None) -> None:
    """Build one network of each architecture here, before any work is handed out: a block whose
    parameters disagree with its `count_params` stops the run with one line (`models.Net`), and
    parameters that get no gradient are named, once per arm (`told` holds the arms told of):
    they train frozen (`models.Net.freeze_unused`). Trials that differ only in their seeds, fit
    or budget share a network (`built.architecture`), taken from the cache of the networks
    checked before the run (`built.shared`) where its caller keeps one: what gets no gradient is
    a matter of the graph, not of the seed or the teacher."""
    told = set() if told is None else told
    nets = built.shared()
    seen: set[str] = set()
    for spec in specs:
        key = built.architecture(spec)
        if key in seen:
            continue
        seen.add(key)
        model = nets.network(spec)
        frozen = list(model.frozen.items())  # `init_model` froze them (`Net.freeze_unused`)
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


def work_left(specs: Iterable[TrialSpec], store: Store) -> dict[str, tuple[float, ...] | None]:
    """What `run` has left to fit, by trial id (`fitting.estimate.choose`'s `left`): None for a
    trial it fits whole, each rung's share of its iterations for one that continues a stored
    trial (`continuation.share`); a trial it reuses is absent."""
    specs = list({s.id: s for s in specs}.values())
    with once():  # each set of modules hashed once (and once per run inside a caller's)
        codes = {s.id: code(code_modules(s)) for s in specs}
    fingerprints = {i: c["fingerprint"] for i, c in codes.items()}
    done, _ = store.reusable(fingerprints, {i: c["modules"] for i, c in codes.items()})
    todo = [s for s in specs if s.id not in done]
    parents = continuation.parents(todo, store, fingerprints)
    return {
        s.id: continuation.share(parents[s.id], s.train) if s.id in parents else None for s in todo
    }


def choose_for(
    specs: Sequence[Any],
    resources: Resources | None,
    say: bool,
    left: dict | None = None,
    costs: dict | None = None,
) -> list[Any]:
    """`fitting.estimate.choose` for a sweep's resources (None: the defaults): on its device, for
    its workers, timed at the thread count each worker runs with (`executors.worker_threads`);
    the line to stderr when `say`, costing what is `left` (`choose`), each trial's cost put in
    `costs`."""
    resources = resources or Resources()
    with worker_threads(resources.threads):
        device = device_name(resources.device)
        out = sys.stderr if say else None
        return choose(specs, device, resources.workers, out=out, left=left, costs=costs)


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
    Only this process writes to the store, one commit per finished batch, so an interrupted
    sweep keeps everything that finished. Sweeps sharing a store split its trials: each leases
    a batch before it starts it, and waits at the end for the trials others hold (`leases`)."""
    res = resources or Resources()
    by_id = {s.id: s for s in specs}
    specs = list(by_id.values())  # identical trials run once
    with once():  # each set of modules hashed once (and once per run inside a caller's)
        codes = {s.id: code(code_modules(s)) for s in specs}
    # before the store is read: a trial another sweep stores after `done` is read then counts as
    # stored since (a record's finished_at is stamped just before it is committed)
    since = time.time()
    store.expect(codes)
    fingerprints = {i: c["fingerprint"] for i, c in codes.items()}
    done, stale = store.reusable(fingerprints, {i: c["modules"] for i, c in codes.items()})
    store.say_stale(stale)
    device = device_name(res.device)
    done -= other_precision(specs, store, done, device)
    check_builds([s for s in specs if s.id not in done], store.told)
    # stored trials of a smaller budget that these continue rather than refit
    parents = continuation.parents(
        [s for s in specs if s.id not in done],
        store,
        fingerprints,
    )
    continuation.say(specs, parents)
    prov = provenance(device)
    workers = res.workers  # several share a GPU: a small model's step waits on launches, not math
    # grouped from every spec, finished or not, and each batch stored whole: a resumed sweep
    # trains each trial left in the batch an undisturbed one trains it in, and stores the same
    # numbers
    todo = batches(specs, res.ensemble, workers, fits=batch_units(device))
    todo = [b for b in todo if any(s.id not in done for s in b)]
    bar, own = display(progress)
    bar.phase(label, len(specs) - len(done), stored=done)  # says what a resumed run has left
    runner = (
        make_executor(res.executor, workers, res.executor_options, res.plugins) if todo else None
    )
    try:
        with Leases(store) if todo else contextlib.nullcontext() as leases:
            while todo:
                round_ = _Round(todo, store, leases, done, since, parents)
                results = runner.imap_unordered(run_group, round_, device)
                try:
                    for _, records in results:
                        now = time.time()
                        for record in records:
                            record.update(
                                experiment=experiment,
                                provenance={**prov, "code": codes[record["id"]]},
                                finished_at=now,
                            )
                        # each record with its fit states, if it keeps any (`continuation.put`)
                        leases.store(functools.partial(continuation.put, store), records)
                        for record in records:
                            bar.update(by_id[record["id"]], record)
                            if on_record:
                                on_record(record)
                finally:
                    results.close()  # stops running work at once when the loop above raised
                todo = round_.waiting
                if todo and not round_.taken:  # the rest is held by other sweeps: wait for them
                    time.sleep(POLL)
    # what the store holds and the command stored, not this sweep's: a command runs several
    # sweeps on one store
    except KeyboardInterrupt:
        raise Interrupted(store.kept()) from None
    except WorkerLost as exc:
        raise WorkerDied(store.kept(), str(exc)) from None
    finally:
        if own:
            bar.close()
        else:
            bar.rest()
    return {r["id"]: r for r in store.records(ids=[s.id for s in specs])}


class _Round:
    """One pass over the batches a sweep has left, leasing each as a worker comes free:
    iterating yields a batch's trials still to do that this sweep leased, as a whole batch; a
    batch another live sweep holds goes to `waiting`, for the next round, and `taken` counts what
    this round leased. Still to do: not in `done` (the trials the store had for reuse when the
    sweep began) and not stored by another sweep since `since`. A batch some of whose trials are
    done (an experiment listing a finished trial again) trains the rest. A trial another sweep
    tried and failed meanwhile counts as stored: a rerun retries it. A batch carries the stored
    trial each of its trials continues (`continuation.Batch`)."""

    def __init__(
        self, batches, store: Store, leases: Leases, done: set[str], since: float, parents: dict
    ):
        self.batches, self.store, self.leases = batches, store, leases
        self.done, self.since, self.parents = done, since, parents
        self.waiting: list[list[TrialSpec]] = []
        self.taken = 0

    def __iter__(self):
        store, since = self.store, self.since
        for batch in self.batches:
            left = {s.id for s in batch} - self.done
            left -= stored_since(store, left, since)
            if not left:
                continue
            if not self.leases.take(left):
                self.waiting.append(batch)
                continue
            stored = stored_since(store, left, since)  # by another sweep just before it let go
            self.leases.release(stored)
            left -= stored
            if left:
                self.taken += 1
                todo = [s for s in batch if s.id in left]
                yield continuation.Batch(
                    todo, {s.id: self.parents[s.id] for s in todo if s.id in self.parents}
                )

"""More iterations continue a stored fit instead of refitting it.

A second-order fit is certified at doublings of its iterations from `certify.first_check(steps)`
up to `steps` (`certify.converged`). Two budgets with the same first check share that schedule,
so a fit of the smaller one is a prefix of a fit of the larger: every check it made is one the
larger fit makes, with the same numbers. A ladder trial therefore keeps, beside its record, what
continues each chain's fit at each rung (`chain_state`: the float64 parameters, the fitter's
state such as Levenberg-Marquardt's damping, the certificate and the monitor's readings), and a
trial that differs from a stored one only in its budget (`BUDGET`: more iterations, or a tighter
tolerance) starts from it (`actions`):

- a fit whose stored decision stands under the new budget (certified, at its floor, stopped,
  or not finite) is kept as it ended: a fresh fit of the new budget ends there too;
- a fit the smaller budget cut (not certified when its iterations ran out) continues from its
  stored state, and is certified on the continued fit;
- every rung above a continued fit, on that chain (on every chain where chains continue the best
  one), fits again from the continued network, as a fresh ladder's would.

The continued trial has its own id (its spec's) and records its parent (`metrics["continued"]`).
On one machine a continued fit equals a fresh fit of the larger budget bit for bit in its
parameters, losses and certificate (tests/fitting/test_continuation.py); only its validation curve's
checkpoints differ, which follow the budget each stretch ran under.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import sys
from typing import Any

import torch
from torch import nn

from blocklab.fitting.certify import Certificate, first_check
from blocklab.fitting.converge import Restart
from blocklab.fitting.monitor import TrainResult
from blocklab.specs import TrainConfig, TrialSpec
from blocklab.store import FINISHED, Store, fit_states

# the settings a continued trial may change: the iteration budget and the stop rule
BUDGET = ("steps", "converge_tol")
KEPT, CONTINUED, REFIT = "kept", "continued", "refit"
ACTIONS = (KEPT, CONTINUED, REFIT)


def key(spec: TrialSpec) -> str | None:
    """What a trial and the trials it may continue share: its id's config without `BUDGET`.
    None for a trial that keeps no fit states (not a second-order depth ladder)."""
    if not (spec.ladder and spec.train.second_order):
        return None
    config = spec.config()
    config["train"] = {k: v for k, v in config["train"].items() if k not in BUDGET}
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def opens(steps: int, tol: float, cfg: TrainConfig) -> bool:
    """Whether a fit of budget (`steps`, `tol`) is a prefix of a fit under `cfg`: as many
    iterations or more on the same doubling schedule, a tolerance as tight or tighter (a looser
    one could have stopped it at an earlier check, whose state is not kept), and not the same."""
    return (
        cfg.steps >= steps
        and cfg.converge_tol <= tol
        and first_check(cfg.steps) == first_check(steps)
        and (cfg.steps, cfg.converge_tol) != (steps, tol)
    )


def stands(cert: Certificate, cfg: TrainConfig) -> bool:
    """Whether a fit's stored decision is the one `cfg` makes at the same check: it was stopped,
    went non-finite or floored; it passes `cfg`'s tolerance; or `cfg`'s budget ends there too
    (`certify.certify`'s rules)."""
    if cert.stopped or not math.isfinite(cert.second) or cert.floored:
        return True
    return (cert.still and cert.gain < cfg.converge_tol) or 2 * cert.done > cfg.steps


def actions(prior: list[list[dict]], cfg: TrainConfig) -> list[list[str]]:
    """For each rung and chain of a stored ladder, what a ladder under `cfg` does with its fit:
    `KEPT`, `CONTINUED` or `REFIT` (the module's docstring). A chain moves once one of its fits
    continues; where chains continue the best one ("best"), every chain moves with it."""
    moved = [False] * (len(prior[0]) if prior else 0)
    out = []
    for rung in prior:
        row = [
            REFIT if moved[c] else KEPT if stands(state_cert(s), cfg) else CONTINUED
            for c, s in enumerate(rung)
        ]
        moved = [m or a == CONTINUED for m, a in zip(moved, row, strict=True)]
        if cfg.chains == "best" and any(moved):
            moved = [True] * len(moved)
        out.append(row)
    return out


def share(parent: Parent, cfg: TrainConfig) -> tuple[float, ...]:
    """Each rung's share of its chains' `cfg.steps` iterations a ladder continuing `parent` still
    runs: none for a kept fit, what the budget cut off for a continued one, all for a refit."""
    prior = unpack(parent.blob)
    out = []
    for row, rung in zip(actions(prior, cfg), prior, strict=True):
        runs = [
            0 if a == KEPT else cfg.steps if a == REFIT else cfg.steps - state_cert(st).done
            for a, st in zip(row, rung, strict=True)
        ]
        out.append(sum(runs) / (len(runs) * cfg.steps))
    return tuple(out)


def state_cert(state: dict) -> Certificate:
    return Certificate(**state["cert"])


def chain_state(run: Restart, first_attempt: dict | None = None) -> dict:
    """What continues a chain's fit (`Restart.state`, the network's float64 parameters, its
    checks' readings) and what rebuilds it unchanged (`kept`), as plain values and tensors: a
    store is read with `torch.load(weights_only=True)`, which runs no code from the file.
    `first_attempt`, where the ladder refitted the chain's rung (`ladder.Climb.refit`), is the
    record of the chain it replaced, kept with the rung (None: not refitted)."""
    return {
        "params": {k: v.detach().cpu().clone() for k, v in run.model.state_dict().items()},
        "fitter": _cpu(run.state["fitter"]),
        "cert": dataclasses.asdict(run.state["cert"]),
        "monitor": run.state["monitor"],
        "checks": list(run.state.get("checks") or []),
        "restart": {
            "seed": run.seed,
            "train_loss": run.train_loss,
            "gain": run.gain,
            "converged": run.converged,
            "iterations": run.iterations,
            "jacobian": run.jacobian,
            "val_loss": run.val_loss,
            "half": run.half,
        },
        "result": dataclasses.asdict(run.result),
        "first_attempt": first_attempt,
    }


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_cpu(v) for v in value)
    return value


def load(model: nn.Module, state: dict) -> dict:
    """Put the stored fit's parameters into `model` (built as the fit's network was, in
    float64) and return what `converge.fit_once` continues it from (a state stored before
    checks were read has none: the continued fit reads its own from there on)."""
    model.double().load_state_dict(state["params"])
    return {
        "fitter": state["fitter"],
        "cert": state_cert(state),
        "monitor": state["monitor"],
        "checks": list(state.get("checks") or []),
    }


def kept(model: nn.Module, state: dict) -> Restart:
    """The stored fit as it ended, in `model`, with the state that continues it further."""
    resume = load(model, state)
    r = state["restart"]
    return Restart(
        r["seed"],
        model,
        TrainResult(**state["result"]),
        r["train_loss"],
        r["gain"],
        r["converged"],
        r["iterations"],
        r["jacobian"],
        resume,
        r.get("val_loss"),
        r.get("half"),
    )


def pack(rungs: list[list[dict]]) -> bytes:
    buffer = io.BytesIO()
    torch.save({"rungs": rungs}, buffer)
    return buffer.getvalue()


def unpack(blob: bytes) -> list[list[dict]]:
    return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)["rungs"]


def stored_state(spec: TrialSpec, rungs: list[list[dict]]) -> dict:
    """A finished ladder trial's fit states as its record carries them to the store (`put`)."""
    tr = spec.train
    return {"key": key(spec), "steps": tr.steps, "tol": tr.converge_tol, "blob": pack(rungs)}


def put(store: Store, record: dict[str, Any]) -> None:
    """Store a record, and the fit states it carries beside it (one transaction: the caller's)."""
    state = record.pop("fit_state", None)
    store.put(record)
    if state is None or record["status"] not in FINISHED:
        return
    fit_states.put(store, record["id"], state["key"], state["steps"], state["tol"], state["blob"])


@dataclasses.dataclass(frozen=True)
class Parent:
    """A stored trial a spec continues: its id, budget and fit states (`unpack`)."""

    id: str
    steps: int
    tol: float
    blob: bytes


def parents(specs: list[TrialSpec], store: Store, fingerprints: dict[str, str]) -> dict:
    """{spec id: the `Parent` it continues} for the specs a stored finished trial of the same
    code opens (`opens`); of several, the one of most iterations."""
    keyed = {s.id: k for s in specs if (k := key(s)) is not None}
    if not keyed or store.reuse == "none":
        return {}
    found: dict[str, list[tuple]] = {}
    for row in fit_states.finished(store, sorted(set(keyed.values()))):
        found.setdefault(row[0], []).append(row[1:])
    out = {}
    for spec in specs:
        rows = [
            r
            for r in found.get(keyed.get(spec.id), [])
            if r[0] != spec.id and r[4] == fingerprints[spec.id] and opens(r[1], r[2], spec.train)
        ]
        if rows:
            best = max(rows, key=lambda r: (r[1], -r[2]))
            out[spec.id] = Parent(best[0], best[1], best[2], best[3])
    return out


def say(specs: list[TrialSpec], found: dict[str, Parent]) -> None:
    """One line per budget continued from: how many trials, and what becomes of their fits."""
    groups: dict[tuple[int, int], list] = {}
    for spec in specs:
        if spec.id in found:
            groups.setdefault((found[spec.id].steps, spec.train.steps), []).append(spec)
    for (before, after), group in sorted(groups.items()):
        counts = {KEPT: 0, CONTINUED: 0, REFIT: 0}
        for spec in group:
            for row in actions(unpack(found[spec.id].blob), spec.train):
                for action in row:
                    counts[action] += 1
        print(
            f"blocklab: continuing {len(group)} stored trial(s) from {before:,} to {after:,} "
            f"iterations: {counts[CONTINUED]} fit(s) continue where their budget cut them, "
            f"{counts[REFIT]} above a continued one fit again from it, {counts[KEPT]} stand as "
            "they ended (certified, floored or stopped)",
            file=sys.stderr,
            flush=True,
        )


class Batch(list):
    """A batch of work (a list of specs, `specs.batches`) with the `Parent` of each spec that
    continues one."""

    def __init__(self, specs, parents: dict[str, Parent] | None = None):
        super().__init__(specs)
        self.parents = parents or {}

"""A depth ladder: a trial's fits at each depth in turn, each rung started from the fitted rung
below plus silenced layers (`fit_ladder`, `Climb`), and a ladder continued from a stored one of a
smaller budget (`fitting.continuation`): its fits kept, continued or fitted again rung by rung.
`units.fit_ladders` climbs several ladders of one shape as one batched fit per rung.

One refit rule, fixed before any run and blind to the arm (`Climb.refit`): a rung whose chain of
least validation loss tests above `REFIT_RATIO` times that validation loss is fitted once more
with fresh chains, from the same starting points with new seeds for what they initialize, and
that second attempt is the rung's, whatever it gives; each chain's record says so ("refit") and
keeps the chain it replaced ("first_attempt").
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import replace

from torch import nn

from blocklab.fitting import continuation
from blocklab.fitting.converge import (
    FitData,
    Restart,
    _best,
    _f64,
    batch_chains,
    chain_record,
    check_fits,
    examples,
    fit_batched,
    fit_once,
    restart_seed,
    training_set,
)
from blocklab.fitting.monitor import TrainResult
from blocklab.specs import TrainConfig
from blocklab.tasks.base import TaskData

# a rung whose chain of least validation loss tests above this many times that validation loss
# is refitted once (`Climb.refit`; DESIGN.md, "Analysis"): validation and test are draws of one
# target, so a chain that far apart on them was chosen by the luck of its validation draw or
# fits erratically off its training set, and its loss does not read as the rung's capacity
REFIT_RATIO = 2.0


@dataclasses.dataclass(frozen=True)
class Rung:
    """One depth of a ladder: the best chain's network and result there, and whether every
    chain entered it with its function unchanged (`models.continue_from`)."""

    depth: int
    model: nn.Module
    result: TrainResult
    exact_start: bool
    source: nn.Module | None = None  # the best chain's float64 network, which "best" continues


def fit_ladder(
    depths: tuple[int, ...],
    make_model: Callable[[int, int], nn.Module],
    data: TaskData,
    cfg: TrainConfig,
    seed: int,
    threshold: float,
    prior: list[list[dict]] | None = None,
) -> list[Rung]:
    """`cfg.restarts` independent chains, each climbing `depths` in turn: the first rung fitted
    from the chain's initialization `make_model(depth, init_seed)` (after the optional Adam warm
    start), every later rung started from the chain's fitted rung below plus silenced layers
    (`models.continue_from`), so its function is unchanged and its fit can only lower the loss
    on the training set (staged fitting: Michaud, Liu, Tegmark 2023). A chain that diverged
    starts again from its initialization at the next rung. Each rung fits N = `data_ratio` x its
    parameters, drawn by `seed` (the online draws of smaller N are prefixes of larger ones), is
    certified like any fit (`fit_once`), is refitted once where its best chain by validation
    tests above `REFIT_RATIO` times its validation loss (`Climb.refit`), and keeps its best
    chain by training loss. With `cfg.chains` "best", every chain instead continues the best fit
    of the rung below, and the chains differ in their added layers (each its own
    initialization). `units.fit_ladders` climbs several ladders of one shape as one batched fit
    per rung. `prior`, a stored ladder's fit states of a smaller budget (`continuation`), is
    continued: each fit kept, continued or fitted again as `continuation.actions` says, one at a
    time."""
    return run_climb(Climb(make_model, data, cfg, seed, prior), depths, data, cfg, threshold)


def run_climb(
    climb: Climb, depths: tuple[int, ...], data: TaskData, cfg: TrainConfig, threshold: float
) -> list[Rung]:
    """`fit_ladder` on a `Climb` made by the caller, which reads its fit states (`states`)."""
    prior = climb.prior or None
    for depth in depths:
        start = time.perf_counter()
        fits = climb.rung(depth)
        batched = batch_chains(fits.sets.train.x.device, cfg) and prior is None
        runs = _fit(fits, data, threshold, batched)
        again = climb.refit(fits, runs)
        if again is not None:  # the refit rule fired: the second attempt is the rung's
            fits, runs = again, _fit(again, data, threshold, batched)
        climb.close(fits, runs, start, batched)
    return climb.rungs


def _fit(fits: RungFits, data: TaskData, threshold: float, batched: bool) -> list[Restart]:
    """A rung's chains fitted, as one batched fit or one at a time (a kept one as it was)."""
    k = len(fits.models)
    if batched:
        return fit_batched(
            fits.models, [data] * k, [fits.sets] * k, fits.cfgs, fits.inits, [threshold] * k
        )
    return [
        kept or fit_once(m, data, fits.sets, c, i, threshold, resume)
        for m, c, i, kept, resume in zip(
            fits.models, fits.cfgs, fits.inits, fits.kept, fits.resumes, strict=True
        )
    ]


@dataclasses.dataclass(frozen=True)
class RungFits:
    """One ladder's fits at one rung, before they run: each chain's network, config (a continued
    chain warms no more) and initialization seed, the rung's sets, and whether every chain
    entered with its function unchanged."""

    depth: int
    models: list[nn.Module]
    cfgs: list[TrainConfig]
    inits: list[int]
    sets: FitData
    exact: bool
    # from a stored ladder of a smaller budget (`continuation.actions`), per chain: the fit kept
    # as it ended, or the state its fit continues from; None where the chain fits afresh
    kept: list[Restart | None]
    resumes: list[dict | None]
    # where these fits are the rung's second attempt (`Climb.refit`), or a stored rung that was
    # refitted carries over: the first attempt's chain records (`converge.chain_record`)
    first: list[dict] | None = None


class Climb:
    """One ladder between its rungs (`fit_ladder`): what each chain continues and the rungs
    fitted so far. `rung(depth)` makes the next rung's fits, `close` reads them once fitted."""

    def __init__(
        self,
        make_model: Callable[[int, int], nn.Module],
        data: TaskData,
        cfg: TrainConfig,
        seed: int,
        prior: list[list[dict]] | None = None,
    ):
        check_fits(data, cfg.optimizer)
        # a stored ladder this one continues, and what becomes of each of its fits
        self.prior = prior or []
        self.actions = continuation.actions(self.prior, cfg) if prior else []
        # every chain's fit at every rung, as `continuation.chain_state` keeps it for the store
        self.states: list[list[dict]] = []
        self.make_model, self.data, self.cfg, self.seed = make_model, data, cfg, seed
        self.available = None if data.online else len(data.train)
        self.val, self.test = _f64(data.val), _f64(data.test)
        self.chains: list[nn.Module | None] = [None] * cfg.restarts
        self.rungs: list[Rung] = []

    def rung(self, depth: int) -> RungFits:
        """The next rung's fits: each chain's network built from its seed and continued from
        the chain's fit below, or a stored fit kept or continued (`continuation.actions`). A
        stored rung that was refitted and whose fits carry over (any kept or continued) stands
        refitted: it keeps its first attempt's records, is not refitted again, and a chain of it
        fitted afresh draws the refit's seed."""
        i = len(self.rungs)
        todo = (
            self.actions[i] if i < len(self.actions) else [continuation.REFIT] * self.cfg.restarts
        )
        stored = self.prior[i] if any(a != continuation.REFIT for a in todo) else []
        firsts = [s.get("first_attempt") for s in stored]
        first = firsts if firsts and all(f is not None for f in firsts) else None
        return self._fits(depth, todo, first)

    def refit(self, fits: RungFits, runs: list[Restart]) -> RungFits | None:
        """The refit rule, blind to the arm: where the rung's chain of least validation loss
        tests above `REFIT_RATIO` times that loss, the rung's second attempt, to fit in place of
        `runs` (`close` keeps it, whatever it gives): as many chains, each from the point its
        chain started from (the chain's fit below plus silenced layers; a fresh network at the
        first rung) with new seeds for what it initializes (`restart_seed(seed, restarts + r)`,
        none of the first attempt's), on the same training set. None where the rule does not
        fire, no chain finished, the rung is a second attempt already (once only, a stored one
        too) or nothing of it was fitted here (every fit kept from a stored ladder)."""
        if fits.first is not None or all(k is not None for k in fits.kept):
            return None
        finished = [r for r in runs if r.val_loss is not None and r.result.test_loss is not None]
        if not finished:
            return None
        chosen = min(finished, key=lambda r: r.val_loss)
        if not chosen.result.test_loss > REFIT_RATIO * chosen.val_loss:
            return None
        todo = [continuation.REFIT] * self.cfg.restarts  # fresh fits, none resumed
        return self._fits(fits.depth, todo, [chain_record(r) for r in runs], fits.sets)

    def _fits(
        self,
        depth: int,
        todo: list[str],
        first: list[dict] | None,
        sets: FitData | None = None,
    ) -> RungFits:
        """The fits of the next rung, each chain as `todo` says (`continuation.actions`), with
        the refit's seeds where `first` (the first attempt's records) is given, on `sets` (by
        default the rung's training set, drawn by the ladder's seed)."""
        from blocklab.models import continue_from

        cfg, exact = self.cfg, True
        if cfg.chains == "best" and self.rungs and self.rungs[-1].source is not None:
            # continue_from copies, never moves it
            self.chains = [self.rungs[-1].source] * cfg.restarts
        models, cfgs, inits, kept, resumes = [], [], [], [], []
        i = len(self.rungs)
        # a second attempt's seeds follow the first attempt's: restarts + r for chain r
        offset = 0 if first is None else cfg.restarts
        for r in range(cfg.restarts):
            inits.append(restart_seed(self.seed, offset + r))
            model = self.make_model(depth, inits[-1])
            below = self.chains[r]
            if below is not None:
                model.double()
                exact = continue_from(model, below) and exact
            models.append(model)
            # a chain's first fit (or its restart after a divergence) warms up; a continued one
            # starts where the rung below ended
            cfgs.append(cfg if below is None else replace(cfg, warm_start=0))
            # the stored fit, into the network just built as a fresh ladder builds it
            state = self.prior[i][r] if todo[r] != continuation.REFIT else None
            kept.append(continuation.kept(model, state) if todo[r] == continuation.KEPT else None)
            resumes.append(
                continuation.load(model, state) if todo[r] == continuation.CONTINUED else None
            )
        if sets is None:
            params = sum(p.numel() for p in models[0].parameters() if p.requires_grad)
            train_set = training_set(self.data, examples(cfg, params, self.available), self.seed)
            sets = FitData(train_set, self.val, self.test)
        return RungFits(depth, models, cfgs, inits, sets, exact, kept, resumes, first)

    def close(
        self, fits: RungFits, runs: list[Restart], start: float, batched: bool, share: int = 1
    ) -> Rung:
        """The rung fitted (its second attempt's fits and runs where it was refitted): each
        chain continues its fit (none where it diverged), and the rung keeps the best chain
        (`_best`; `share` as there), every chain's record saying whether the rung was refitted
        ("refit") and, where it was, holding the chain it replaced ("first_attempt")."""
        first = fits.first or [None] * len(runs)
        for r, run in enumerate(runs):
            self.chains[r] = run.model if run.train_loss is not None else None
        self.states.append(
            [continuation.chain_state(run, f) for run, f in zip(runs, first, strict=True)]
        )
        model, result = _best(runs, self.cfg, len(fits.sets.train), start, batched, share)
        refit = fits.first is not None
        chains = zip(result.restarts, first, strict=True)
        restarts = [{**c, "refit": refit, "first_attempt": f} for c, f in chains]
        result = replace(result, restarts=restarts)
        finished = [r for r in runs if r.train_loss is not None]
        source = min(finished, key=lambda r: r.train_loss).model if finished else None
        self.rungs.append(Rung(fits.depth, model, result, fits.exact, source))
        return self.rungs[-1]

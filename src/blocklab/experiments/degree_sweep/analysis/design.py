"""The design checks that gate the degree sweep's capacity verdict (`capacity`), and the
per-budget statistics they read.

A verdict is only stated when the run can support one. Second-order fits (`fitting.converge`) are
judged by their certificates, Adam runs by their plateau and their learning-rate search. The
checks, in order:
- `input_rank`: every arm's input Jacobian, stacked over a sample of inputs at initialization, has
  the rank its design lets through: the task's input dimension, or a bound the design chose
  (a narrower linear embedding, a linear network's readout), stated, not failed (measured before
  any fit; LayerNorm without affine weights at a width <= the inputs hides a direction);
- `budget_span`: at least MIN_BUDGETS budgets spanning at least MIN_SPAN x (a scaling curve of
  3 parameters needs them);
- `plateau` (Adam): at least PLATEAU_SHARE of the trials plateaued: under the wsd schedule, the
  run of half the steps (branched off the stable phase and annealed, `train.half_run`) ends less
  than `plateau_tol` above the full run's validation loss, so doubling the steps gained less than
  that; under cosine, the smoothed validation loss fell by less than `plateau_tol` of its final
  value over the last quarter of training (which the annealing also lowers);
- `converged` (fits): at least CONVERGED_SHARE of the trials carry the certificate: doubling the
  iterations lowered the training loss by less than `converge_tol` of it;
- `curve`: every arm's geometric-mean test loss falls at least MIN_FALL x from its smallest
  budget to its largest, and its own exponent's interval (`multiplier`'s per-arm model) lies
  inside the fit's bounds: a curve that is flat or rising measures a floor (a hidden input, an
  optimizer stuck), not what more parameters buy;
- `search` (fits with restarts or chains): per arm, the best of the first half of the K restarts
  lands within SEARCH_SHARE of the best of all K (geometric mean over cells): more restarts
  would not move the losses by more than that;
- `generalization` (fits): in every (arm, budget) cell the geometric mean over its units of test
  over training loss (its band: the t interval of their log ratios) is at most
  GENERALIZATION_RATIO, so the training loss a fit reaches reads as
  approximation error, not as a small training set memorized;
- `lr_not_at_edge` (Adam): no chosen learning rate lies at an edge of the rates tried (the sweep
  extends the grid past an edge before it gives up);
- `width_matched`: in width mode, no arm's width moved more than `width_slack` from the nominal
  one;
- `resolution`: every multiplier of the shared scaling model (`multiplier`), and m_2 / m_4,
  has a bounded interval;
- `replicates`: every cell holds at least MIN_REPLICATES finished (teacher, seed) pairs. The
  efficiency intervals are percentile bootstraps over those pairs, and the paired tests and the
  monotone check read t intervals over them: with 2 pairs a bootstrap has 3 distinct resamples,
  so its "95% interval" is the range of 3 fits, and a t interval is 12.7 standard errors wide.

Each check's outcome (`cells.Check.outcome`) is read from its figure's own 95% band: passed where
the whole band clears the threshold, failed where it misses it, edge where it straddles it (a
Wilson band for a share of trials, a t band over units or trials for a ratio or a gap; the exact
figures of input_rank, budget_span, width_matched, replicates, lr_not_at_edge and resolution are
passed or failed). `capacity.decide` turns a failed check into NO VERDICT and one at its edge
into INCONCLUSIVE.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from blocklab import config
from blocklab.analysis.plateau import plateau_rule, plateaued
from blocklab.errors import UserError
from blocklab.experiments.degree_sweep.analysis.cells import (
    EDGE,
    FAILED,
    Change,
    Check,
    Invocation,
    all_counted,
    budget_stats,
    doubled,
    judged,
    log_band,
    loss,
    next_command,
    second_order,
    side,
    widened,
    wilson,
    worst,
)
from blocklab.experiments.degree_sweep.analysis.fit_checks import (
    T_UNITS,
    WILSON,
    converged_check,
    curve_check,
    input_rank_check,
    resolution_check,
    search_check,
)
from blocklab.specs import TrainConfig

PLATEAU_SHARE = 0.9
GENERALIZATION_RATIO = 1.1
MIN_BUDGETS, MIN_SPAN = 4, 8.0
# in width mode the solver may move a width to meet the budget; past one unit the arm is a
# different architecture (measured: d=3 at width 6 fits a teacher 1.7-2.3x worse than at 8-9),
# and so is one unit that is more than WIDTH_SHARE of the width (measured at width 3: d=3 at
# width 4 fit 3x better than every width-3 cell at any budget, and alone decided a verdict)
WIDTH_SLACK, WIDTH_SHARE = 1, 0.2


def width_slack(width: int) -> int:
    """How far a width may move from the nominal `width`: WIDTH_SLACK units, none where that
    is more than WIDTH_SHARE of it."""
    return WIDTH_SLACK if WIDTH_SHARE * width >= WIDTH_SLACK else 0


# 3 pairs: 10 distinct bootstrap resamples, t intervals 4.3 standard errors wide (with 2: 3
# resamples, 12.7 standard errors)
MIN_REPLICATES = 3


@dataclass(frozen=True)
class BudgetSpan(Check):
    budgets: int  # distinct budgets
    span: float  # the largest budget over the smallest

    def remedy(self, cfg) -> tuple[Change, ...]:
        return widened(cfg, MIN_BUDGETS, MIN_SPAN)


@dataclass(frozen=True)
class Plateau(Check):
    share: float  # of the trials, those that plateaued
    trials: int
    rule: str  # the criterion the rows were read by (`plateau_rule`)
    tol: float
    least: tuple[tuple[str, int, float], ...]  # (arm, budget, share plateaued), lowest first
    count: int = 0  # the trials that plateaued

    def remedy(self, cfg) -> tuple[Change, ...]:
        """More steps; with every trial plateaued and the band still short, more trials."""
        return all_counted(self, cfg, PLATEAU_SHARE) or doubled(cfg, "train.steps")


@dataclass(frozen=True)
class Generalization(Check):
    worst: float  # the largest mean test / mean train loss of a cell; NaN: no cell has both
    # (arm, budget, ratio) whose whole band is above the limit, worst first
    failing: tuple[tuple[str, int, float], ...]
    # (arm, budget, ratio, low, high): the failing cells, then those whose band straddles it
    bands: tuple[tuple[str, int, float, float, float], ...] = ()

    def remedy(self, cfg) -> tuple[Change, ...]:
        """Twice the examples per parameter; and where that many at the largest failing budget
        pass the cap on examples, a cap that holds them (a power of 2)."""
        train = cfg.train
        ratio = 2 * train.data_ratio
        out = [Change("train.data_ratio", train.data_ratio, ratio)]
        need = ratio * max((b for _, b, *_ in self.bands or self.failing), default=0)
        if need > train.max_examples:
            cap = 2 ** math.ceil(math.log2(need))
            out.append(Change("train.max_examples", train.max_examples, cap))
        return tuple(out)


@dataclass(frozen=True)
class LrEdge(Check):
    edges: tuple[tuple[str, float, tuple[float, ...]], ...]  # ("budget/arm", lr chosen, tried)

    def remedy(self, cfg) -> tuple[Change, ...]:
        """A rate alone is a fixed rate, never searched: rates 3x either side of it; a grid
        extended as far as it was allowed: two extensions more."""
        grid = tuple(cfg.lr_grid)
        if len(grid) == 1:
            lr = grid[0]
            return (Change("lr_grid", grid, (float(f"{lr / 3:.2g}"), lr, float(f"{lr * 3:.2g}"))),)
        return (Change("lr_extend", cfg.lr_extend, cfg.lr_extend + 2),)


@dataclass(frozen=True)
class WidthMatch(Check):
    width: int | None  # the nominal width; None in depth mode, which solves it per arm
    moved: tuple[tuple[str, int, int], ...]  # (arm, budget, width) more than `slack` off
    slack: int  # how far a width may move from it (`width_slack`)

    def remedy(self, cfg) -> tuple[Change, ...]:
        # without budgets every arm climbs --depths at --width itself: no width moves
        return (Change("budgets", tuple(cfg.budgets), ()),) if cfg.budgets else ()


@dataclass(frozen=True)
class Replicates(Check):
    least: int  # the fewest finished (teacher, seed) pairs of a cell
    cells: tuple[tuple[str, int, int], ...]  # (arm, budget, pairs) below MIN_REPLICATES

    def remedy(self, cfg) -> tuple[Change, ...]:
        """The seeds that give the poorest cell MIN_REPLICATES pairs (one seed adds a pair per
        teacher)."""
        more = max(1, math.ceil((MIN_REPLICATES - self.least) / cfg.teachers))
        return (Change("seeds", cfg.seeds, cfg.seeds + more),)


def width_check(rows, width: int | None) -> WidthMatch:
    """Width mode compares degrees at one width; `width` None (depth mode) solves it by design."""
    slack = width_slack(width) if width is not None else 0
    moved = sorted(
        {
            (r["arm"], int(r["budget"]), int(r["width"]))
            for r in rows
            if width is not None
            and r.get("width") is not None
            and abs(int(r["width"]) - width) > slack
        },
        key=lambda t: (t[1], t[0]),
    )
    return WidthMatch("width_matched", not moved, width=width, moved=tuple(moved), slack=slack)


def _least(stats, key: str) -> tuple[tuple[str, int, float], ...]:
    """The three cells where the share `key` is lowest, of those below 1."""
    cells = [(a, b, s[key]) for a, by_b in stats.items() for b, s in by_b.items() if s[key] < 1]
    return tuple(sorted(cells, key=lambda t: t[2])[:3])


def _budget_span(rows) -> BudgetSpan:
    """The fewest budgets any arm ran at and the narrowest span of its counts (arms on their
    own depth ladders run at budgets of their own)."""
    by_arm: dict[str, set[int]] = defaultdict(set)
    for r in rows:
        by_arm[r["arm"]].add(int(r["block_params"] or r["budget"]))
    n = min((len(b) for b in by_arm.values()), default=0)
    span = min((max(b) / min(b) for b in by_arm.values() if b and min(b) > 0), default=0.0)
    ok = n >= MIN_BUDGETS and span >= MIN_SPAN
    return BudgetSpan(name="budget_span", passed=ok, budgets=n, span=span)


def _plateau(rows, stats, tol: float) -> Plateau:
    flat = [plateaued(r, tol) for r in rows]
    share = sum(flat) / len(flat) if flat else 0.0
    low, high = wilson(sum(flat), len(flat))
    outcome = side(low, high, PLATEAU_SHARE, at_least=True) if flat else FAILED
    return Plateau(
        name="plateau",
        **judged(outcome, figure=share, threshold=PLATEAU_SHARE, band=(low, high),
                 method=WILSON),  # fmt: skip
        share=share,
        trials=len(flat),
        rule=plateau_rule(rows),
        tol=tol,
        least=_least(stats, "plateaued_fraction"),
        count=sum(flat),
    )


def _generalization(rows) -> Generalization:
    """Per cell the geometric mean over its units of test / training loss (`generalized`)."""
    units: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in rows:
        test, train = loss(r), r.get("train_loss")
        if test is not None and train is not None and test > 0 and train > 0:
            units[(r["arm"], int(r["budget"]))].append(math.log(test / train))
    return generalized(units)


def generalized(units: dict[tuple[str, int], list[float]], level: float = 0.95) -> Generalization:
    """The generalization check from each cell's units' log(test / training loss): the cell's
    figure is their geometric mean, its band their t interval about it, both on the same
    scale (a mean of losses beside a band of log ratios mixes one spiky fit into the figure
    and not into the band)."""
    cells = []
    for (a, b), logs in sorted(units.items()):
        m, lo, hi = log_band(logs, level)
        if not math.isfinite(m):
            continue
        ratio, low, high = math.exp(m), math.exp(lo), math.exp(hi)
        cells.append((a, b, ratio, low, high, side(low, high, GENERALIZATION_RATIO, False)))
    failing = sorted((c[:5] for c in cells if c[5] == FAILED), key=lambda c: -c[2])
    edges = sorted((c[:5] for c in cells if c[5] == EDGE), key=lambda c: -c[4])
    top = max(cells, key=lambda c: c[4], default=None)  # the band nearest the limit
    return Generalization(
        name="generalization",
        **judged(worst(c[5] for c in cells) if cells else FAILED,
                 figure=top[2] if top else math.nan, threshold=GENERALIZATION_RATIO,
                 band=top[3:5] if top else None, method=T_UNITS),  # fmt: skip
        worst=max((c[2] for c in cells), default=math.nan),
        failing=tuple((a, b, r) for a, b, r, _, _ in failing),
        bands=tuple(failing + edges),
    )


def _replicates(stats) -> Replicates:
    counts = [(a, b, int(s["n"])) for a, by_b in stats.items() for b, s in by_b.items()]
    short = tuple(sorted((c for c in counts if c[2] < MIN_REPLICATES), key=lambda c: c[2]))
    least = min((c[2] for c in counts), default=0)
    return Replicates(
        name="replicates", passed=bool(counts) and not short, least=least, cells=short
    )


def _lr_edge(lr_choice) -> LrEdge:
    edges = tuple(
        (str(key), c["lr"], tuple(c["tried"])) for key, c in lr_choice.items() if c.get("at_edge")
    )
    return LrEdge(name="lr_not_at_edge", passed=not edges, edges=edges)


def design_checks(
    rows,
    lr_choice,
    budgets,
    tol: float,
    stats=None,
    width: int | None = None,
    *,
    converge_tol: float = TrainConfig.converge_tol,
    multiplier=None,
    input_rank=None,
) -> list[Check]:
    """The checks in the module's order: second-order fits get `converged`, `search` and
    `generalization`, Adam runs `plateau` (read at `tol`) and `lr_not_at_edge`. `converge_tol`:
    the fits' certificate tolerance (`TrainConfig.converge_tol`), which their rows were judged
    by; `multiplier`: the shared scaling model (`multiplier.fit`, None where it could not be
    fitted); `input_rank`: arm -> the rank measured before the fits (None: not measured, as for
    token inputs, and no check)."""
    stats = stats if stats is not None else budget_stats(rows, tol)
    first = [input_rank_check(input_rank)] if input_rank else []
    curve = curve_check(rows, multiplier)
    if second_order(rows):
        middle = [
            converged_check(rows, converge_tol, multiplier),
            search_check(rows, multiplier),
            curve,
            _generalization(rows),
        ]  # fmt: skip
    else:
        middle = [_plateau(rows, stats, tol), curve, _lr_edge(lr_choice)]
    last = [width_check(rows, width), _replicates(stats), resolution_check(multiplier)]
    return [*first, _budget_span(rows), *middle, *last]


@dataclass(frozen=True)
class NextRun:
    """The command to run next where a run reached no verdict: the changes the failed checks'
    remedies pick (or, every check passed, the seeds the power calculation asks for)."""

    changes: tuple[Change, ...]
    flags: tuple[str, ...]  # the changes as the command line's flags
    command: str  # the run's own command with them (`cells.next_command`)
    cost: Any = None  # its plan and cost (`engine.pricing.Plan`, `Invocation.price`)


def _further(a, b):
    """Of two values two remedies pick for one key, the one that goes further: the larger, or
    the longer list (an empty list of budgets, which hands the shapes to --depths, first)."""
    if isinstance(a, tuple):
        return a if not a or (b and len(a) >= len(b)) else b
    return max(a, b)


def next_run(
    failed, run: Invocation, units_needed: int | None = None, more: tuple[Change, ...] = ()
) -> NextRun | None:
    """What to run next: the remedies of the `failed` checks and the changes `more` (the
    matched answer's teachers), merged (the furthest value of a key two pick), and with neither
    the (teacher, seed) units `units_needed` a +-3% interval needs, as seeds. Changes the new
    config would not read are dropped; None where nothing is left to change or the config
    refuses the changes."""
    cfg = run.cfg
    picked: dict[str, Change] = {}
    found = [c for check in failed for c in check.remedy(cfg)] + list(more)
    if not found:
        seeds = math.ceil((units_needed or 2 * cfg.teachers * cfg.seeds) / cfg.teachers)
        found.append(Change("seeds", cfg.seeds, max(cfg.seeds + 1, seeds)))
    for c in found:
        had = picked.get(c.key)
        picked[c.key] = c if had is None else Change(c.key, c.old, _further(had.new, c.new))
    by_key = {key: (flag, tp) for flag, (key, tp) in config.flags(type(cfg), run.skip).items()}
    try:
        idle = config.unused(next_command(run, tuple(picked.values()))[0])
        changes = tuple(
            c for c in picked.values() if c.key in by_key and c.key not in idle and c.new != c.old
        )
        if not changes:
            return None
        _, command = next_command(run, changes)
    except (ValueError, UserError):
        return None
    said: list[str] = []
    for c in changes:
        flag, tp = by_key[c.key]
        said += config.flag_words(flag, c.new, tp)
    return NextRun(changes, tuple(said), command)

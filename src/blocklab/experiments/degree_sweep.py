"""Seed 000's experiment: networks of degree-d layers at equal parameter budgets, over seeds.

It measures capacity: what a network of each degree can fit at each budget. Every arm and seed
fits the same target (teacher 0; `teachers` K repeats the whole comparison on K independent
targets), seeds vary initialization and batches, and generative tasks draw fresh examples every
step, so a test loss is approximation plus optimization error and arms pair on one problem.

For every (budget, arm) a learning rate is chosen from a grid on the validation split with the
first seed and teacher (one fixed rate across degrees would favour whichever degree it suits);
when the best rate lies at an edge of the grid the grid is extended past it and searched again,
up to `lr_extend` times. Then every (teacher, seed) trains at that rate and is scored on the test
split. The report (`blocklab.reports.degree_sweep`) turns the rows into summaries, paired tests,
and with `blocklab.analysis.capacity` design checks, scaling fits and a verdict.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from blocklab.errors import UserError
from blocklab.experiments import EXPERIMENTS, Command, Experiment, _degree_plan, _trials
from blocklab.experiments._degree_plan import DegreeSweepTrials, bias_of, plan
from blocklab.options import meta, validate
from blocklab.specs import Arm, NetShape, TrainConfig, TrialSpec
from blocklab.store import Store

if TYPE_CHECKING:
    from blocklab.budget import Shape
    from blocklab.engine.executors import Resources

EXPERIMENT = "degree-sweep"
DEMO_BUDGET_TOLERANCE = 0.2


# the shape every arm starts from: each budget solves its depth (width mode) or its width
# (depth mode). Width 3, the least RMS norm sees 2 inputs through: a layer costs 18 (d=2), 27
# (d=3), 36 (d=4) parameters, climbing depths 1, 2, 4, 8; fits cost O(N P^2) = O(P^3)
SHAPE = NetShape(depth=4, width=3, norm="rms", scaled_residual=True)


@dataclass(frozen=True)
class DegreeSweepConfig:
    # another task than a form's own starts from these (`config.resolve`): 3 seeds of one target
    OTHER_TASK: ClassVar[dict[str, Any]] = {"task_options": {}, "teachers": 1, "seeds": 3}
    task: str = field(default="teacher", metadata=meta("registered task name"))
    task_options: dict[str, Any] = field(default_factory=dict)
    # d = e is left out of the defaults: at width 3 its fractional factor is rank 1, a
    # one-dimensional gate whose fits generalized worse and scaled with an exponent of their own
    # (the results log): it measured the gate more than the degree
    degrees: tuple[str, ...] = field(
        default=("2", "3", "4"),
        metadata=meta(
            "degrees to compare: integers, decimals, 'e', or per-layer lists '[3,2,3]'",
            min_len=0,
        ),
    )
    baselines: tuple[str, ...] = field(
        default=("mlp",),
        metadata=meta(
            "other blocks compared at the same budgets, with options in parentheses: "
            "'mlp', 'softmax_attention(heads=2)', 'poly_attention(n=2)'",
            min_len=0,
        ),
    )
    budgets: tuple[int, ...] = field(
        default=(),
        metadata=meta(
            "parameter budgets of the blocks, each arm's shape solved per budget; empty: every "
            "arm at --depths",
            ge=1,
            min_len=0,
        ),
    )
    depths: tuple[int, ...] = field(
        default=(1, 2, 4, 8),
        metadata=meta(
            "without --budgets: the depths every arm runs at --width, each at the count it "
            "costs (the fits read actual counts)",
            ge=1,
            min_len=0,
        ),
    )
    seeds: int = field(default=3, metadata=meta("seeds per configuration (0, 1, ...)", ge=1))
    teachers: int = field(
        default=1,
        metadata=meta(
            "independent targets (the task's data seeds 0, 1, ...); every arm and seed fits "
            "each of them, and arms pair by (teacher, seed)",
            ge=1,
        ),
    )
    mode: str = field(
        default="width",
        metadata=meta(
            "'width': every arm at --width, each budget solving its depth; 'depth': at "
            "--depth, solving its width",
            choices=("width", "depth"),
        ),
    )
    budget_tol: float = field(
        default=DEMO_BUDGET_TOLERANCE,
        metadata=meta(
            "how far an arm's parameter count may land from its budget (a share of it); the "
            "fits read the actual counts",
            gt=0,
            lt=1,
        ),
    )
    shape: NetShape = SHAPE
    lr_grid: tuple[float, ...] = _trials.lr_grid_field((1e-2, 3e-2, 1e-1), "arm")
    lr_extend: int = _trials.lr_extend_field(2)
    plateau_tol: float = _trials.plateau_tol_field(
        "validation loss (wsd: twice the steps; cosine: the last quarter of training)"
    )
    alpha: float = field(
        default=0.05, metadata=meta("significance level of the paired tests", gt=0, lt=1)
    )
    n_boot: int = field(
        default=1000, metadata=meta("bootstrap draws for the scaling fits' intervals", ge=0)
    )
    count: str = field(
        default="nominal",
        metadata=meta(
            "the count the status's multipliers are fitted on: 'nominal' (what a budget pays, "
            "seed 000's count) or 'functional' (the rank of the parameter Jacobian; a degree-d "
            "layer of width w has (d-1) w redundant parameters); the report shows both",
            choices=("nominal", "functional"),
        ),
    )
    ladder: str = field(
        default="on",
        metadata=meta(
            "lbfgs, lm: 'on': each arm climbs its depths in turn, every depth started from the "
            "fitted one below plus layers whose residual branch is zero (its function "
            "unchanged), restarts as independent chains; 'off': a fresh fit at every budget",
            choices=("on", "off"),
        ),
    )
    referee: bool = field(
        default=True,
        metadata=meta(
            "lbfgs, lm: fit each cell's first trial (teacher 0, seed 0, its first "
            "initialization) with the other second-order optimizer too, and report how far "
            "apart the two land"
        ),
    )
    # Levenberg-Marquardt from a short Adam warm start at the first depth: the question is what
    # each degree can fit, so a fit runs until a doubling of its iterations gains less than
    # --converge-tol; two chains climb the depths, each continuing the best fit below (one
    # chain's best strays far above two chains'); examples per parameter enough that test loss
    # stays near train (the measurements are in the results log). Under --optimizer adam give
    # --steps (1,000 or more); wsd makes each Adam trial measure what twice its steps would have
    # gained (`train.half_run`)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            optimizer="lm",
            steps=1024,
            restarts=2,
            chains="best",
            data_ratio=64.0,
            min_examples=4096,
            warm_start=1000,
            lr=1e-2,
            batch_size=256,
            schedule="wsd",
        )
    )

    @classmethod
    def demo(cls) -> DegreeSweepConfig:
        """`blocklab demo`, chosen by the results log's candidates table: a relu teacher (its
        fits finish at every depth, where tanh teachers let deep fits creep on or stop in basins
        of their own), 3 teachers of 1 seed (teachers are the intervals' random effect: 3 on 3
        targets resolve more than 4 on 2), no mlp control (at width 3 its dead relu units
        flatten its curve), 512 iterations a rung at most"""
        quick = cls()
        return replace(quick, task_options={"activation": "relu"}, baselines=(), seeds=1,
                       teachers=3, train=replace(quick.train, steps=512))  # fmt: skip

    @classmethod
    def pilot(cls) -> DegreeSweepConfig:
        """4 teachers x 2 seeds x 8 chains per arm on the demo's ladder: it measures sigma,
        alpha and the spread between teachers, and sizes a +-3% run from them"""
        demo = cls.demo()
        return replace(demo, teachers=4, seeds=2, train=replace(demo.train, restarts=8))

    def __post_init__(self):
        from blocklab.tasks import make_task

        validate(self)
        if not self.degrees and not self.baselines:
            raise ValueError("nothing to compare: give degrees or baselines")
        task = make_task(self.task, **self.task_options)  # unknown tasks and options fail here
        if self.train.second_order and task.kind != "regression":
            raise UserError(
                f"--optimizer {self.train.optimizer} fits regression tasks; {self.task!r} is "
                f"{task.kind}: use --optimizer adam"
            )
        if self.teachers > 1 and not task.seed_dependent:
            raise ValueError(
                f"task {self.task!r} is a fixed dataset: it has one target, not teachers"
            )
        self.arms()  # unknown blocks and degrees, and an arm listed twice, fail here
        if not self.budgets and self.mode != "width":
            raise UserError(
                "--depths fixes depths at --width: it needs --mode width (or --budgets)"
            )
        if not self.budgets and not self.depths:
            raise UserError("give --budgets or --depths: nothing sets the shapes")
        if len(set(self.depths)) != len(self.depths):
            raise UserError(f"--depths lists a depth twice: {self.depths}")
        if self.shape.flatten:
            raise UserError(
                "shape.flatten is not used by the degree sweep: it compares blocks at equal "
                "block budgets, and a flattened network is counted whole (mad's fully "
                "connected baselines)"
            )

    @property
    def staged(self) -> bool:
        """Second-order fits on a depth ladder (`ladder` on, width mode, residual layers: an
        added layer starts with its residual branch at zero)."""
        ladder = self.ladder == "on" and self.mode == "width" and self.shape.residual
        return self.train.second_order and ladder

    def unused(self) -> dict[str, str]:
        """The keys this config does not read as it stands, with what sets their part instead:
        given in a TOML file or as flags, they fail rather than do nothing."""
        if self.train.second_order:  # train.lr is the warm start's, as its declaration says
            why = f"--optimizer {self.train.optimizer} fits without a learning rate search"
            out = {"lr_grid": why, "lr_extend": why}
            out["plateau_tol"] = "a converged fit is judged by --converge-tol"
            if self.ladder == "on":
                out["referee"] = (
                    "it refits fresh fits; a ladder's chains are compared by the search check "
                    "(--ladder off for the referee)"
                )
        else:
            out = _trials.lr_unused(self.lr_grid, self.lr_extend)
            out["referee"] = "it compares the two second-order optimizers (--optimizer lm)"
            out["ladder"] = "it stages second-order fits (--optimizer lm or lbfgs)"
        if self.budgets:
            out["depths"] = "--budgets sets every arm's shapes (give no --budgets to use --depths)"
        else:
            out["budget_tol"] = "it matches shapes to --budgets, and none are given"
        if self.mode == "width":
            out["shape.depth"] = (
                "in width mode each budget solves the depth (--mode depth fixes it)"
            )
        else:
            out["shape.width"] = (
                "in depth mode each budget solves the width (--mode width fixes it)"
            )
            out["ladder"] = "a ladder climbs depths at one width (--mode width)"
        if not self.shape.residual:
            out["shape.scaled_residual"] = "it scales the residual branches, and residual is off"
            out["ladder"] = "an added rung starts with its residual branch at zero (--residual)"
        if not self.degrees:
            out["shape.bias"] = "it applies to the degree arms, and degrees is empty"
        return out

    def arms(self) -> list[Arm]:
        from blocklab.models import parse_arm

        arms = [parse_arm(d) for d in self.degrees] + [parse_arm(b) for b in self.baselines]
        for b, arm in zip(self.baselines, arms[len(self.degrees) :], strict=True):
            if arm.degrees:
                raise UserError(f"baseline {b!r} is a degree; put it in degrees")
        labels = [a.label for a in arms]
        if len(set(labels)) != len(labels):
            raise UserError(f"an arm is listed twice: {', '.join(labels)}")
        return arms


def _spec(cfg: DegreeSweepConfig, arm: Arm, shape: Shape, lr: float, seed: int, teacher: int = 0):
    return TrialSpec(
        task=cfg.task,
        task_options=dict(cfg.task_options),
        arm=arm,
        budget=shape.budget,
        shape=replace(
            cfg.shape,
            depth=shape.depth,
            width=shape.width,
            bias=bias_of(cfg, arm),
            scaled_residual=cfg.shape.scaled_residual and cfg.shape.residual,
        ),
        train=replace(cfg.train, lr=lr),
        seed=seed,
        data_seed=teacher,
    )


def search_at(cfg: DegreeSweepConfig, shapes) -> dict[tuple[int, str], Any]:
    """Per (budget, arm): its trial at a given rate with seed 0 and teacher 0."""
    return {key: functools.partial(_spec, cfg, *shapes[key], seed=0) for key in shapes}


def run(
    cfg: DegreeSweepConfig,
    store: Store,
    *,
    resources: Resources | None = None,
    progress: bool = True,
) -> DegreeSweepTrials:
    from blocklab.engine.sweep import left_to_run
    from blocklab.experiments import _degree_exact
    from blocklab.tasks import make_task

    task = make_task(cfg.task, **cfg.task_options)
    shapes, higher = plan(cfg, task), task.higher_is_better
    seen = _degree_plan.input_ranks(cfg, shapes, _spec)  # before any fit: a hidden input is refused
    _degree_plan.check_ladders(cfg, shapes, _spec)  # and a block its ladder cannot continue
    # each row gets its cell's functional count beside the nominal one, measured before any fit
    counted = functools.partial(
        _degree_exact.with_counts, _degree_exact.functional_counts(cfg, shapes, _spec)
    )
    exact = _degree_exact.exact_measures(cfg, cfg.arms())

    def finals(rates: dict[tuple[int, str], float]) -> list[tuple[dict[str, Any], TrialSpec]]:
        return [
            ({}, _spec(cfg, arm, shape, rates[key], seed, teacher))
            for key, (arm, shape) in shapes.items()
            for teacher in range(cfg.teachers)
            for seed in range(cfg.seeds)
        ]

    if cfg.staged:
        planned = _degree_plan.ladders(cfg, shapes, _spec)
    elif cfg.train.second_order:  # no learning rate to search
        planned = finals({key: cfg.train.lr for key in shapes})
        planned += [({"referee": True}, s) for s in _degree_plan.referees(cfg, shapes, _spec)]
    if cfg.train.second_order:
        # the plan said only where something is left to fit: a rerun that re-analyses fits none
        left = bool(left_to_run([s for _, s in planned], store))
        planned = _degree_plan.optimizers(planned, resources, progress and left)
        # the largest first: a fit's cost grows as N P^2 = O(P^3), so two workers that start on
        # the dearest fits finish together instead of one waiting on a late large fit
        planned.sort(key=lambda keyed: -keyed[1].budget)
        trials = _trials.run_planned(
            planned, store, EXPERIMENT, resources=resources, progress=progress, label="fits"
        )
        rows = counted([r for r in trials.rows if not r.get("referee")])
        referee = [r for r in trials.rows if r.get("referee")]
        return DegreeSweepTrials(rows, trials.failed, {}, referee, seen, exact)
    at = search_at(cfg, shapes)
    trials, lr_choice = _trials.run_searched(
        cfg, at, finals, store, EXPERIMENT, resources=resources, progress=progress, higher=higher
    )
    return DegreeSweepTrials(
        counted(trials.rows), trials.failed, lr_choice, input_rank=seen, exact=exact
    )


PILOT_TIME = (
    "estimated, not measured: about 1.0 h on 2 CPU cores (the demo's 220 core-seconds per "
    "(teacher, seed) unit at 2 chains, times 4 for 8 chains, times 8 units) and about 38 min on "
    "one H100 or H200 (a ladder trial ran 3.1x faster on an H200 than on one CPU core)"
)


@EXPERIMENTS.register
class DegreeSweep(Experiment):
    Config = DegreeSweepConfig
    run = staticmethod(run)
    report = "blocklab.reports.degree_sweep"
    forms = {"pilot": PILOT_TIME}
    commands = (
        Command(
            "demo",
            "the main job: seed 000's degree experiment, in minutes",
            "runs/demo",
            form="demo",
            measured="5 min 51 s from a fresh clone (an AVX-512 machine)",
        ),
        Command(
            "degree-sweep",
            "degree-d networks at equal parameter budgets",
            "runs/degree-sweep",
            measured="10 min 5 s from a fresh clone (an AVX-512 machine)",
        ),
    )
    task_options = True
    # one learning rate is chosen per arm from lr_grid, so a single --lr would say nothing; arms
    # compare at equal block budgets, which a flattened network is not counted by
    no_flags = ("lr", "flatten")

"""The degree sweep's config: what a run compares (degrees and baselines, at budgets or depths),
how each trial fits, and which of its keys a run does not read as it stands (`unused`). Its forms:
the quick defaults, `demo()` (`blocklab demo`) and `pilot()`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from blocklab.errors import UserError
from blocklab.experiments import _trials
from blocklab.options import build, meta, validate
from blocklab.specs import Arm, NetShape, TrainConfig

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
    roundings: int = field(
        default=1,
        metadata=meta(
            "fit every (teacher, seed) unit K times: the run itself and K-1 more with every "
            "parameter of each initialization moved by its last bit, as another machine's "
            "rounding moves a fit; the report states the status, each check and each "
            "multiplier across them (K times the fits)",
            ge=1,
        ),
    )
    target_resolution: float | None = field(
        default=None,
        metadata=meta(
            "size the run to this resolution R (the half width of the multipliers' 95% "
            "intervals on the log scale, as a share: 0.1 is +-10%): the (teacher, seed) units "
            "the power calculation of a finished run of this design asks for (the run in --out, "
            "else the demo's recorded one), as teachers of --seeds seeds unless --teachers is "
            "given; the report words each of seed 000's predictions at R",
            gt=0,
            lt=1,
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
        # inert: it reads the task's class and checks its options, and builds no task or data
        from blocklab.tasks import TASKS

        validate(self)
        if not self.degrees and not self.baselines:
            raise ValueError("nothing to compare: give degrees or baselines")
        task = TASKS.get(self.task)  # unknown tasks fail here, and unknown options below
        build(task.Options, self.task_options, what=f"task {task.name!r}")
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
            out = {"lr_extend": why, "lr_grid": why}
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

    def bias(self, arm: Arm) -> bool:
        """Whether an arm's layers take biases: the polynomial family follows shape.bias, other
        blocks keep their own bias options."""
        return self.shape.bias if arm.degrees else False

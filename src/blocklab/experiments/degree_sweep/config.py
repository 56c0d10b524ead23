"""The degree sweep's config: what a run compares (degrees and baselines, and with `control` a
second d=3 arm, at budgets or at depths, each arm's own with `arm_depths`), how each trial fits,
and which of its keys a run does not read as it stands (`unused`). Its forms: the quick defaults,
`demo()` (`blocklab demo`) and `pilot()`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from blocklab.errors import UserError
from blocklab.experiments import _arms, _trials
from blocklab.experiments.degree_sweep import arm_depths
from blocklab.experiments.degree_sweep.arm_depths import CONTROL_LABEL, CONTROLLED
from blocklab.options import build, meta, validate
from blocklab.specs import DEGREE_FORMS, Arm, NetShape, TrainConfig, parse_degree

DEMO_BUDGET_TOLERANCE = 0.2
# the demo's matched design at width 3 (18, 27, 36 parameters a layer): d=2 at 36, 72, 108,
# d=3 at 27, 54, 108, d=4 at 36, 72, 108; the top rungs are most of a unit's cost
DEMO_ARM_DEPTHS = ("d=2:2,4,6", "d=3:1,2,4", "d=4:1,2,3")
DEMO_TEACHERS = 6

# the negative control (`control`): the arm it repeats under a label of its own, fitting the same
# teachers from seeds of its own: this plus the seed it stands beside (which its rows keep, as
# arms pair by it), a prime far above any run's seeds, so no control draw is one of d=3's
CONTROL_SEED_OFFSET = 1_000_003  # the control's trial seeds: the unit's plus this


# what an entry of `degrees` may be
DEGREES = f"{DEGREE_FORMS}, or a per-layer list such as [3,2,3]"


def _degree(text: str) -> str:
    """An entry of `degrees` as `parse_arm` reads it, refused as a degree where it would read a
    block's name: one that names a block says where the block belongs."""
    from blocklab.blocks import BLOCKS

    s = str(text).strip()
    if not (s.startswith("[") and s.endswith("]")):  # parse_arm reads a list's each as a degree
        if s.partition("(")[0].strip() in set(BLOCKS.names()) - {"poly", "fractional"}:
            raise UserError(f"degrees entry {text!r} is a block; put it in baselines")
        parse_degree(s, DEGREES)
    return text


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
    # arms of other degrees meet at equal counts only at depths of their own (a layer's cost
    # differs), and the matched contrast pairs rungs of equal counts
    arm_depths: tuple[str, ...] = field(
        default=(),
        metadata=meta(
            "without --budgets: named arms climb depths of their own at --width, each entry "
            "LABEL:DEPTHS ('d=2:2,4,6 d=3:1,2,4 d=4:1,2,3' puts d=2 and d=4 at 36, 72 and 108 "
            "parameters and d=3 with them at 108, at width 3); arms not named keep --depths",
            min_len=0,
        ),
    )
    control: bool = field(
        default=False,
        metadata=meta(
            f"a negative control: a second d=3 arm, {CONTROL_LABEL!r}, climbing d=3's depths "
            f"on the same teachers from initializations of its own (seed {CONTROL_SEED_OFFSET} "
            "+ s, its rows paired as seed s); its multiplier against d=3 must be 1"
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
            "the count the scaling-law view is fitted on: 'nominal' (what a budget pays, seed "
            "000's count) or 'functional' (the rank of the parameter Jacobian; a degree-d layer "
            "of width w has (d-1) w redundant parameters); the answer is on the nominal count, "
            "where H_fd words the functional one, and the report shows both",
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
        """`blocklab demo`: the matched design (`DEMO_ARM_DEPTHS`: all three arms meet at 108
        block parameters, d=2 and d=4 at 36 and 72 too, d=3 interpolated there) with its
        negative control, on relu teachers (their fits finish at every depth, where tanh
        teachers let deep fits creep on or stop in basins of their own), DEMO_TEACHERS teachers
        of 1 seed (the answer's random effect), no mlp control (at width 3 its dead relu units
        flatten its curve), 512 iterations a rung at most. Its size: as many teachers as fit in
        the demo's time on 2 AVX-512 cores, half of its limit on an AVX2 one (the results
        log measures a unit's cost)"""
        quick = cls()
        return replace(quick, task_options={"activation": "relu"}, baselines=(), seeds=1,
                       teachers=DEMO_TEACHERS, arm_depths=DEMO_ARM_DEPTHS, control=True,
                       train=replace(quick.train, steps=512))  # fmt: skip

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
        if self.arm_depths:  # as one text: the flag's words came split at every comma
            object.__setattr__(self, "arm_depths", arm_depths.joined(self.arm_depths))
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
        if self.arm_depths and (self.budgets or self.mode != "width"):
            instead = "--budgets solve all shapes" if self.budgets else "--mode depth solves widths"
            raise UserError(
                f"--arm-depths sets each arm's depths at --width, and {instead} instead: it "
                "needs --mode width without --budgets"
            )
        if not self.budgets and self.mode != "width":
            raise UserError(
                "--depths fixes depths at --width: it needs --mode width (or --budgets)"
            )
        if len(set(self.depths)) != len(self.depths):
            raise UserError(f"--depths lists a depth twice: {self.depths}")
        # unknown labels and bad depths in --arm-depths fail here
        bare = [] if self.budgets else [a for a, d in self.depths_by_arm().items() if not d]
        if bare:
            or_ = "or name them in --arm-depths" if self.arm_depths else "or --budgets"
            raise UserError(f"nothing sets the depths of {', '.join(bare)}: give --depths {or_}")
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
            out["arm_depths"] = "--budgets sets every arm's shapes (give no --budgets to use it)"
        else:
            out["budget_tol"] = "it matches shapes to --budgets, and none are given"
            named = {entry.rpartition(":")[0].strip() for entry in self.arm_depths}
            if named >= {a.label for a in self.arms() if a.label != CONTROL_LABEL}:
                out["depths"] = "--arm-depths names the depths of every arm"
        if self.mode == "width":
            out["shape.depth"] = (
                "in width mode each budget solves the depth (--mode depth fixes it)"
            )
        else:
            out["shape.width"] = (
                "in depth mode each budget solves the width (--mode width fixes it)"
            )
            out["arm_depths"] = "it sets depths at one width (--mode width)"
            out["ladder"] = "a ladder climbs depths at one width (--mode width)"
        if not self.shape.residual:
            out["shape.scaled_residual"] = "it scales the residual branches, and residual is off"
            out["ladder"] = "an added rung starts with its residual branch at zero (--residual)"
        if not self.degrees:
            out["shape.bias"] = "it applies to the degree arms, and degrees is empty"
        return out

    def arms(self) -> list[Arm]:
        """The run's arms: the degrees, the control beside them (`control`), the baselines."""
        from blocklab.models import parse_arm

        degrees = [parse_arm(_degree(d)) for d in self.degrees]
        baselines = [_arms.arm(b) for b in self.baselines]
        for b, arm in zip(self.baselines, baselines, strict=True):
            if arm.degrees:
                raise UserError(f"baseline {b!r} is a degree; put it in degrees")
        labels = [a.label for a in degrees + baselines]
        if len(set(labels)) != len(labels):
            raise UserError(f"an arm is listed twice: {', '.join(labels)}")
        controls = []
        if self.control:
            repeated = next((a for a in degrees if a.label == CONTROLLED), None)
            if repeated is None:
                raise UserError(f"--control repeats the {CONTROLLED} arm: add 3 to --degrees")
            # built, not parsed: the label is no degree, and the block and its settings are d=3's
            controls = [replace(repeated, label=CONTROL_LABEL)]
        return degrees + controls + baselines

    @classmethod
    def yield_to(cls, base: dict[str, Any], given: dict[str, Any]) -> None:
        """A form's values that what the user gives takes the place of (`config.resolve`):
        `arm_depths.yield_to`."""
        arm_depths.yield_to(base, given)

    def depths_by_arm(self) -> dict[str, tuple[int, ...]]:
        """Per arm label, the depths it climbs at --width without --budgets, shallowest first:
        its --arm-depths entry, else --depths; the control climbs d=3's. An entry naming no arm
        of the run (with a did-you-mean), an arm or a depth twice, or a bad depth, fails."""
        arms = self.arms()
        labels = [a.label for a in arms if a.label != CONTROL_LABEL]
        named: dict[str, tuple[int, ...]] = {}
        for entry in self.arm_depths:
            label, depths = arm_depths.entry(entry, labels)
            if label in named:
                raise UserError(f"--arm-depths names {label} twice")
            named[label] = depths
        out = {a.label: named.get(a.label, tuple(sorted(self.depths))) for a in arms}
        if self.control:
            out[CONTROL_LABEL] = out[CONTROLLED]
        return out

    def bias(self, arm: Arm) -> bool:
        """Whether an arm's layers take biases: the polynomial family follows shape.bias, other
        blocks keep their own bias options."""
        return self.shape.bias if arm.degrees else False

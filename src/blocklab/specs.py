"""What a trial is, free of torch: the arm, the training config, the trial spec and its id, the
degrees and switches a network takes by name, and how trials group into batches of work
(`batches`). Configs and the command line read these without importing torch; `engine.sweep`
runs the specs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from blocklab.errors import UserError
from blocklab.options import meta, validate

NORMS = ("none", "layer", "rms")
SCHEDULES = ("cosine", "wsd")  # the learning rate after warmup (train.lr_factor)
ACTIVATIONS = ("none", "relu", "gelu", "tanh")  # after each block (models.ACTIVATIONS builds them)
FEED_FORWARD = {"none": 0, "relu4x": 4}  # name -> hidden expansion of the position-wise MLP
DEGREE_FORMS = "a real number >= 1 (2, 3, 2.5) or e"  # what a degree may be, as errors say it
# how far from its budget an arm's parameter count may land, as a share of it (budget.solve)
BUDGET_TOLERANCE = 0.02
# how a trial fits its network: AdamW on minibatches (`fitting.train`), or a full-batch float64
# second-order fit of a regression task to convergence (`fitting.converge`, `fitting.fit`)
OPTIMIZERS = ("adam", "lbfgs", "lm")
# an Adam step's precision: "auto" bf16 autocast on a CUDA device that supports it, else float32;
# "fp32"; "tf32" (CUDA matmuls in TF32; float32 elsewhere); "bf16" autocast on any device
PRECISIONS = ("auto", "fp32", "tf32", "bf16")
SECOND_ORDER = ("lbfgs", "lm")

# A setting declares, in its field's metadata, which loop reads it and when it enters a trial's
# id; `TrainConfig.unread` (the command line's refusals), `TrialSpec.config` (the id) and the
# help line all read that one declaration.
# READS: "adam", the AdamW loop (which a second-order fit runs as its warm start); "fit", a
# second-order fit; absent: both
READS = "reads"
# WHEN: (another setting, its value) while which alone the setting is read, or LADDER: read on a
# depth ladder alone (a spec's, not a config's)
WHEN = "when"
LADDER = "ladder"
# IN_ID False: how a step computes, not what a trial is, like the device (the store checks the
# precision a trial ran at against the one asked for: `engine.reuse.other_precision`)
IN_ID = "in_id"
# SINCE: a field added after trials were stored, left out of a trial's id at this default so
# those trials keep their ids (`TrialSpec.config`)
SINCE = "id_default"
_MISSING = object()


def setting(
    default: Any,
    help: str,
    *,
    reads: str | None = None,
    when: Any = None,
    since: Any = _MISSING,
    in_id: bool = True,
    **rules: Any,
) -> Any:
    """A training setting's field: its help line (a second-order fit's settings say so first),
    its rules (`options.meta`) and its declaration (READS, WHEN, SINCE, IN_ID)."""
    if reads == "fit":
        help = f"lbfgs, lm{' on a depth ladder' if when == LADDER else ''}: {help}"
    declared = {READS: reads, WHEN: when, IN_ID: in_id}
    if since is not _MISSING:
        declared[SINCE] = since
    return field(default=default, metadata={**meta(help, **rules), **declared})  # fmt: skip


def format_degree(d: float) -> str:
    if abs(d - math.e) < 1e-12:
        return "e"
    return f"{d:g}"


def parse_degree(text: str, forms: str = DEGREE_FORMS) -> float:
    s = str(text).strip().lower()
    try:
        d = math.e if s == "e" else float(s)
    except ValueError:
        raise UserError(f"degree {text!r} is not a number; a degree is {forms}") from None
    if not math.isfinite(d) or d < 1:
        why = "is below 1" if d < 1 else "is not finite"
        raise UserError(f"degree {text!r} {why}; a degree is {forms}")
    return d


@dataclass(frozen=True)
class Arm:
    """What a comparison varies, by name: a polynomial degree pattern (cycled over the layers)
    or another registered block with its options. `models` builds its layers (`parse_arm`,
    `layer_blocks`, `block_params`)."""

    label: str
    block: str  # "poly" for the polynomial family, else a registered block name
    degrees: tuple[float, ...] = ()  # per-layer pattern, cycled; empty for other blocks
    kwargs: dict[str, Any] = field(default_factory=dict)
    block_degree: float | None = None  # the degree another block states (None: not polynomial)

    @property
    def degree(self) -> float | None:
        """Average degree per layer over one pattern, or the block's stated degree."""
        return sum(self.degrees) / len(self.degrees) if self.degrees else self.block_degree


@dataclass(frozen=True)
class TrainConfig:
    """How a trial trains: the AdamW loop's settings (READS "adam"), a second-order fit's
    ("fit"), and those both read. Each field declares who reads it and when it enters the id."""

    optimizer: str = setting(
        "adam",
        "'adam': AdamW on minibatches; 'lbfgs' (L-BFGS, strong-Wolfe line search) or 'lm' "
        "(Levenberg-Marquardt): full batch in float64 on a fixed training set, fitted to "
        "convergence (regression tasks)",
        since="adam",  # Adam trials keep the ids they had before fits existed
        choices=OPTIMIZERS,
    )
    steps: int = setting(
        1000, "optimizer steps per trial (lbfgs, lm: iterations per restart)", ge=1
    )
    # the AdamW loop's settings
    batch_size: int = setting(128, "examples per step", reads="adam", ge=1)
    lr: float = setting(3e-3, "peak learning rate", reads="adam", gt=0)
    weight_decay: float = setting(0.01, "AdamW weight decay", reads="adam", ge=0)
    warmup: float = setting(0.05, "fraction of steps of linear warmup", reads="adam", ge=0, lt=1)
    schedule: str = setting(
        "cosine",
        "after warmup: 'cosine' decay to zero, or 'wsd' (the peak rate held, then a linear "
        "decay to zero over the last `decay` of the steps)",
        reads="adam",
        since="cosine",  # trials made before wsd existed
        choices=SCHEDULES,
    )
    decay: float = setting(
        0.2,
        "fraction of steps of the final decay (wsd)",
        reads="adam",
        when=("schedule", "wsd"),
        gt=0,
        lt=1,
    )
    # a negative threshold would train by gradient ascent, zero would not train at all
    clip: float = setting(1.0, "gradient-norm clipping threshold", reads="adam", gt=0)
    # both loops' monitoring
    eval_points: int = setting(40, "validation evaluations per run", ge=1)
    threshold: float | None = setting(
        None, "validation loss that counts as converged; None: the task's own", gt=0
    )
    # at 1 or below, the first evaluation would already count as diverged
    blowup: float = setting(100.0, "diverged when the loss exceeds this times its start", gt=1)
    # a second-order fit's settings
    restarts: int = setting(
        1,
        "initializations fitted per trial; the trial keeps the one of least training loss and "
        "stores the others' spread",
        reads="fit",
        ge=1,
    )
    converge_tol: float = setting(
        0.03,
        "a fit is converged when its second half of the iterations (doubling them) lowered its "
        "training loss by less than this share",
        reads="fit",
        gt=0,
        lt=1,
    )
    data_ratio: float = setting(
        32.0,
        "fixed training examples per trained parameter, so that the training loss reads as "
        "approximation error (test within about 1.2x of train)",
        reads="fit",
        gt=0,
    )
    min_examples: int = setting(
        1,
        "at least this many training examples: a small network's test loss is noisy against "
        "its training loss at data_ratio alone, and costs little more",
        reads="fit",
        since=1,  # trials made before it existed
        ge=1,
    )
    max_examples: int = setting(
        32768, "at most this many training examples (the cost is linear)", reads="fit", ge=1
    )
    chains: str = setting(
        "own",
        "'own': each restart continues its own fit up the ladder (independent chains); 'best': "
        "every restart continues the best fit of the depth below, its added layers its own (a "
        "beam of one, K proposals per depth)",
        reads="fit",
        when=LADDER,
        choices=("own", "best"),
    )
    warm_start: int = setting(
        0, "AdamW steps (lr, batch size, schedule) before the fit", reads="fit", ge=0
    )
    precision: str = setting(
        "auto",
        "an Adam step's precision: 'auto' (bf16 autocast on a CUDA device that supports it, "
        "else float32), 'fp32', 'tf32' (the forward's CUDA matmuls in TF32), 'bf16' "
        "(autocast, on the CPU too); evaluation and second-order fits stay in float32 and "
        "float64",
        reads="adam",
        in_id=False,
        choices=PRECISIONS,
    )

    def __post_init__(self):
        validate(self)
        if self.schedule == "wsd" and self.warmup > (1 - self.decay) / 2:
            # the run of half the steps, whose loss tells a plateau, branches off the stable
            # phase and must start its decay after the warmup (`train.half_run`)
            raise ValueError(
                f"warmup ({self.warmup}) must end before a run of half the steps starts its "
                f"decay: under wsd, warmup <= (1 - decay) / 2 = {(1 - self.decay) / 2:g}"
            )

    @property
    def second_order(self) -> bool:
        return self.optimizer in SECOND_ORDER

    def unread(self, name: str, ladder: bool | None = None) -> str | None:
        """Why setting `name` is not read as this config stands (None: it is), from its
        declaration; `ladder`: whether the trial climbs a depth ladder (None: not known)."""
        declared = self.__dataclass_fields__[name].metadata
        reads, when = declared.get(READS), declared.get(WHEN)
        if reads == "fit" and not self.second_order:
            return "it sets a second-order fit (--optimizer lm or lbfgs)"
        if reads == "adam" and self.second_order and not self.warm_start:
            return f"--optimizer {self.optimizer} fits without it (it shapes an Adam --warm-start)"
        if when == LADDER:
            return "it sets a depth ladder's chains" if ladder is False else None
        if when and getattr(self, when[0]) != when[1]:
            return f"it shapes the {when[1]} {when[0]} alone (--{when[0]} {when[1]})"
        return None

    def unused(self) -> dict[str, str]:
        return {f.name: why for f in dataclasses.fields(self) if (why := self.unread(f.name))}

    def id_fields(self, ladder: bool) -> dict[str, Any]:
        """The settings a trial's id reads: those read as it stands, less those at their SINCE
        default, less those marked IN_ID False."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata.get(IN_ID, True)
            and self.unread(f.name, ladder) is None
            and f.metadata.get(SINCE, _MISSING) != getattr(self, f.name)
        }


@dataclass(frozen=True)
class NetShape:
    """A network's shape besides its arm and its task: everything `models.Net` is built from
    that a trial chooses. One object, held whole by `TrialSpec` and read whole by `Net`; a new
    switch is one field here (with `SINCE` in its metadata, so stored trials keep their ids)."""

    depth: int = field(default=1, metadata=meta("layers in the stack", ge=1))
    width: int = field(default=32, metadata=meta("layer width (the model dimension)", ge=1))
    bias: bool = field(default=False, metadata=meta("biases inside the polynomial factors"))
    norm: str = field(
        default="none",
        metadata=meta(f"normalization: {', '.join(NORMS)}", choices=NORMS),
    )
    activation: str = field(
        default="none",
        metadata=meta(
            f"activation after each block: {', '.join(ACTIVATIONS)}", choices=ACTIVATIONS
        ),
    )
    residual: bool = field(default=True, metadata=meta("residual connection around each layer"))
    ff: str = field(
        default="none",
        metadata=meta(
            f"feed-forward sublayer per layer, counted in the budget: {', '.join(FEED_FORWARD)}",
            choices=tuple(FEED_FORWARD),
        ),
    )
    flatten: bool = field(
        default=False,
        metadata=meta("a sequence task fed as one flat vector (a fully connected baseline)"),
    )
    scaled_residual: bool = field(
        default=False,
        metadata={
            **meta("residual branches times 1/sqrt(depth), so deep stacks train like shallow ones"),
            SINCE: False,
        },
    )

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class TrialSpec:
    task: str
    task_options: dict[str, Any]
    arm: Arm
    budget: int
    shape: NetShape
    train: TrainConfig
    seed: int
    data_seed: int | None = None  # None: the task's data follow the trial seed
    # measures taken at initialization and after training, e.g. ("collapse", "seprank(templates=3)")
    measures: tuple[str, ...] = ()
    # a depth ladder (second-order fits): the depths fitted in turn, each rung started from the
    # fitted one below plus silenced layers (`models.continue_from`), ending at `depth`; empty:
    # one fit at `depth` from a fresh initialization
    ladder: tuple[int, ...] = ()
    # 0: the trial itself; r >= 1: the same trial under another rounding, every parameter of
    # its initialization moved by its last bit (`fitting.network.init_model`), as another
    # machine's kernels move a computation's bits: the run repeated there
    rounding: int = 0

    def at_depth(self, depth: int, **changes: Any) -> TrialSpec:
        """This trial at another depth (a ladder's rung), with any other fields changed."""
        return dataclasses.replace(
            self, shape=dataclasses.replace(self.shape, depth=depth), **changes
        )

    def config(self) -> dict[str, Any]:
        """What a trial's id hashes: its fields, the shape's flat (as trials stored them before
        it was one object), each setting as its declaration says (`TrainConfig.id_fields`), and
        fields at their SINCE default left out, so trials made before they existed keep their
        ids."""
        config = dataclasses.asdict(self)
        late = {
            f.name: f.metadata[SINCE] for f in dataclasses.fields(self.shape) if SINCE in f.metadata
        }
        config.update(config.pop("shape"))
        for name, default in (("measures", ()), ("ladder", ()), ("rounding", 0), *late.items()):
            if config[name] == default:
                del config[name]
        config["train"] = self.train.id_fields(ladder=bool(self.ladder))
        return config

    @functools.cached_property
    def id(self) -> str:
        text = json.dumps(self.config(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        fit = self.train.optimizer if self.train.second_order else f"lr={self.train.lr:g}"
        depths = "/".join(map(str, self.ladder)) if self.ladder else str(self.shape.depth)
        shape = f"L={depths} w={self.shape.width} {fit}"
        seeds = f"teacher={self.data_seed} " if self.data_seed is not None else ""  # its data
        seeds += f"seed={self.seed}" + (f" rounding={self.rounding}" if self.rounding else "")
        return f"{self.task} B={self.budget} {self.arm.label} {shape} {seeds}"


def ensemble_key(spec: TrialSpec) -> str | None:
    """Trials with equal keys can train as one ensemble: they differ only in seeds and learning
    rate. None for trials that train alone: those taking measures of the network, and
    second-order fits (each a full-batch computation of its own)."""
    if spec.measures or spec.train.second_order:
        return None
    config = spec.config()
    del config["seed"], config["data_seed"]
    config["train"] = {**config["train"], "lr": None}
    return json.dumps(config, sort_keys=True, default=str)


def fit_key(spec: TrialSpec) -> str | None:
    """Trials with equal keys can fit as one batched Levenberg-Marquardt computation per rung
    (`fitting.cohorts`): depth-ladder trials that differ only in their seeds, the
    initialization's and the teacher's (`data_seed`). None for every other trial."""
    if spec.measures or spec.train.optimizer != "lm" or not spec.ladder:
        return None
    config = spec.config()
    del config["seed"], config["data_seed"]
    return "fit " + json.dumps(config, sort_keys=True, default=str)


def batches(
    specs: list[TrialSpec], ensemble: int, workers: int, fits: bool = False
) -> list[list[TrialSpec]]:
    """Batches of work, each run as one: trials sharing an architecture in ensembles of at most
    `ensemble` members, and with `fits` (where the sweep's device batches them:
    `fitting.cohorts.batch_units`) ladders of one shape (`fit_key`) in groups of at most
    `ensemble`, made smaller when that leaves some of the `workers` idle. Which trials share a
    batch depends on the set of specs and `fits` alone, not on their order, so a sweep that
    groups all its trials, finished or not, trains each trial in the same batch whenever it runs
    on that device."""
    size = max(1, min(ensemble, math.ceil(len(specs) / max(1, workers))))
    groups: dict[str, list[TrialSpec]] = {}
    for spec in specs:
        key = ensemble_key(spec) or (fit_key(spec) if fits else None) or spec.id
        groups.setdefault(key, []).append(spec)
    out = []
    for group in groups.values():  # split evenly: 9 at size 8 is 5 + 4, not 8 + 1
        group = sorted(group, key=lambda s: s.id)
        parts = math.ceil(len(group) / size)
        out += [group[i::parts] for i in range(parts)]
    return out

"""The block contract: shape and finiteness, the exact parameter count, a gradient to every
parameter, the same Jacobian in forward and reverse mode, the stated degree and homogeneity,
determinism by seed, token mixing as stated, no look-ahead where causal, the registered name, and
the depth ladder the default degree sweep climbs (`check_ladder`, shared with the sweep).
Run on each block with each of its `examples`, at d_in != d_out (a transposed or square-only
weight shows) unless the block is `same_width`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from blocklab import models
from blocklab.blocks import BLOCKS, Block
from blocklab.checks import NotApplicable, expect, label
from blocklab.errors import UserError
from blocklab.specs import Arm, NetShape

D_IN, D_OUT = 7, 5
T = 3  # the sequence length of `inputs()`
BATCH = 4


def registry():
    return BLOCKS


@dataclass
class Case:
    name: str
    example: dict[str, Any]

    @property
    def cls(self):
        return BLOCKS.get(self.name)

    @property
    def d_out(self) -> int:
        return D_IN if self.cls.same_width else D_OUT

    def kwargs(self) -> dict[str, Any]:
        """The example's kwargs plus the sequence length for blocks whose weights depend on it."""
        return {**self.example, "seq_len": T} if self.cls.needs_seq_len else dict(self.example)

    def build(self, seed: int = 0):
        return build(self.name, self.example, seed, D_IN, self.d_out)

    def __str__(self) -> str:
        return label(self.name, self.example)


def cases(names: list[str] | None = None) -> list[Case]:
    names = BLOCKS.names() if names is None else names
    return [Case(name, dict(kw)) for name in names for kw in BLOCKS.get(name).examples]


def build(name: str, kw: dict[str, Any], seed: int = 0, d_in: int = D_IN, d_out: int = D_OUT):
    cls = BLOCKS.get(name)
    torch.manual_seed(seed)
    return cls(d_in, d_out, **({**kw, "seq_len": T} if cls.needs_seq_len else kw))


def inputs(seed: int = 0, scale: float = 1.0, dtype=torch.float32, d_in: int = D_IN):
    gen = torch.Generator().manual_seed(1000 + seed)  # independent of the init seed
    x = torch.randn(BATCH, T, d_in, generator=gen, dtype=torch.float64)  # (B, T, D_in)
    return (scale * x).to(dtype)


def n_params(module) -> int:
    """Trainable parameters: the ones a budget counts (frozen ones are not trained)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def shape(case: Case) -> None:
    y = case.build()(inputs())  # (B, T, D_out)
    want = (BATCH, T, case.d_out)
    expect(y.shape == want, f"output shape {tuple(y.shape)}, expected {want}")
    expect(torch.isfinite(y).all(), "the output is not finite")


def params(case: Case) -> None:
    real = n_params(case.build())
    count = case.cls.count_params(D_IN, case.d_out, **case.kwargs())
    expect(real > 0, "the block has no parameters")
    expect(count == real, f"count_params gives {count}, the block has {real} trainable parameters")


def gradients(case: Case) -> None:
    block = case.build()
    weights = torch.randn(BATCH, T, case.d_out, generator=torch.Generator().manual_seed(5))
    (block(inputs()) * weights).sum().backward()
    for pname, p in block.named_parameters():
        if not p.requires_grad:  # built frozen: trained by no path
            continue
        expect(p.grad is not None, f"no gradient reaches {pname}")
        expect(torch.isfinite(p.grad).all(), f"the gradient of {pname} is not finite")
        expect(p.grad.abs().sum() > 0, f"the gradient of {pname} is zero")


def forward_mode(case: Case) -> None:
    """The Jacobian with respect to the parameters agrees in forward and reverse mode, so
    torch.func.jvp and jacfwd work on the block (a custom autograd Function needs a `jvp`)."""
    from torch.func import functional_call, jacfwd, jacrev

    block = case.build().double()
    weights = {k: p.detach() for k, p in block.named_parameters() if p.requires_grad}
    x = inputs(dtype=torch.float64)[:2]  # (2, T, D_in)

    def out(w):
        return functional_call(block, w, (x,))  # (2, T, D_out)

    fwd, rev = jacfwd(out)(weights), jacrev(out)(weights)  # a missing jvp raises, and fails
    for k in weights:
        err = rel_err(fwd[k], rev[k]) if rev[k].norm() > 0 else fwd[k].norm().item()
        expect(err < 1e-10, f"forward and reverse Jacobians of {k} differ: error {err:.2g}")


def homogeneity(case: Case) -> None:
    block = case.build().double()
    k = block.homogeneous_degree
    if k is None:
        raise NotApplicable("states no homogeneous degree")
    exact = float(k).is_integer()
    # spow is homogeneous only for |z| >> eps: inputs of scale 10 put typical |V x| near 10
    x = inputs(scale=10.0, dtype=torch.float64)
    with torch.no_grad():
        fx = block(x)
        for c in (2.0, 0.5):
            fcx = block(c * x)
            err = rel_err(fcx, c**k * fx)
            expect(err < (1e-10 if exact else 1e-3), f"f({c} x) != {c}^{k} f(x): error {err:.2g}")
            estimate = math.log(fcx.norm().item() / fx.norm().item()) / math.log(c)
            off = abs(estimate - k)
            expect(off <= (1e-8 if exact else 2e-3), f"degree {estimate:.6g} at c={c}, states {k}")


def seeds(case: Case) -> None:
    x = inputs()
    with torch.no_grad():
        a, b, c = case.build(0)(x), case.build(0)(x), case.build(1)(x)
    expect(torch.equal(a, b), "the same seed builds a different block")
    expect(not torch.allclose(a, c), "another seed builds the same block")


def changed_at(block, x: torch.Tensor, src: int, dst: int) -> float:
    """Relative change of the output at position dst when only the input at position src moves."""
    x2 = x.clone()
    x2[:, src] += torch.randn(x.shape[0], x.shape[-1], generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        y, y2 = block(x)[:, dst], block(x2)[:, dst]  # (B, D_out)
    return ((y2 - y).norm() / y.norm()).item()


def mixing(case: Case) -> None:
    block = case.build().double()
    change = changed_at(block, inputs(dtype=torch.float64), src=0, dst=T - 1)
    if block.mixes_tokens:
        expect(change > 1e-6, "states mixes_tokens, but the last position ignores the first")
    else:
        expect(change < 1e-12, f"per-token (mixes_tokens False), yet positions mix ({change:.2g})")


def causal(case: Case) -> None:
    if not case.example.get("causal"):
        raise NotApplicable("not causal")
    change = changed_at(case.build().double(), inputs(dtype=torch.float64), src=T - 1, dst=0)
    expect(change < 1e-12, f"causal, yet the first position reads the last ({change:.2g})")


def degree(case: Case) -> None:
    block = case.build()
    d, k = block.degree, block.homogeneous_degree
    number = isinstance(d, (int, float)) and not isinstance(d, bool)
    expect(d is None or (number and d >= 1), f"degree must be None or a number >= 1, got {d!r}")
    if d is not None and k is not None:  # a homogeneous polynomial of degree d
        expect(math.isclose(k, d, rel_tol=1e-6), f"homogeneous degree {k} != degree {d}")


def name(case: Case) -> None:
    got = getattr(case.cls, "name", None)
    expect(got == case.name, f"registered as {case.name!r} but names itself {got!r}")


# how far one added layer may move the network's output, relative to its size, when continuing
# from a fitted network: float64 rounding where the silence is exact (products rescaled by a
# ratio of depths), and where a block silences only approximately (`Block.silence_` False:
# relu's weights shrunk to `mlp.SILENT`, 1e-6) 100 times that scale, room for the gains of the
# layers above
LADDER_EXACT, LADDER_SILENT = 1e-10, 1e-4


class LadderRefused(UserError):
    """A network that a depth ladder cannot continue; `declared` when its block says so itself
    (it defines its own `scale_output_` or `silence_`, which refuse), not by default."""

    def __init__(self, message: str, declared: bool = False):
        super().__init__(message)
        self.declared = declared


def check_ladder(make: Callable[[int, int], nn.Module], x: torch.Tensor, label: str) -> bool:
    """Whether networks from `make(depth, seed)` continue as a depth ladder continues them
    (`models.continue_from`): depth 2 from depth 1, its function unchanged on the inputs `x` (to
    `LADDER_EXACT`, or `LADDER_SILENT` where the block silences only approximately) and its
    added layer still given a gradient, so a fit can move it. Returns whether exactly; raises
    `LadderRefused` naming `label` and what to do. The degree sweep asks it of every arm before
    any fit, and `blocklab check` of every per-token block: the two cannot disagree."""
    old, new = make(1, 0).double(), make(2, 1).double()
    x = x.double() if x.is_floating_point() else x
    blocks = [layer.block for layer in new.layers]
    own = any(
        getattr(type(b), method) is not getattr(Block, method)
        for b in blocks
        for method in ("scale_output_", "silence_")
        if isinstance(b, Block)
    )

    def refuse(reason: str, declared: bool = False) -> LadderRefused:
        return LadderRefused(
            f"{label} cannot continue the degree sweep's depth ladder: {reason}; or run the "
            "sweep with --ladder off (a fresh fit at every budget)",
            declared,
        )

    try:
        exact = models.continue_from(new, old)
    except UserError as exc:
        names = {b.registered_name for b in blocks if isinstance(b, Block)}
        said = str(exc)
        for name in names:  # the label names the block already
            said = said.replace(f"block {name} cannot", "it cannot", 1)
        raise refuse(said, declared=own) from None
    with torch.no_grad():
        before, after = old(x), new(x)  # (B, n_out) or (B, T, n_out)
    change = float((after - before).norm() / before.norm().clamp_min(1e-300))
    tol = LADDER_EXACT if exact else LADDER_SILENT
    if not change <= tol:  # NaN fails too
        said = "exactly (silence_ returned True)" if exact else "approximately"
        raise refuse(
            f"one added layer, silenced {said}, moved the network's output by {change:.2g} of "
            f"its size (at most {tol:g}): scale_output_ and silence_ must keep the function"
        )
    weights = torch.randn(after.shape, generator=torch.Generator().manual_seed(0))
    added = [p for p in new.layers[-1].parameters() if p.requires_grad]
    grads = torch.autograd.grad((new(x) * weights.to(after)).sum(), added, allow_unused=True)
    if not any(g is not None and bool(g.abs().sum() > 0) for g in grads):
        raise refuse(
            "a layer it silences gets no gradient, so a fit never moves it: silence_ must zero "
            "one factor's weights, not every path (or shrink them, as mlp does with relu)"
        )
    return exact


# the default degree sweep's network (`experiments.degree_sweep.SHAPE`, a test holds them equal):
# width 3, RMS norm, residual branches scaled by 1/sqrt(depth)
LADDER_SHAPE = NetShape(depth=1, width=3, norm="rms", scaled_residual=True)
LADDER_INPUTS = 2  # the default teacher's inputs


def ladder(case: Case) -> None:
    """The default degree sweep's depth ladder continues a network of the block one layer deeper
    with its function unchanged and the added layer trainable (`check_ladder`, which the sweep
    asks of every arm before any fit). A block whose own `scale_output_` refuses (mlp's tanh)
    states it cannot: the sweep refuses it too, naming --ladder off."""
    if case.cls.mixes_tokens or case.cls.needs_seq_len:
        raise NotApplicable(
            "mixes tokens: the default sweep's task has no sequence (over a sequence task the "
            "sweep checks its ladder before any fit)"
        )
    width = LADDER_SHAPE.width
    if n_params(build(case.name, case.example, 0, width, width)) != case.cls.count_params(
        width, width, **case.kwargs()
    ):
        raise NotApplicable("no network of it builds: its count_params is wrong (see params)")
    arm = Arm(str(case), case.name, (), dict(case.example))

    def make(depth: int, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return models.Net(arm, replace(LADDER_SHAPE, depth=depth), LADDER_INPUTS, 1)

    x = torch.randn(64, LADDER_INPUTS, generator=torch.Generator().manual_seed(3))  # (B, F)
    try:
        check_ladder(make, x, f"block {case}")
    except LadderRefused as exc:
        if exc.declared:
            raise NotApplicable(str(exc)) from None
        raise AssertionError(str(exc)) from None


CHECKS = {
    "shape": shape,
    "params": params,
    "gradients": gradients,
    "forward_mode": forward_mode,
    "homogeneity": homogeneity,
    "seeds": seeds,
    "mixing": mixing,
    "causal": causal,
    "degree": degree,
    "name": name,
    "ladder": ladder,
}

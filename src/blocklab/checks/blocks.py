"""The block contract: shape and finiteness, the exact parameter count, a gradient to every
parameter, the same Jacobian in forward and reverse mode, the stated degree and homogeneity,
determinism by seed, token mixing as stated, no look-ahead where causal, and the registered name.
Run on each block with each of its `examples`, at d_in != d_out (a transposed or square-only
weight shows) unless the block is `same_width`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from blocklab.blocks import BLOCKS
from blocklab.checks import NotApplicable, expect, label

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
}

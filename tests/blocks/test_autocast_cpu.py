"""Every block under bf16 autocast on the CPU: the GPU's training precision, caught in CI without
a GPU. One training step (forward under autocast, backward after it, as `train` runs it) of each
registered block alone, as a stacked ensemble where it stacks, and under vmap; and the fixes
the GPU needed, reproduced here first."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from test_ensemble import _block_arms, mixes_tokens

from blocklab.blocks import BLOCKS
from blocklab.fitting.ensemble import Ensemble
from blocklab.fitting.stacked import _StackedMatmul
from blocklab.models import Net
from blocklab.specs import NetShape


def _nets(arm, n: int = 2):
    seq = 6 if mixes_tokens(arm) or BLOCKS.get(arm.block).needs_seq_len else None
    nets = []
    for seed in range(n):
        torch.manual_seed(seed)
        # no norm before the blocks: each block receives autocast's bf16 activations as they are
        nets.append(
            Net(arm, NetShape(2, 8, norm="none"), 4, 3, seq_len=seq, pooled=seq is not None)
        )
    shape = (n, 5, seq, 4) if seq else (n, 5, 4)
    return nets, torch.randn(*shape, generator=torch.Generator().manual_seed(0))  # (E, B, ...)


def _step(module, x) -> None:
    """A training step's gradient: the forward under bf16 autocast, the backward outside it."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(x)
    out.float().square().mean().backward()
    # an ensemble trains its stacked `params`; a lone network its own parameters
    params = list(module.params.values() if isinstance(module, Ensemble) else module.parameters())
    trained = [p for p in params if p.requires_grad]
    assert trained and all(p.grad is not None for p in trained)
    assert all(torch.isfinite(p.grad).all() and p.grad.dtype == p.dtype for p in trained)


@pytest.mark.parametrize("arm", _block_arms(), ids=lambda a: a.label)
def test_every_block_trains_a_step_under_bf16_autocast(arm):
    nets, x = _nets(arm)
    _step(nets[0], x[0])
    paths = ["vmap"] + (["stacked"] if Ensemble(_nets(arm)[0]).path == "stacked" else [])
    for path in paths:
        _step(Ensemble(_nets(arm)[0], path=path), x)


def test_the_stacked_matmul_backward_runs_after_autocast_exits():
    # the GPU's failure, reproduced on the CPU: "expected scalar type BFloat16 but found Float"
    x = torch.randn(2, 8, 4, requires_grad=True)
    w, b = torch.randn(2, 3, 4, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = _StackedMatmul.apply(x, w, b)  # (E, N, out)
    assert y.dtype == torch.bfloat16  # as nn.Linear under autocast
    y.float().sum().backward()
    assert (x.grad.dtype, w.grad.dtype, b.grad.dtype) == (torch.float32,) * 3
    # and without autocast it is the plain float32 product, gradients included
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    ref = torch.baddbmm(b2.unsqueeze(1), x2, w2.mT)
    torch.testing.assert_close(_StackedMatmul.apply(x2, w2, b2), ref)


SRC = Path(__file__).resolve().parents[2] / "src" / "blocklab"


def test_no_numpy_call_on_a_tensor_that_may_live_on_a_device():
    """`.numpy()` on a CUDA tensor raises; every call in the package reads a host tensor: the
    receiver ends in `.cpu()` (or `.detach().cpu()`), or the line says why it is on the host
    (a `# host:` comment), or the receiver is a NumPy or SciPy object."""
    offenders = []
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "numpy" or node.args:
                continue
            receiver = ast.unparse(node.func.value)
            line = lines[node.lineno - 1]
            if receiver.endswith(".cpu()") or "# host:" in line:
                continue
            offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: {receiver}.numpy()")
    assert not offenders, "\n".join(offenders)

"""AdamW over an ensemble's stacked parameters [E, ...], each member at its own learning rate, in
a number of operators that does not grow with the members (`blocklab.fitting.ensemble`).

The parameters, their gradients and the two moments lie end to end in flat buffers (`packed`),
so zeroing the gradients is one operator on a buffer. The update itself is torch's fused AdamW
kernel on each member's views of the buffers, the computation the kernel makes for that member
alone; a kernel takes one learning rate, so it is one call for all the members at one rate: one
for a sweep over seeds, one per rate for a grid of rates.

A member that a step must not move (`live` False: it diverged, its gradient may be NaN) stays
where it stood, by one of two paths, chosen by the device:
- "skip" (a CPU): the kernel's calls leave its views out. Which members live is read on the host,
  which costs a CPU nothing, and a step touches no number twice; each member's gradients are
  scaled by its clipping factor through (E, 1, ...) views of the factors, one operator.
- "mask" (a GPU): reading `live` back would wait for every step queued before it, so the step
  takes a copy of the parameters and moments first and puts a frozen member's numbers back from
  it, selected on the device; the clipping factors are spread to one a number (`member`), two
  launches, where a foreach over broadcast shapes falls back to a launch a tensor. On a CPU the
  copy, the selection and the spread are three more passes over every buffer, each as long as
  the kernel's own: the cost that made the ensemble slower there than training its members one
  by one (docs/results/scale.md).
Both give the same numbers, bit for bit (tests/fitting/test_stacked_adamw.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

# each tensor in a buffer starts on a 64-byte boundary, as a tensor allocated alone does, so the
# kernels that read it meet the alignment they met before it moved there
ALIGN_BYTES = 64


def _offsets(tensors: list[Tensor]) -> tuple[list[int], int]:
    """Where each tensor starts in a buffer holding them end to end, aligned, and its length."""
    unit = max(1, ALIGN_BYTES // tensors[0].element_size())
    offsets, at = [], 0
    for t in tensors:
        offsets.append(at)
        at += -(-t.numel() // unit) * unit
    return offsets, at


def _in_place(tensors: list[Tensor], offsets: list[int], total: int) -> bool:
    """Whether the tensors already lie in one storage as `packed` would lay them out."""
    first = tensors[0]
    storage = first.untyped_storage()
    if first.storage_offset() + total > storage.nbytes() // first.element_size():
        return False
    return all(
        t.is_contiguous()
        and t.dtype == first.dtype
        and t.untyped_storage().data_ptr() == storage.data_ptr()
        and t.storage_offset() == first.storage_offset() + at
        for t, at in zip(tensors, offsets, strict=True)
    )


def packed(tensors: list[Tensor]) -> Tensor:
    """One flat buffer holding `tensors` end to end, each a view of it: the buffer they already lie
    in that way, else a new one they move to. A tensor that moves is rebound to its view
    (`.data`), so it stays the same object (a module's parameter stays registered) and keeps its
    values; views of it taken before it moved would not follow, so pack before taking them."""
    offsets, total = _offsets(tensors)
    if _in_place(tensors, offsets, total):
        return tensors[0].detach().as_strided((total,), (1,))
    first = tensors[0]
    flat = torch.zeros(total, dtype=first.dtype, device=first.device)
    with torch.no_grad():
        for t, view in zip(tensors, views(flat, tensors), strict=True):
            view.copy_(t)
            t.data = view
    return flat


def views(flat: Tensor, like: list[Tensor]) -> list[Tensor]:
    """Views of a buffer laid out as `packed` lays out `like`, one of each tensor's shape."""
    offsets, _ = _offsets(like)
    return [flat[at : at + t.numel()].view(t.shape) for t, at in zip(like, offsets, strict=True)]


PATHS = ("skip", "mask")  # how a step keeps a frozen member still (see above)


def default_path(device: torch.device) -> str:
    """The path a step on `device` takes: "skip" on a CPU, "mask" where reading back waits."""
    return "skip" if device.type == "cpu" else "mask"


class StackedAdamW:
    """AdamW over stacked parameters [E, ...], each member at its own learning rate: torch's fused
    AdamW kernel on every member's views, one call per learning rate. Each member's clipping factor
    (its gradient norm over all its parameters), the rates (`lr`) and which members move (`live`)
    live on the device; on the "mask" path a step reads nothing back to the host. Gradients stay
    in place between steps (`zero_grad`), so the views stay valid."""

    def __init__(
        self,
        params: list[Tensor],
        lrs: list[float],
        weight_decay: float,
        eps=1e-8,
        path: str | None = None,
    ):
        self.params, self.weight_decay, self.eps = params, weight_decay, eps
        self.betas = (0.9, 0.999)  # torch's defaults, as `train.train`'s AdamW
        size, device = params[0].shape[0], params[0].device
        self.path = default_path(device) if path is None else path
        if self.path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {path!r}")
        self.flat = packed(params)  # (N,) every member's parameters
        self.flat_grad = torch.zeros_like(self.flat)  # (N,)
        self.moments = torch.zeros(2, *self.flat.shape, dtype=self.flat.dtype, device=device)
        self.grads = views(self.flat_grad, params)  # the tensors the member views below read
        for p, g in zip(params, self.grads, strict=True):
            p.grad = g
        self.exp_avg, self.exp_avg_sq = (views(m, params) for m in self.moments)
        # the kernels read float32 scalars where the parameters live, whatever their dtype
        like = {"dtype": torch.float32, "device": device}
        # the rate: a CPU kernel reads it as a double, a GPU kernel as a float32 on the GPU
        rate = {**like, "dtype": torch.float64 if device.type == "cpu" else torch.float32}
        self.lrs = lrs
        self.rates = list(dict.fromkeys(lrs))  # the distinct rates, in order of the members
        self.base = torch.tensor(self.rates, **rate)  # (R,)
        self.lr = torch.zeros(len(self.rates), **rate)  # (R,) this step's rates
        # (E,) each member's clipping factor, its gradients multiplied by it in their own dtype;
        # on the "skip" path through a view of it shaped (E, 1, ...) for each gradient
        self.coef = torch.ones(size, dtype=params[0].dtype, device=device)
        self.coefs = [self.coef.view(-1, *[1] * (g.dim() - 1)) for g in self.grads]
        self.count = torch.zeros((), **like)  # the step the kernels read, not advance
        self.t = 0  # members step together until they stop, so one count serves all
        self.everyone = (True,) * size
        self.calls = {self.everyone: self._calls(self.everyone)}  # the kernels' calls, by who moves
        if self.path == "mask":
            self._masking(size, device)

    def _calls(self, moving: tuple[bool, ...]) -> list[tuple]:
        """Per rate: the views of its moving members' tensors, for one kernel call."""
        calls = []
        for r, lr in enumerate(self.rates):
            members = [e for e, m in enumerate(self.lrs) if m == lr and moving[e]]
            if not members:
                continue
            groups = [self.params, self.grads, self.exp_avg, self.exp_avg_sq]
            lists = [[t.detach()[e] for e in members for t in group] for group in groups]
            calls.append((*lists, [self.count] * len(lists[0]), self.lr[r]))
        return calls

    def _masking(self, size: int, device: torch.device) -> None:
        """The "mask" path's buffers: the copy a step takes, and each number's member."""
        # (3, N) the parameters and moments as a step found them
        self.saved = torch.empty(3, *self.flat.shape, dtype=self.flat.dtype, device=device)
        self.saved_params, self.saved_moments = self.saved[0], self.saved[1:]
        # (N,) the member each number of a buffer belongs to (the padding: member 0's)
        self.member = torch.zeros(self.flat.shape, dtype=torch.int32, device=device)
        ids = torch.arange(size, dtype=torch.int32, device=device)  # (E,)
        for view in views(self.member, self.params):
            view.copy_(ids.view(-1, *[1] * (view.dim() - 1)))

    def snapshot(self) -> list[Tensor | int]:
        """Copies of the parameters and the optimizer's state, for `restore`."""
        return [self.flat.clone(), self.moments.clone(), self.t]

    @torch.no_grad()
    def restore(self, snap: list[Tensor | int]) -> None:
        """Parameters and state back in place as `snapshot` took them: views of them stay valid."""
        self.flat.copy_(snap[0])
        self.moments.copy_(snap[1])
        self.t = snap[2]

    def zero_grad(self) -> None:
        self.flat_grad.zero_()

    @torch.no_grad()
    def grad_norms(self) -> Tensor:
        grads = [g.reshape(g.shape[0], -1) for g in self.grads]  # (E, n_i)
        per_param = torch.stack([torch.linalg.vector_norm(g, dim=1) for g in grads])  # (k, E)
        return torch.linalg.vector_norm(per_param, dim=0)  # (E,)

    @torch.no_grad()
    def step(self, factor: float, live: Tensor, norms: Tensor, clip: float) -> None:
        """One AdamW step at each member's rate times `factor` (the schedule's), for the members
        `live` (E,) marks; `norms` (E,) are the gradient norms before clipping."""
        if any(p.grad is not g for p, g in zip(self.params, self.grads, strict=True)):
            raise RuntimeError("a gradient was replaced, not accumulated: use zero_grad()")
        self.t += 1
        self.count.fill_(self.t)
        torch.mul(self.base, factor, out=self.lr)
        # nn.utils.clip_grad_norm_'s factor
        torch.clamp(clip / (norms.to(self.coef.dtype) + 1e-6), max=1.0, out=self.coef)
        if self.path == "skip":
            torch._foreach_mul_(self.grads, self.coefs)
            moving = tuple(live.tolist())
            if moving not in self.calls:  # a member froze: from now on its views are left out
                self.calls[moving] = self._calls(moving)
            self._update(self.calls[moving])
            return
        self.flat_grad.mul_(self.coef.index_select(0, self.member))
        self.saved_params.copy_(self.flat)
        self.saved_moments.copy_(self.moments)
        self._update(self.calls[self.everyone])
        keep = live.index_select(0, self.member)  # (N,) the numbers this step may move
        torch.where(keep, self.flat, self.saved_params, out=self.flat)
        torch.where(keep, self.moments, self.saved_moments, out=self.moments)

    def _update(self, calls: list[tuple]) -> None:
        for ps, grads, exp_avg, exp_avg_sq, counts, lr in calls:
            torch._fused_adamw_(
                ps,
                grads,
                exp_avg,
                exp_avg_sq,
                [],
                counts,
                lr=lr,
                beta1=self.betas[0],
                beta2=self.betas[1],
                weight_decay=self.weight_decay,
                eps=self.eps,
                amsgrad=False,
                maximize=False,
            )

"""Full-batch second-order fitting in float64, for regression: what a network of a few hundred to a
few thousand parameters can reach, rather than how far Adam gets in a fixed number of steps.

- `LevenbergMarquardt`: damped Gauss-Newton on the residuals r = f(x) - y, with the Jacobian's
  rows as per-example gradients (torch.func.jacrev under vmap: a network's examples are
  independent, no batch statistics) and Nielsen's damping update (Nielsen 1999; Madsen, Nielsen,
  Tingleff 2004, "Methods for non-linear least squares problems", algorithm 3.16). Each iteration
  costs a Jacobian and a P x P solve, O(N P^2).
- `LBFGS`: torch's L-BFGS with a strong-Wolfe line search and its own stopping tolerances off,
  so it runs the iterations it is given.
- `BatchedLevenbergMarquardt`: the restarts of one network as one computation, each member taking
  the steps `LevenbergMarquardt` takes on it alone; `converged_batched` certifies each member.

Each fits a model in place; `run(iterations, on_step)` calls `on_step(iteration, loss)` with the
mean squared error before each iteration's update and stops when it returns False (a
`monitor.TrialMonitor` reads the curve and the divergence rule there), and a second `run` continues
the same fit. `converged` continues a fit as far again and says whether that still lowered the
loss by more than a tolerance: a certificate, not a reading of the curve.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

OnStep = Callable[[int, float], bool]
# numbers of the Jacobian computed per vmapped pass (examples times parameters): bounds the memory
# of a pass's activations while keeping passes few, since each pass's cost is mostly its fixed
# per-operation overhead (measured at P = 409, N = 13,088: 143 ms in passes of 1,024 examples,
# 62 ms in one pass)
JACOBIAN_NUMBERS = 1 << 24


class _Flat:
    """The trainable parameters of a model as one float64 vector, and the residuals as a
    function of it, for the Jacobian."""

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor):
        self.model, self.x, self.y = model, x, y
        self.named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
        self.sizes = [p.numel() for _, p in self.named]

    def get(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for _, p in self.named])  # (P,)

    def set(self, theta: torch.Tensor) -> None:
        with torch.no_grad():
            for (_, p), part in zip(self.named, theta.split(self.sizes), strict=True):
                p.copy_(part.view_as(p))

    def _weights(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = theta.split(self.sizes)
        return {k: part.view_as(p) for (k, p), part in zip(self.named, parts, strict=True)}

    def residuals(self, theta: torch.Tensor) -> torch.Tensor:
        out = functional_call(self.model, self._weights(theta), (self.x,))  # (N, out)
        return (out - self.y).reshape(-1)  # (N * out,)

    def _example(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = functional_call(self.model, self._weights(theta), (x[None],))  # (1, out)
        return (out - y[None]).reshape(-1)  # (out,)

    def jacobian(self, theta: torch.Tensor) -> torch.Tensor:
        # the rows example by example, by reverse mode under vmap: measured on a
        # 351-parameter network at N = 8192, 0.05 s against 4.8 s for forward mode over the
        # whole batch, whose P tangents each carry every example's activations
        chunk = max(1, JACOBIAN_NUMBERS // theta.numel())
        rows = vmap(jacrev(self._example), in_dims=(None, 0, 0), chunk_size=chunk)
        return rows(theta, self.x, self.y).reshape(-1, theta.numel())  # (N * out, P)


class LevenbergMarquardt:
    """Damped Gauss-Newton on `model`'s residuals against (x, y), in place. `run` may be called
    again to continue the same fit: the damping carries over."""

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, tau: float = 1e-3):
        self.flat, self.n = _Flat(model, x, y), y.numel()
        self.theta = self.flat.get()  # (P,)
        self.eye = torch.eye(len(self.theta), dtype=self.theta.dtype, device=self.theta.device)
        with torch.no_grad():
            r = self.flat.residuals(self.theta)  # (n,)
        self.cost = float(r @ r)  # |r|^2 = 2 F(theta)
        self._linearize(r)
        self.mu, self.nu = tau * float(self.a.diagonal().max().clamp_min(1e-300)), 2.0

    def _linearize(self, r: torch.Tensor) -> None:
        jac = self.flat.jacobian(self.theta)  # (n, P)
        self.a, self.g = jac.T @ jac, jac.T @ r  # (P, P), (P,)

    def sync(self) -> None:
        """Put the fit's current parameters into the model (it holds them apart while fitting)."""
        self.flat.set(self.theta)

    def run(self, iterations: int, on_step: OnStep = lambda i, loss: True) -> float:
        """`iterations` steps (a rejected step counts as one); the final mean squared error."""
        for i in range(iterations):
            if not on_step(i, self.cost / self.n):
                break
            chol, info = torch.linalg.cholesky_ex(self.a + self.mu * self.eye)
            if info.item() != 0:  # not positive definite at this damping: damp harder
                self.mu, self.nu = self.mu * self.nu, self.nu * 2
                continue
            delta = -torch.cholesky_solve(self.g.unsqueeze(1), chol).squeeze(1)  # (P,)
            with torch.no_grad():
                r = self.flat.residuals(self.theta + delta)
            cost = float(r @ r)
            predicted = float(delta @ (self.mu * delta - self.g))  # the linear model's decrease
            rho = (self.cost - cost) / predicted if predicted > 0 else -1.0
            if math.isfinite(cost) and rho > 0:
                self.theta, self.cost = self.theta + delta, cost
                self._linearize(r)
                self.mu, self.nu = self.mu * max(1 / 3, 1 - (2 * rho - 1) ** 3), 2.0
            else:
                self.mu, self.nu = self.mu * self.nu, self.nu * 2
        self.flat.set(self.theta)
        return self.cost / self.n


class LBFGS:
    """L-BFGS with a strong-Wolfe line search on `model`'s mean squared error against (x, y), in
    place. `run` may be called again to continue the same fit: the curvature history carries
    over."""

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, history: int = 100):
        self.model, self.x, self.y = model, x, y
        self.opt = torch.optim.LBFGS(
            [p for p in model.parameters() if p.requires_grad],
            lr=1.0,
            max_iter=1,  # one iteration per call, so each is seen; the history persists
            # evaluations per call: torch's default (max_iter * 5 / 4) would leave the line
            # search of a one-iteration call none, and the fit would stop where it started
            max_eval=25,
            history_size=history,
            tolerance_grad=0.0,
            tolerance_change=0.0,
            line_search_fn="strong_wolfe",
        )

    def sync(self) -> None:
        """The model is the fit's state already."""

    def loss(self) -> float:
        with torch.no_grad():
            return nn.functional.mse_loss(self.model(self.x), self.y).item()

    def run(self, iterations: int, on_step: OnStep = lambda i, loss: True) -> float:
        """`iterations` iterations; the final mean squared error."""
        for i in range(iterations):
            first = True

            def closure(i: int = i) -> torch.Tensor:
                # an iteration's first evaluation is at its starting point, before the update:
                # that loss goes to `on_step`, which may stop the fit there
                nonlocal first
                self.opt.zero_grad(set_to_none=True)
                value = nn.functional.mse_loss(self.model(self.x), self.y)
                if first and not on_step(i, value.item()):
                    raise _Stop
                first = False
                value.backward()
                return value

            try:
                self.opt.step(closure)
            except _Stop:
                break
        return self.loss()


class _Stop(Exception):
    """`on_step` ended an L-BFGS fit before its iteration's update."""


FITTERS = {"lm": LevenbergMarquardt, "lbfgs": LBFGS}


@dataclass(frozen=True)
class Certificate:
    passed: bool  # the second stretch lowered the loss by less than the tolerance
    gain: float  # (first - second) / second: what the second stretch gained, a share
    first: float  # the loss after the first stretch
    second: float  # the loss after both


def converged(
    fitter: LevenbergMarquardt | LBFGS,
    iterations: int,
    more: int | None = None,
    tol: float = 0.03,
    on_step: OnStep = lambda i, loss: True,
) -> Certificate:
    """Run `fitter` for `iterations`, then continue the same fit for `more` (as many again by
    default): converged when that lowered the loss by less than `tol` of the final loss. A fit
    stopped by `on_step` (its iterations numbered across both stretches) or gone non-finite is
    not converged; the model ends where the fit ended."""
    more = iterations if more is None else more
    stopped = False

    def first_on_step(i: int, loss: float) -> bool:
        nonlocal stopped
        stopped = stopped or not on_step(i, loss)
        return not stopped

    def second_on_step(i: int, loss: float) -> bool:
        return first_on_step(iterations + i, loss)

    first = fitter.run(iterations, first_on_step)
    second = first if stopped else fitter.run(more, second_on_step)
    gain = (first - second) / second if second > 0 else 0.0
    ok = not stopped and math.isfinite(second) and gain < tol
    return Certificate(bool(ok), gain, first, second)


BatchedOnStep = Callable[[int, list[float]], "Sequence[bool] | None"]


class BatchedLevenbergMarquardt:
    """`LevenbergMarquardt` on R models of one architecture (a fit's restarts) as one computation:
    their parameters stacked (R, P), residuals and Jacobians through the first model's
    functional_call under vmap over the members, normal matrices (R, P, P) factored by one batched
    Cholesky. Each member keeps its own damping and its own accept/reject, so it takes exactly the
    steps `LevenbergMarquardt` takes on it alone (to float rounding; tests/test_fit.py).

    `run(iterations, on_step)` calls `on_step(i, losses)` with the R members' mean squared errors
    before each iteration's update; it returns None (all go on) or R booleans, False for a member
    to stop there. A stopped member is frozen for the rest of this fitter's life: its entry repeats
    its last loss and its later answers are ignored. `active` says which members go on.

    Measured on one CPU thread (`blocklab bench`, K = 4 restarts of degree-3 width-4 networks,
    64 iterations, N = 32 P) it does not pay against one fit at a time: 1.03x at P = 121, 0.80x
    at P = 313. With Jacobians in single passes (`JACOBIAN_NUMBERS`) a lone fit is no longer
    bound by per-operation overhead, the one thing batching saves; its per-example Jacobian and
    J^T J are memory and matmul work that batching does not shrink. So `engine.converge` fits
    restarts one at a time."""

    def __init__(
        self, models: list[nn.Module], x: torch.Tensor, y: torch.Tensor, tau: float = 1e-3
    ):
        self.flats = [_Flat(m, x, y) for m in models]
        # the first model's module computes for every member: functional_call reads only its
        # structure, the weights come from the stacked parameters
        self.flat, self.n = self.flats[0], y.numel()
        shapes = [[(k, p.shape) for k, p in f.named] for f in self.flats]
        if any(s != shapes[0] for s in shapes):
            raise ValueError("batched Levenberg-Marquardt fits models of one architecture")
        self.theta = torch.stack([f.get() for f in self.flats])  # (R, P)
        members, p = self.theta.shape
        kw = {"dtype": self.theta.dtype, "device": self.theta.device}
        self.eye = torch.eye(p, **kw)  # (P, P)
        self.active = torch.ones(members, dtype=torch.bool, device=self.theta.device)  # (R,)
        with torch.no_grad():
            r = self._residuals(self.theta)  # (R, n)
        self.cost = (r * r).sum(1)  # (R,) |r|^2 = 2 F(theta) per member
        self.a = torch.empty(members, p, p, **kw)  # (R, P, P) J^T J
        self.g = torch.empty(members, p, **kw)  # (R, P) J^T r
        self._linearize(torch.arange(members, device=self.theta.device), r)
        diag_max = self.a.diagonal(dim1=1, dim2=2).amax(1).clamp_min(1e-300)  # (R,)
        self.mu, self.nu = tau * diag_max, torch.full((members,), 2.0, **kw)  # (R,), (R,)

    def _residuals(self, theta: torch.Tensor) -> torch.Tensor:
        return vmap(self.flat.residuals)(theta)  # (R, n)

    def _jacobian(self, theta: torch.Tensor) -> torch.Tensor:
        # the per-example rows of `_Flat.jacobian` (reverse mode under vmap, in chunks), under a
        # second vmap over the members: each layer's small matmul becomes one batched matmul
        chunk = max(1, JACOBIAN_NUMBERS // theta.numel())  # numbers over all k members
        rows = vmap(jacrev(self.flat._example), in_dims=(None, 0, 0), chunk_size=chunk)
        per_member = vmap(rows, in_dims=(0, None, None))
        jac = per_member(theta, self.flat.x, self.flat.y)  # (k, N, out, P)
        return jac.reshape(len(theta), -1, theta.shape[1])  # (k, n, P)

    def _linearize(self, members: torch.Tensor, r: torch.Tensor) -> None:
        """J^T J and J^T r of the `members` (indices) at their current parameters, whose
        residuals `r` (R, n) holds."""
        jac = self._jacobian(self.theta[members])  # (k, n, P)
        jt = jac.transpose(1, 2)  # (k, P, n)
        self.a[members] = jt @ jac  # (k, P, P)
        self.g[members] = (jt @ r[members].unsqueeze(2)).squeeze(2)  # (k, P)

    def losses(self) -> torch.Tensor:
        return self.cost / self.n  # (R,)

    def sync(self) -> None:
        """Put each member's current parameters into its model."""
        for flat, theta in zip(self.flats, self.theta, strict=True):
            flat.set(theta)

    def run(self, iterations: int, on_step: BatchedOnStep = lambda i, losses: None) -> torch.Tensor:
        """`iterations` steps (a rejected step counts as one); the R final mean squared errors."""
        for i in range(iterations):
            if not bool(self.active.any()):
                break
            go = on_step(i, self.losses().tolist())
            if go is not None:
                self.active &= torch.as_tensor(go, dtype=torch.bool, device=self.active.device)
            if bool(self.active.any()):
                self._step()
        self.sync()
        return self.losses()

    def _step(self) -> None:
        """One iteration of every active member: `LevenbergMarquardt.run`'s body, its branches
        made masks, so a member's step reads only its own damping, residuals and normal matrix."""
        act = self.active  # (R,)
        damped = self.a + self.mu[:, None, None] * self.eye  # (R, P, P)
        chol, info = torch.linalg.cholesky_ex(damped)  # (R, P, P), (R,)
        solvable = act & (info == 0)  # (R,) not positive definite at its damping: damp harder
        delta = -torch.cholesky_solve(self.g.unsqueeze(2), chol).squeeze(2)  # (R, P)
        delta = torch.where(solvable[:, None], delta, 0.0)  # a failed factor's solve is garbage
        with torch.no_grad():
            r = self._residuals(self.theta + delta)  # (R, n)
        cost = (r * r).sum(1)  # (R,)
        predicted = (delta * (self.mu[:, None] * delta - self.g)).sum(1)  # (R,) linear model's
        rho = torch.where(predicted > 0, (self.cost - cost) / predicted, -1.0)  # (R,)
        accept = solvable & torch.isfinite(cost) & (rho > 0)  # (R,)
        reject = act & ~accept  # (R,) frozen members neither accept nor reject
        self.theta = torch.where(accept[:, None], self.theta + delta, self.theta)  # (R, P)
        self.cost = torch.where(accept, cost, self.cost)  # (R,)
        taken = accept.nonzero().squeeze(1)  # (k,)
        if len(taken):
            self._linearize(taken, r)
        shrink = (1 - (2 * rho - 1) ** 3).clamp_min(1 / 3)  # (R,) Nielsen's update on success
        self.mu = torch.where(
            accept, self.mu * shrink, torch.where(reject, self.mu * self.nu, self.mu)
        )
        self.nu = torch.where(accept, 2.0, torch.where(reject, self.nu * 2, self.nu))


def converged_batched(
    fitter: BatchedLevenbergMarquardt,
    iterations: int,
    more: int | None = None,
    tol: float = 0.03,
    on_step: BatchedOnStep = lambda i, losses: None,
) -> list[Certificate]:
    """`converged` for each member of a batched fit: the first stretch of `iterations`, then
    `more`, on_step's iterations numbered across both; a member stopped by `on_step` in either
    stretch is not converged (frozen, its second loss is its first)."""
    more = iterations if more is None else more

    def second_on_step(i: int, losses: list[float]):
        return on_step(iterations + i, losses)

    first = fitter.run(iterations, on_step).tolist()
    second = fitter.run(more, second_on_step).tolist()
    certificates = []
    for a, b, going in zip(first, second, fitter.active.tolist(), strict=True):
        gain = (a - b) / b if b > 0 else 0.0
        certificates.append(
            Certificate(bool(going and math.isfinite(b) and gain < tol), gain, a, b)
        )
    return certificates

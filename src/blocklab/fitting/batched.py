"""Levenberg-Marquardt on many fits of one architecture as one batched computation, beside the
one-at-a-time fitter of `fitting.fit` that is its plain reference (tests/fitting/test_fit.py
and tests/fitting/test_cohorts.py compare them step by step, certificates included: both are
certified by `certify.certify`). The members share one training set (a fit's restarts, a ladder
rung's chains) or each fits its own of one shape (the ladders of a cohort, `fitting.cohorts`:
other teachers, other seeds).
`blocklab bench` measures the shared case (`bench.fits`), benchmarks/fit_units.py the
other; `fitting.converge` batches a rung's chains and `fitting.cohorts` a rung's units where that
measured a gain (on a GPU, not on a CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import jacrev, vmap

from blocklab.fitting.certify import Certificate, OnCheck, certify
from blocklab.fitting.fit import FLOOR, OnStep, marquardt_scale
from blocklab.jacobian import JACOBIAN_NUMBERS, FlatParams, NotByLayers, gram

BatchedOnStep = Callable[[int, list[float]], "Sequence[bool] | None"]


class BatchedLevenbergMarquardt:
    """`LevenbergMarquardt` on R models of one architecture as one computation: their parameters
    stacked (R, P), residuals and Jacobians through the first model's functional_call under vmap
    over the members, normal matrices (R, P, P) factored by one batched Cholesky. `x`, `y` are
    one training set every member fits (a fit's restarts), or R of them of one shape, one per
    member (fits of other targets), stacked (R, N, ...) and vmapped with the parameters; such
    members, where their Jacobian is by layers, compute residuals and Jacobians as they would
    alone (`_trial`), on a CPU their normal matrices too (`ONE_BY_ONE`). Each
    member keeps its own damping and its own accept/reject, so it takes exactly the steps
    `LevenbergMarquardt` takes on it alone (to float rounding; tests/fitting/test_fit.py,
    tests/fitting/test_cohorts.py).

    `run(iterations, on_step)` calls `on_step(i, losses)` with the R members' mean squared errors
    before each iteration's update; it returns None (all go on) or R booleans, False for a member
    to stop there. A stopped member is frozen for the rest of this fitter's life: its entry repeats
    its last loss and its later answers are ignored. `active` says which members go on.

    Measured on one CPU thread (`blocklab bench`, K = 4 restarts of degree-3 width-4 networks,
    64 iterations, N = 32 P) it does not pay against one fit at a time: 1.03x at P = 121, 0.80x
    at P = 313. With Jacobians in single passes (`JACOBIAN_NUMBERS`) a lone fit is no longer
    bound by per-operation overhead, the one thing batching saves; its per-example Jacobian and
    J^T J are memory and matmul work that batching does not shrink. On an H200 it paid: 674
    certified fits per minute batched against 311 one at a time at P = 433 (8 fits, 32
    iterations). So `fitting.converge` batches a rung's chains, and `fitting.cohorts` a rung's
    units, on a GPU only."""

    # devices on which members of their own sets are linearized one by one, each as a lone fit
    # is, from its Jacobian where the layer rule wrote it (`jacobian.gram`: syrk, one triangle):
    # a batched matmul computes both triangles of a stacked copy, and a CPU runs the batch no
    # faster than its members one at a time (benchmarks/fit_units.py)
    ONE_BY_ONE = ("cpu",)

    def __init__(
        self,
        models: list[nn.Module],
        x: torch.Tensor | Sequence[torch.Tensor],
        y: torch.Tensor | Sequence[torch.Tensor],
        tau: float = 1e-3,
    ):
        shared = isinstance(x, torch.Tensor)
        xs, ys = ([x] * len(models), [y] * len(models)) if shared else (list(x), list(y))
        if len(xs) != len(models) or len(ys) != len(models):
            raise ValueError("batched Levenberg-Marquardt takes one training set per member")
        if len({(tuple(a.shape), tuple(b.shape)) for a, b in zip(xs, ys, strict=True)}) > 1:
            raise ValueError("batched Levenberg-Marquardt fits training sets of one shape")
        # each member's FlatParams holds its own set: its Jacobian by layers reads it
        self.flats = [FlatParams(m, a, b) for m, a, b in zip(models, xs, ys, strict=True)]
        # the first model's module computes for every member: functional_call reads only its
        # structure, the weights come from the stacked parameters
        self.flat, self.n = self.flats[0], ys[0].numel()
        # the members' own sets under vmap, (R, N, ...) and (R, N, out); None: one shared set
        self.x = None if shared else torch.stack(xs)
        self.y = None if shared else torch.stack(ys)
        self.path: str | None = None  # the Jacobian's path once one ran (`_jacobian`)
        shapes = [[(k, p.shape) for k, p in f.named] for f in self.flats]
        if any(s != shapes[0] for s in shapes):
            raise ValueError("batched Levenberg-Marquardt fits models of one architecture")
        self.theta = torch.stack([f.get() for f in self.flats])  # (R, P)
        members, p = self.theta.shape
        kw = {"dtype": self.theta.dtype, "device": self.theta.device}
        self.active = torch.ones(members, dtype=torch.bool, device=self.theta.device)  # (R,)
        # members at float64's floor (`fit.FLOOR`): frozen like stopped ones, but certified
        self.floored = torch.zeros_like(self.active)  # (R,)
        # (R,) each member's iterations run so far
        self.iterations = torch.zeros(members, dtype=torch.long, device=self.theta.device)
        with torch.no_grad():
            r = self._residuals(self.theta)  # (R, n)
        self.cost = (r * r).sum(1)  # (R,) |r|^2 = 2 F(theta) per member
        self.a = torch.empty(members, p, p, **kw)  # (R, P, P) J^T J
        self.g = torch.empty(members, p, **kw)  # (R, P) J^T r
        self.scale = torch.zeros(members, p, **kw)  # (R, P) each member's damping diagonal
        self._linearize(torch.arange(members, device=self.theta.device), r)
        self.mu = torch.full((members,), tau, **kw)  # (R,) relative to `scale`
        self.nu = torch.full((members,), 2.0, **kw)  # (R,)

    def _residuals(self, theta: torch.Tensor) -> torch.Tensor:
        if self.x is None:
            return vmap(self.flat.residuals)(theta)  # (R, n)
        return vmap(self.flat.residuals)(theta, self.x, self.y)  # (R, n)

    def _trial(self, theta: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, list | None]:
        """The residuals (R, n) at the members' trial points `theta`, and the points whose
        forward passes the members keep (None: none kept). Members fitting their own sets by
        layers step as a lone fit steps: each active member's own forward pass
        (`FlatParams.trial`), kept so that an accepted step's Jacobian runs only its backward;
        one vmapped pass would cost each accepted member a second forward, the Jacobian's."""
        if self.x is None or self.path != "layers":
            return self._residuals(theta), None
        points = list(theta.unbind())  # (P,) each: the object a kept pass is keyed by
        rows = [
            f.trial(t) if go else self.y[0].new_zeros(self.n)  # a frozen member's: unread
            for f, t, go in zip(self.flats, points, act.tolist(), strict=True)
        ]
        return torch.stack(rows), points  # (R, n)

    def _jacobian(
        self, members: torch.Tensor, theta: torch.Tensor, points: list | None = None
    ) -> torch.Tensor | list[torch.Tensor]:
        """The members' Jacobians: k of (n, P) by layers, each from its own model's batched pass
        (`FlatParams.jacobian_by_layers`, continuing the pass `_trial` kept at `points`), where
        every member's network allows it; else (k, n, P) by examples under a second vmap over
        the members. `path` names the one that ran."""
        if self.path != "examples":
            try:
                rows = [
                    self.flats[int(k)].jacobian_by_layers(t if points is None else points[int(k)])
                    for k, t in zip(members, theta, strict=True)
                ]
                self.path = "layers"
                for k in members:  # their trial points keep the layer rule's pass (`_trial`)
                    self.flats[int(k)].path = "layers"
                return rows
            except NotByLayers:
                self.path = "examples"
        # the per-example rows of `FlatParams.jacobian` (reverse mode under vmap, in chunks),
        # under a second vmap over the members: each layer's small matmul becomes a batched one
        chunk = max(1, JACOBIAN_NUMBERS // theta.numel())  # numbers over all k members
        rows = vmap(jacrev(self.flat._example), in_dims=(None, 0, 0), chunk_size=chunk)
        if self.x is None:  # one training set for every member
            per_member = vmap(rows, in_dims=(0, None, None))
            jac = per_member(theta, self.flat.x, self.flat.y)  # (k, N, out, P)
        else:  # each member on its own set
            jac = vmap(rows)(theta, self.x[members], self.y[members])  # (k, N, out, P)
        return jac.reshape(len(theta), -1, theta.shape[1])  # (k, n, P)

    def _linearize(
        self, members: torch.Tensor, r: torch.Tensor, points: list | None = None
    ) -> None:
        """J^T J and J^T r of the `members` (indices) at their current parameters, whose
        residuals `r` (R, n) holds (and, where `_trial` kept them, whose `points`)."""
        jac = self._jacobian(members, self.theta[members], points)
        if self.x is not None and self.theta.device.type in self.ONE_BY_ONE:  # as alone
            self.a[members] = torch.stack([gram(j) for j in jac])  # (k, P, P)
            rows = zip(jac, members.tolist(), strict=True)
            self.g[members] = torch.stack([j.T @ r[k] for j, k in rows])  # (k, P)
        else:
            jac = torch.stack(jac) if isinstance(jac, list) else jac  # (k, n, P)
            jt = jac.transpose(1, 2)  # (k, P, n)
            self.a[members] = jt @ jac  # (k, P, P)
            self.g[members] = (jt @ r[members].unsqueeze(2)).squeeze(2)  # (k, P)
        diagonal = self.a[members].diagonal(dim1=1, dim2=2)  # (k, P)
        self.scale[members] = marquardt_scale(self.scale[members], diagonal)

    def losses(self) -> torch.Tensor:
        return self.cost / self.n  # (R,)

    def stationarity(self) -> list[float]:
        """Each member's |J^T r| / (|J|_F |r|) (`LevenbergMarquardt.stationarity`)."""
        scale = (self.a.diagonal(dim1=1, dim2=2).sum(1) * self.cost).sqrt()  # (R,)
        ratio = self.g.norm(dim=1) / scale  # (R,)
        return torch.where(scale > 0, ratio, 0.0).tolist()

    def live(self) -> list[bool]:
        """Which members still step: neither stopped nor at the floor (`certify.certify`)."""
        return self.active.tolist()

    def state(self) -> tuple[list[bool], list[float], list[int]]:
        """Each member's floor flag, stationarity and iterations run (`certify.certify`)."""
        return self.floored.tolist(), self.stationarity(), self.iterations.tolist()

    def member_state(self, member: int) -> dict:
        """Member `member`'s state as `LevenbergMarquardt.state` gives a lone fit's, so a lone
        fit continues it (`LevenbergMarquardt.restore`)."""
        return {
            "cost": float(self.cost[member]),
            "scale": self.scale[member].clone(),
            "mu": float(self.mu[member]),
            "nu": float(self.nu[member]),
            "floored": bool(self.floored[member]),
            "iterations": int(self.iterations[member]),
        }

    def sync(self, member: int | None = None) -> None:
        """Put each member's current parameters into its model, or member `member`'s alone (a
        validation checkpoint of that member reads no other)."""
        if member is not None:
            self.flats[member].set(self.theta[member])
            return
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
        for flat in self.flats:
            flat.forget()  # a rejected step's forward pass: nothing continues it
        return self.losses()

    def _step(self) -> None:
        """One iteration of every active member: `LevenbergMarquardt.run`'s body, its branches
        made masks, so a member's step reads only its own damping, residuals and normal matrix."""
        act = self.active  # (R,)
        self.iterations += act.long()
        damped = self.a + torch.diag_embed(self.mu[:, None] * self.scale)  # (R, P, P)
        chol, info = torch.linalg.cholesky_ex(damped)  # (R, P, P), (R,)
        solvable = act & (info == 0)  # (R,) not positive definite at its damping: damp harder
        delta = -torch.cholesky_solve(self.g.unsqueeze(2), chol).squeeze(2)  # (R, P)
        delta = torch.where(solvable[:, None], delta, 0.0)  # a failed factor's solve is garbage
        with torch.no_grad():
            r, points = self._trial(self.theta + delta, act)  # (R, n)
        cost = (r * r).sum(1)  # (R,)
        damping = self.mu[:, None] * self.scale  # (R, P)
        predicted = (delta * (damping * delta - self.g)).sum(1)  # (R,) the linear model's
        rho = torch.where(predicted > 0, (self.cost - cost) / predicted, -1.0)  # (R,)
        floor = solvable & ~(predicted > FLOOR * self.cost)  # (R,) no step float64 can see
        self.floored |= floor
        self.active &= ~floor
        accept = solvable & ~floor & torch.isfinite(cost) & (rho > 0)  # (R,)
        reject = act & ~floor & ~accept  # (R,) frozen members neither accept nor reject
        self.theta = torch.where(accept[:, None], self.theta + delta, self.theta)  # (R, P)
        self.cost = torch.where(accept, cost, self.cost)  # (R,)
        taken = accept.nonzero().squeeze(1)  # (k,)
        if len(taken):
            self._linearize(taken, r, points)
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
    on_steps: Sequence[OnStep] | None = None,
    until: int | None = None,
    on_checks: Sequence[OnCheck] | None = None,
) -> list[Certificate]:
    """`certify.converged` for each member of a batched fit, by the same code
    (`certify.certify`): `on_steps[k]` is member k's `on_step`, its iterations numbered across
    every stretch; with `until`, members that have not converged double on while the decided
    ones stay frozen. `on_checks[k]`, where given, reads member k at each of its checks."""
    on_steps = on_steps or [lambda i, loss: True] * len(fitter.flats)
    return certify(fitter, iterations, more, tol, on_steps, until, on_checks=on_checks)

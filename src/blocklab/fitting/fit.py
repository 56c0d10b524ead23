"""Full-batch second-order fitting in float64, for regression: what a network of a few hundred to a
few thousand parameters can reach, rather than how far Adam gets in a fixed number of steps.

- `LevenbergMarquardt`: damped Gauss-Newton on the residuals r = f(x) - y, with the Jacobian's
  rows as per-example gradients (by layers from one batched pass, or torch.func.jacrev under
  vmap: a network's examples are independent, no batch statistics) and Nielsen's damping update
  (Nielsen 1999; Madsen, Nielsen, Tingleff 2004, "Methods for non-linear least squares
  problems", algorithm 3.16). Each iteration costs a Jacobian and a P x P solve, O(N P^2).
- `LBFGS`: torch's L-BFGS with a strong-Wolfe line search and its own stopping tolerances off,
  so it runs the iterations it is given.
- `batched.BatchedLevenbergMarquardt`: the restarts of one network as one computation, each
  member taking the steps `LevenbergMarquardt` takes on it alone.

Each ends where float64 resolves no more (`floored`): Levenberg-Marquardt when its damped step
predicts less than `FLOOR` of the loss; L-BFGS, which reads the loss alone, when its iterations no
longer change the loss beyond the loss's own rounding (`STALLED_ITERATIONS` in a row within
`loss_resolution`), or when the loss is within the targets' rounding (`TARGET_FLOOR`);
`iterations` counts what ran.

Each fits a model in place; `run(iterations, on_step)` calls `on_step(iteration, loss)` with the
mean squared error before each iteration's update and stops when it returns False (a
`monitor.TrialMonitor` reads the curve and the divergence rule there), and a second `run` continues
the same fit. `certify.converged` certifies a fit: a certificate, not a reading of the curve.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
from torch import nn

from blocklab.jacobian import FlatParams, gram

OnStep = Callable[[int, float], bool]
# the least decrease of the squared residuals, a share of them, that a Levenberg-Marquardt step
# may predict: below it the change is within the rounding of a sum of N squares (about sqrt(N)
# eps, 3e-14 at N = 20,000), so an accepted step would be noise and a rejected one says nothing.
# A fit whose damped step predicts less has reached a minimum at float64's resolution (a smooth
# one, or a kink of a relu network), where before the damping grew without end (measured: an
# mlp fit rejected every step for 512 iterations at its first rung, and was not certified)
FLOOR = 1e-12
# L-BFGS's floor. Its line search compares losses alone, so it resolves the loss's rounding
# (`loss_resolution`), not the targets': at a minimum with residuals left (label noise, targets
# rounded to float32, an arm that cannot fit them) it finds no lower point, returns a step of 0
# and leaves the parameters and curvature history as they were, so every later iteration repeats
# it exactly. The fit is floored once this many iterations in a row changed the loss by no more
# than its resolution: a step of 0 repeats until the count is full; the count leaves room for
# accepted steps within the rounding, whose curvature pairs are rounding too and may lead to one
# more. Four bound what the window gained to 8 (log2 N + 2) eps of the loss, far below any
# certificate's tolerance, while a fit still descending, however slowly, changes its loss by
# many times its resolution each iteration
STALLED_ITERATIONS = 4
# L-BFGS's early exit: a mean squared error within (16 eps)^2 of the targets' mean square,
# residuals a few units in the last place of the targets, where a lower point the line search
# finds is the outputs' rounding, not a gain (the stall rule ends such a fit too, later)
TARGET_FLOOR = (16 * 2.0**-52) ** 2


def loss_resolution(n: int) -> float:
    """The least change of a mean of `n` squares, a share of it, that float64 resolves: each
    evaluation is exact to about (log2 n + 2) eps of itself (pairwise summation, as torch's
    reductions sum, plus the rounding of the squares and of the division), so two evaluations can
    differ by twice that with nothing changed that the fit could resolve."""
    return 2 * (math.log2(max(n, 1)) + 2) * 2.0**-52


def marquardt_scale(scale: torch.Tensor, diagonal: torch.Tensor) -> torch.Tensor:
    """The damping's diagonal D: the largest diagonal of J^T J seen so far per parameter
    (Marquardt 1963; Moré 1978, MINPACK's lmder), floored at 1e-12 of its largest entry so an
    unused direction stays damped. Damping by mu D rather than mu I steps each parameter in its own
    units: layer-norm gains, embeddings and deep factors differ by orders of magnitude in their
    curvature. Measured on the demo's d=2 network at 400 parameters after its warm start, 512
    iterations reached 0.0050 against 0.0080 with mu I, which had levelled off above it."""
    scale = torch.maximum(scale, diagonal)  # (..., P): one row per fit
    return torch.maximum(scale, 1e-12 * scale.amax(-1, keepdim=True).clamp_min(1e-300))


class LevenbergMarquardt:
    """Damped Gauss-Newton on `model`'s residuals against (x, y), in place. `run` may be called
    again to continue the same fit: the damping carries over."""

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, tau: float = 1e-3):
        self.flat, self.n = FlatParams(model, x, y), y.numel()
        self.theta = self.flat.get()  # (P,)
        with torch.no_grad():
            r = self.flat.residuals(self.theta)  # (n,)
        self.cost = float(r @ r)  # |r|^2 = 2 F(theta)
        self.scale = torch.zeros_like(self.theta)  # (P,) the damping's diagonal (`_linearize`)
        self._linearize(r)
        self.mu, self.nu = tau, 2.0  # relative to `scale`, which carries the units
        # set when the damped step's predicted decrease fell below float64's resolution of the
        # loss (`FLOOR`): every shorter step is invisible too, so the fit has ended
        self.floored = False
        self.iterations = 0  # run so far, every `run` together

    def _linearize(self, r: torch.Tensor) -> None:
        jac = self.flat.jacobian(self.theta)  # (n, P)
        self.a, self.g = gram(jac), jac.T @ r  # (P, P), (P,)
        self.scale = marquardt_scale(self.scale, self.a.diagonal())

    def sync(self) -> None:
        """Put the fit's current parameters into the model (it holds them apart while fitting)."""
        self.flat.set(self.theta)

    def state(self) -> dict:
        """What continues this fit beside the model's parameters (`restore`): the loss, the
        damping and its diagonal, the floor flag and the iterations run. The normal matrix and
        gradient are not kept: the Jacobian at the same parameters recomputes them, bit for bit."""
        return {
            "cost": self.cost,
            "scale": self.scale.clone(),
            "mu": self.mu,
            "nu": self.nu,
            "floored": self.floored,
            "iterations": self.iterations,
        }

    def restore(self, state: dict) -> None:
        """Continue the fit `state` was taken from (`state`), on a model holding its parameters."""
        self.cost, self.mu, self.nu = state["cost"], state["mu"], state["nu"]
        self.scale = state["scale"].to(self.theta)
        self.floored, self.iterations = state["floored"], state["iterations"]

    def stationarity(self) -> float:
        """|J^T r| / (|J|_F |r|), between 0 (a stationary point) and 1: the gradient relative to
        what the residuals and the Jacobian's scale could give it."""
        scale = math.sqrt(float(self.a.diagonal().sum()) * self.cost)
        return float(self.g.norm()) / scale if scale > 0 else 0.0

    def run(self, iterations: int, on_step: OnStep = lambda i, loss: True) -> float:
        """`iterations` steps (a rejected step counts as one); the final mean squared error."""
        for i in range(iterations):
            if self.floored or not on_step(i, self.cost / self.n):
                break
            self.iterations += 1
            chol, info = torch.linalg.cholesky_ex(self.a + torch.diag(self.mu * self.scale))
            if info.item() != 0:  # not positive definite at this damping: damp harder
                self.mu, self.nu = self.mu * self.nu, self.nu * 2
                continue
            delta = -torch.cholesky_solve(self.g.unsqueeze(1), chol).squeeze(1)  # (P,)
            # the linear model's decrease
            predicted = float(delta @ (self.mu * self.scale * delta - self.g))
            if not predicted > FLOOR * self.cost:  # (NaN too) no step float64 can see: stop
                self.floored = True
                break
            theta = self.theta + delta
            r = self.flat.trial(theta)  # (n,), its forward pass kept for the Jacobian
            cost = float(r @ r)
            rho = (self.cost - cost) / predicted
            if math.isfinite(cost) and rho > 0:
                self.theta, self.cost = theta, cost
                self._linearize(r)
                self.mu, self.nu = self.mu * max(1 / 3, 1 - (2 * rho - 1) ** 3), 2.0
            else:
                self.mu, self.nu = self.mu * self.nu, self.nu * 2
        self.flat.set(self.theta)
        self.flat.forget()  # a rejected step's forward pass: nothing continues it
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
        # set when the loss stopped changing beyond its rounding (`STALLED_ITERATIONS`) or reached
        # the rounding of the targets (`TARGET_FLOOR`): the line search resolves nothing more
        self.floored = False
        self.floor = TARGET_FLOOR * float((y * y).mean())
        self.resolution = loss_resolution(y.numel())
        self.last: float | None = None  # the loss at the start of the last iteration run
        self.stalled = 0  # iterations in a row, up to the last one, that changed it within rounding
        self.iterations = 0

    def sync(self) -> None:
        """The model is the fit's state already."""

    def state(self) -> dict:
        """What continues this fit beside the model's parameters: the curvature history (the
        optimizer's state) and the stall count (`restore`)."""
        return {
            "optimizer": copy.deepcopy(self.opt.state_dict()),
            "floored": self.floored,
            "last": self.last,
            "stalled": self.stalled,
            "iterations": self.iterations,
        }

    def restore(self, state: dict) -> None:
        """Continue the fit `state` was taken from, on a model holding its parameters."""
        self.opt.load_state_dict(state["optimizer"])
        self.floored, self.last = state["floored"], state["last"]
        self.stalled, self.iterations = state["stalled"], state["iterations"]

    def stationarity(self) -> float:
        """|grad MSE| / sqrt(MSE): the gradient relative to the loss's own scale (standardized
        targets and features make it O(1) away from a minimum)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        value = nn.functional.mse_loss(self.model(self.x), self.y)
        grads = torch.autograd.grad(value, params, allow_unused=True)
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads if g is not None))
        loss = value.detach().item()
        return norm / math.sqrt(loss) if loss > 0 else 0.0

    def loss(self) -> float:
        with torch.no_grad():
            return nn.functional.mse_loss(self.model(self.x), self.y).item()

    def run(self, iterations: int, on_step: OnStep = lambda i, loss: True) -> float:
        """`iterations` iterations; the final mean squared error."""
        for i in range(iterations):
            if self.floored:
                break
            first = True
            self.iterations += 1

            def closure(i: int = i) -> torch.Tensor:
                # an iteration's first evaluation is at its starting point, before the update:
                # that loss goes to `on_step`, which may stop the fit there
                nonlocal first
                self.opt.zero_grad(set_to_none=True)
                value = nn.functional.mse_loss(self.model(self.x), self.y)
                if first and not on_step(i, value.item()):
                    raise _Stop
                if first and self._floor(value.item()):
                    raise _Stop
                first = False
                value.backward()
                return value

            try:
                self.opt.step(closure)
            except _Stop:
                break
        return self.loss()

    def _floor(self, loss: float) -> bool:
        """Read the loss at an iteration's start, which is where the last iteration ended, and say
        whether the fit is at its floor: `STALLED_ITERATIONS` in a row changed the loss by no more
        than its resolution, or it is within the targets' rounding. A NaN is never a floor."""
        if self.last is not None and abs(self.last - loss) <= self.resolution * self.last:
            self.stalled += 1
        else:
            self.stalled = 0
        self.last = loss
        self.floored = self.stalled >= STALLED_ITERATIONS or loss <= self.floor
        return self.floored


class _Stop(Exception):
    """`on_step` or the floor ended an L-BFGS fit before its iteration's update."""


FITTERS = {"lm": LevenbergMarquardt, "lbfgs": LBFGS}

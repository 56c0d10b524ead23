"""Full-batch second-order fitting in float64, for regression: what a network of a few hundred to a
few thousand parameters can reach, rather than how far Adam gets in a fixed number of steps.

- `LevenbergMarquardt`: damped Gauss-Newton on the residuals r = f(x) - y, with the Jacobian's
  rows as per-example gradients (by layers from one batched pass, or torch.func.jacrev under
  vmap: a network's examples are independent, no batch statistics) and Nielsen's damping update
  (Nielsen 1999; Madsen, Nielsen, Tingleff 2004, "Methods for non-linear least squares
  problems", algorithm 3.16). Each iteration costs a Jacobian and a P x P solve, O(N P^2).
- `LBFGS`: torch's L-BFGS with a strong-Wolfe line search and its own stopping tolerances off,
  so it runs the iterations it is given.
- `fit_batched.BatchedLevenbergMarquardt`: the restarts of one network as one computation, each
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

import functools
import itertools
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

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
# numbers of the Jacobian computed per vmapped pass (examples times parameters): bounds the memory
# of a pass's activations while keeping passes few, since each pass's cost is mostly its fixed
# per-operation overhead (measured at P = 409, N = 13,088: 143 ms in passes of 1,024 examples,
# 62 ms in one pass)
JACOBIAN_NUMBERS = 1 << 24


def loss_resolution(n: int) -> float:
    """The least change of a mean of `n` squares, a share of it, that float64 resolves: each
    evaluation is exact to about (log2 n + 2) eps of itself (pairwise summation, as torch's
    reductions sum, plus the rounding of the squares and of the division), so two evaluations can
    differ by twice that with nothing changed that the fit could resolve."""
    return 2 * (math.log2(max(n, 1)) + 2) * 2.0**-52


class NotByLayers(Exception):
    """A network whose Jacobian the layer rule cannot build (`FlatParams.jacobian_by_layers`)."""


class FlatParams:
    """The trainable parameters of a model as one float64 vector, and the residuals as a
    function of it, for the Jacobian."""

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor):
        self.model, self.x, self.y = model, x, y
        self.named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
        self.sizes = [p.numel() for _, p in self.named]
        self.path: str | None = None  # the Jacobian's path once one ran: "layers" or "examples"
        self._jac: torch.Tensor | None = None  # the layer rule's output (`_buffer`)

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
        """(N * out, P): row i * out + k is example i's output k's gradient. By layers
        (`jacobian_by_layers`) where every trained parameter is an nn.Linear's, else by reverse
        mode under vmap (`jacobian_by_examples`, the reference); `path` names the one that ran."""
        if self.path != "examples":
            try:
                jac = self.jacobian_by_layers(theta)
                self.path = "layers"
                return jac
            except NotByLayers:
                self.path = "examples"
        return self.jacobian_by_examples(theta)

    def _linears(self) -> dict[nn.Linear, list[tuple[int, str]]]:
        """Each nn.Linear holding trained parameters -> (index in `named`, "weight"/"bias");
        NotByLayers when some trained parameter lives elsewhere."""
        owner = {}
        for module in self.model.modules():
            if isinstance(module, nn.Linear):
                for kind in ("weight", "bias"):
                    p = getattr(module, kind)
                    if p is not None:
                        owner[id(p)] = (module, kind)
        out: dict[nn.Linear, list[tuple[int, str]]] = {}
        for i, (_, p) in enumerate(self.named):
            if id(p) not in owner:
                raise NotByLayers
            module, kind = owner[id(p)]
            out.setdefault(module, []).append((i, kind))
        return out

    def jacobian_by_layers(self, theta: torch.Tensor) -> torch.Tensor:
        """One batched forward and one backward per output: for y = W a + b, example i's
        gradient to W is the outer product of its output gradient g_i and its input a_i (summed
        over positions), to b it is g_i. The examples must not interact (no batch statistics),
        which holds for every blocklab network; each Linear must run once per forward."""
        linears = self._linears()
        self.set(theta)
        seen: dict[nn.Linear, tuple[torch.Tensor, torch.Tensor]] = {}

        def hook(module, inputs, output):
            if module in seen:  # a Linear applied twice: its gradients would mix
                raise NotByLayers
            seen[module] = (inputs[0].detach(), output)

        handles = [m.register_forward_hook(hook) for m in linears]
        try:
            with torch.enable_grad():
                out = self.model(self.x)  # (N, ...)
        finally:
            for h in handles:
                h.remove()
        n = len(self.x)
        out = out.reshape(n, -1)  # (N, K)
        k_out = out.shape[1]
        modules = list(linears)
        jac_t = self._buffer(theta.numel(), n, k_out)  # (P, N, K): J^T, each row contiguous
        starts = [0, *itertools.accumulate(self.sizes)]
        for k in range(k_out):
            grads = torch.autograd.grad(
                out[:, k].sum(), [seen[m][1] for m in modules], retain_graph=k + 1 < k_out
            )
            for m, g in zip(modules, grads, strict=True):
                a = seen[m][0].reshape(n, -1, m.in_features)  # (N, T, in)
                g = g.reshape(n, -1, m.out_features)  # (N, T, out)
                for i, kind in linears[m]:
                    rows = jac_t[starts[i] : starts[i + 1], :, k]  # (size, N): a view
                    if kind == "bias":
                        rows.copy_(g.sum(1).T)
                    elif a.shape[1] == 1:  # one position: the outer product, written in place
                        ga, aa = g[:, 0].T.contiguous(), a[:, 0].T.contiguous()  # (out, N), (in, N)
                        torch.mul(ga[:, None], aa[None], out=rows.unflatten(0, m.weight.shape))
                    else:
                        rows.copy_(torch.einsum("nto,nti->oin", g, a).reshape(-1, n))
        return jac_t.view(theta.numel(), n * k_out).T  # (N * K, P), J^T's transpose

    def _buffer(self, *shape: int) -> torch.Tensor:
        """J^T for the layer rule, allocated once per shape and overwritten by every call (each
        row is written, since every trained parameter is one Linear's): a fresh N x P float64
        allocation each iteration cost a quarter of the rule's time in page faults (measured at
        P = 301, N = 19,264: 14 of 50 ms), and rows of N contiguous examples are written at
        memory speed where rows of P were not (16 against 5 ms). A returned Jacobian is valid
        until the next call."""
        if self._jac is None or self._jac.shape != shape:
            self._jac = self.x.new_empty(shape)
        return self._jac

    def jacobian_by_examples(self, theta: torch.Tensor) -> torch.Tensor:
        # the rows example by example, by reverse mode under vmap: measured on a
        # 351-parameter network at N = 8192, 0.05 s against 4.8 s for forward mode over the
        # whole batch, whose P tangents each carry every example's activations
        chunk = max(1, JACOBIAN_NUMBERS // theta.numel())
        rows = vmap(jacrev(self._example), in_dims=(None, 0, 0), chunk_size=chunk)
        return rows(theta, self.x, self.y).reshape(-1, theta.numel())  # (N * out, P)


def gram(jac: torch.Tensor) -> torch.Tensor:
    """J^T J. On the CPU in float64 by BLAS syrk, which computes one triangle, half the work of
    a matrix product (measured at N = 17,056, P = 533, one thread: 54 ms against 169 ms); else,
    and as its reference, `jac.T @ jac`. `jac` may be C-ordered or the transpose of a C-ordered
    J^T (the layer rule's)."""
    cpu64 = jac.device.type == "cpu" and jac.dtype == torch.float64
    if not cpu64 or not (jac.is_contiguous() or jac.T.is_contiguous()):
        return jac.T @ jac
    from scipy.linalg import blas

    _blas_threads(torch.get_num_threads())
    if jac.is_contiguous():
        # a C-ordered (n, P) array is a Fortran-ordered (P, n) one: syrk reads it without a copy
        upper = blas.dsyrk(1.0, jac.numpy().T, trans=0, lower=0)  # host: (P, P), upper triangle
    else:  # a C-ordered (P, n) J^T: its transpose is a Fortran-ordered (n, P) J
        upper = blas.dsyrk(1.0, jac.T.numpy().T, trans=1, lower=0)  # host: the CPU branch
    a = torch.from_numpy(upper)
    return a.triu() + a.triu(1).T


@functools.lru_cache(maxsize=4)
def _blas_threads(n: int) -> None:
    """SciPy's BLAS to `n` threads, as torch's: a worker process of one thread must not start a
    BLAS thread per core beside the other workers."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n, user_api="blas")


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
            with torch.no_grad():
                r = self.flat.residuals(self.theta + delta)
            cost = float(r @ r)
            rho = (self.cost - cost) / predicted
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

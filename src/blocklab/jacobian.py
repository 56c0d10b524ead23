"""A network's parameters as one flat vector, its residuals as a function of it, and their
per-example Jacobian: by layers (each nn.Linear's per-example outer products from one batched
forward and one backward per output, written into one J^T buffer), with reverse mode under vmap
as its reference and its fallback; J^T J by BLAS syrk. The second-order fitters
(`fitting.fit`) and the functional dimension (`measures.functional`) read the same Jacobian."""

from __future__ import annotations

import functools
import itertools

import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

# numbers of the Jacobian computed per vmapped pass (examples times parameters): bounds the memory
# of a pass's activations while keeping passes few, since each pass's cost is mostly its fixed
# per-operation overhead (docs/results/scale.md)
JACOBIAN_NUMBERS = 1 << 24


class NotByLayers(Exception):
    """A network whose Jacobian the layer rule cannot build (`FlatParams.jacobian_by_layers`)."""


class FlatParams:
    """The trainable parameters of a model (or the `params` given, name -> parameter) as one
    float64 vector, and the residuals f(x) - y as a function of it, for the Jacobian."""

    def __init__(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        params: dict[str, torch.Tensor] | None = None,
    ):
        self.model, self.x, self.y = model, x, y
        chosen = params if params is not None else dict(model.named_parameters())
        self.named = [(k, p) for k, p in chosen.items() if p.requires_grad]
        self.sizes = [p.numel() for _, p in self.named]
        self.path: str | None = None  # the Jacobian's path once one ran: "layers" or "examples"
        self._jac: torch.Tensor | None = None  # the layer rule's output (`_buffer`)
        # the layer rule's forward pass kept from `trial` (its theta, each Linear's input and
        # output, the network's output), for `jacobian` at that theta to continue
        self._pass: tuple[torch.Tensor, dict, torch.Tensor] | None = None

    def get(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for _, p in self.named])  # (P,)

    def set(self, theta: torch.Tensor) -> None:
        with torch.no_grad():
            for (_, p), part in zip(self.named, theta.split(self.sizes), strict=True):
                p.copy_(part.view_as(p))

    def _weights(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = theta.split(self.sizes)
        return {k: part.view_as(p) for (k, p), part in zip(self.named, parts, strict=True)}

    def residuals(
        self, theta: torch.Tensor, x: torch.Tensor | None = None, y: torch.Tensor | None = None
    ) -> torch.Tensor:
        """f(x) - y at `theta`, on the model's own (x, y) or on the (x, y) given: a batched fit
        runs the first member's module under vmap on every member's own training set."""
        x, y = (self.x, self.y) if x is None else (x, y)
        out = functional_call(self.model, self._weights(theta), (x,))  # (N, out)
        return (out - y).reshape(-1)  # (N * out,)

    def forget(self) -> None:
        """Drop a forward pass `trial` kept (a rejected step's): nothing will continue it."""
        self._pass = None

    def trial(self, theta: torch.Tensor) -> torch.Tensor:
        """The residuals at a point the fit may move to. On the layer rule's path they come from
        the forward pass its Jacobian needs, kept, so that an accepted step's `jacobian(theta)`
        runs only the backward: one forward pass per accepted step fewer, the same numbers (the
        same operations on the same values; `tests/fitting/test_fit.py` compares them bit for bit).
        A rejected step's pass is dropped by the next trial (or by `forget`)."""
        self.forget()
        if self.path == "layers":
            try:
                linears = self._linears()
                seen, out = self._forward(theta, linears)
            except NotByLayers:
                self.path = "examples"
            else:
                self._pass = (theta, seen, out)
                return (out.detach() - self.y).reshape(-1)  # (N * out,)
        with torch.no_grad():
            return self.residuals(theta)

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
        kept, self._pass = self._pass, None
        if kept is not None and kept[0] is theta:  # `trial` ran this theta's forward pass
            _, seen, out = kept
        else:
            seen, out = self._forward(theta, linears)
        n = len(self.x)
        out = out.reshape(n, -1)  # (N, K)
        k_out = out.shape[1]
        modules = list(linears)
        jac_t = self._buffer(theta, n, k_out)  # (P, N, K): J^T, each row contiguous
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

    def _forward(self, theta: torch.Tensor, linears) -> tuple[dict, torch.Tensor]:
        """The layer rule's forward pass at `theta`, with autograd on: each Linear's input and
        output, and the network's output (N, ...)."""
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
        return seen, out

    def _buffer(self, theta: torch.Tensor, *examples: int) -> torch.Tensor:
        """J^T for the layer rule, allocated once per shape and overwritten by every call (each
        row is written, since every trained parameter is one Linear's): a fresh N x P float64
        allocation each iteration would spend a quarter of the rule's time in page faults, and
        rows of N contiguous examples are written at memory speed where rows of P are not
        (docs/results/scale.md). A returned Jacobian is valid until the next call."""
        shape = (theta.numel(), *examples)
        if self._jac is None or self._jac.shape != shape:
            self._jac = theta.new_empty(shape)  # theta's dtype: the inputs may be token ids
        return self._jac

    def jacobian_by_examples(self, theta: torch.Tensor) -> torch.Tensor:
        # the rows example by example, by reverse mode under vmap: forward mode over the whole
        # batch is two orders slower, since its P tangents each carry every example's
        # activations (docs/results/scale.md)
        chunk = max(1, JACOBIAN_NUMBERS // theta.numel())
        rows = vmap(jacrev(self._example), in_dims=(None, 0, 0), chunk_size=chunk)
        return rows(theta, self.x, self.y).reshape(-1, theta.numel())  # (N * out, P)


def gram(jac: torch.Tensor) -> torch.Tensor:
    """J^T J. On the CPU in float64 by BLAS syrk, which computes one triangle, half the work of
    a matrix product (docs/results/scale.md); else, and as its reference, `jac.T @ jac`. `jac`
    may be C-ordered or the transpose of a C-ordered J^T (the layer rule's)."""
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

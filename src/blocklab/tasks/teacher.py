"""Regression onto a fixed random network: a tanh (or relu) MLP, or such layers mixed with
products."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from blocklab.errors import UserError
from blocklab.tasks import TASKS
from blocklab.tasks.base import Task, TaskData, check_generated, regression_splits

TEACHERS = ("tanh", "mixed")
# the nonlinearity of the teacher's non-product layers: tanh is analytic, so a deep network's fit
# can creep along ever finer corrections; relu's kinks are a different kind of structure, with
# the same per-arm falls at every depth of the degree sweep's ladder
ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu}
# input distributions, each of unit variance per coordinate: the Gaussian's tails hold few
# training points, where deep polynomial networks (degree d^L) extrapolate wildly, so a fit's test
# loss there can sit far above its training loss; the uniform cube has no tails
INPUTS = ("gaussian", "uniform")
# preactivations of std ~2: clearly nonlinear (a linear fit explains about half the variance)
# while most units stay off the flat tails of tanh
TANH_GAIN = 2.0
BIAS_STD = 0.5  # breaks the odd symmetry of tanh, so even-degree terms appear too
CALIBRATION = 8192  # samples used to normalize product-layer features


@dataclass
class _Layer:
    w: torch.Tensor  # (k, width, fan_in): k = 1 for an activation, k = degree for a product layer
    b: torch.Tensor  # (k, 1, width)
    act: str = "tanh"  # ACTIVATIONS, for k = 1
    shift: torch.Tensor | None = None  # product layers: feature mean and std, calibration batch
    scale: torch.Tensor | None = None

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        z = h @ self.w.mT + self.b  # (k, n, width)
        if self.w.shape[0] == 1:
            return ACTIVATIONS[self.act](z[0])
        z = z.prod(0)  # (n, width)
        if self.shift is None:  # the first call is the calibration batch
            self.shift, self.scale = z.mean(0), z.std(0).clamp_min(1e-12)
        # products of k unit-variance maps have wildly uneven scales; rescaling keeps the next tanh
        # in its nonlinear range instead of saturated
        return (z - self.shift) / self.scale


class TeacherNet:
    """A fixed random network in float64, drawn from `generator`.

    "tanh": `depth` layers tanh(W h + b) then a linear readout. "mixed": product layers of degree 2
    and 3 alternate with tanh layers (product, tanh, product, ...), so no single polynomial degree
    matches it, and every product layer is normalized on a fixed calibration batch.
    """

    def __init__(
        self,
        teacher: str,
        n_in: int,
        n_out: int,
        width: int,
        depth: int,
        generator,
        activation: str = "tanh",
        gain: float = TANH_GAIN,
    ):
        g, f64 = generator, torch.float64
        self.layers = []
        fan_in = n_in
        for i in range(depth):
            k = 1 if teacher == "tanh" or i % 2 == 1 else 2 + (i // 2) % 2
            scale = gain if k == 1 else 1.0
            w = torch.randn(k, width, fan_in, generator=g, dtype=f64) * scale / math.sqrt(fan_in)
            b = torch.randn(k, 1, width, generator=g, dtype=f64) * BIAS_STD
            self.layers.append(_Layer(w, b, act=activation))
            fan_in = width
        self.readout = torch.randn(fan_in, n_out, generator=g, dtype=f64) / math.sqrt(fan_in)
        self(torch.randn(CALIBRATION, n_in, generator=g, dtype=f64))  # fixes product-layer stats

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float64)  # (n, n_in)
        for layer in self.layers:
            h = layer(h)  # (n, width)
        return h @ self.readout  # (n, n_out)


@TASKS.register
class Teacher(Task):
    """Inputs x uniform on the cube [-sqrt 3, sqrt 3]^n_in (or, `inputs` "gaussian", N(0, I)), unit
    variance either way; targets from a random teacher network, standardized by train statistics.

    The seed draws both the teacher and the data; label noise (a fraction of the target std) goes on
    train and val targets only, so test MSE measures the teacher itself. With `online` (the
    default) training draws fresh inputs every step (`TaskData.sample`): no example is seen twice,
    so the test loss is approximation plus optimization error, never overfitting; the n_train
    examples then only fix the target's standardization.
    """

    kind = "regression"
    default_threshold = 0.5
    small_options: ClassVar[dict] = {"n_train": 256, "n_val": 64, "n_test": 128}

    @dataclass(frozen=True)
    class Options:
        # 2 inputs on the uniform cube, the degree sweep's demo: a width-3 network with RMS norm
        # sees both (its input Jacobian has rank 2; LayerNorm at width 3 would see 2 of 3
        # inputs), and the cube has no sparse tails where deep polynomial networks (degree d^L)
        # extrapolate, so converged fits test within about 1.1x of train at 32-48 examples per
        # parameter (on Gaussian inputs d=3 at depth 8 needed 96). A width-8 two-layer teacher
        # keeps the demo's depth-1 fits at 0.005-0.02 normalized MSE and lets depth 8 reach 1e-5
        n_in: int = 2
        n_out: int = 1
        teacher: str = "tanh"
        # the non-product layers' nonlinearity (ACTIVATIONS) and their weights' scale (times
        # 1 / sqrt(fan-in)): a larger gain gives a target with finer structure
        activation: str = "tanh"
        gain: float = TANH_GAIN
        width: int = 8
        depth: int = 2
        n_train: int = 65536  # plenty: the comparison is about fitting, not generalization
        n_val: int = 2048
        n_test: int = 8192
        noise: float = 0.0
        inputs: str = "uniform"  # INPUTS
        online: bool = True  # fresh training inputs every step; False: the fixed train split

        def __post_init__(self):
            if self.teacher not in TEACHERS:
                known = ", ".join(TEACHERS)
                raise UserError(f"teacher must be one of {known}, got {self.teacher!r}")
            check_generated(self, "n_in", "n_out", "width", "depth")
            if self.activation not in ACTIVATIONS:
                known = ", ".join(ACTIVATIONS)
                raise UserError(f"activation must be one of {known}, got {self.activation!r}")
            if not self.gain > 0:
                raise UserError(f"gain must be > 0, got {self.gain}")
            if self.inputs not in INPUTS:
                raise UserError(f"inputs must be one of {', '.join(INPUTS)}, got {self.inputs!r}")

    @property
    def threshold(self) -> float:
        # a linear fit reaches ~0.35 on the tanh teacher and ~0.9 on the mixed one, a cubic fit ~0.2
        # and ~0.7: the threshold lies between, so it times learning beyond the linear part
        return 0.22 if self.options.teacher == "tanh" else 0.75

    def make(self, seed: int) -> TaskData:
        o = self.options
        g = torch.Generator().manual_seed(seed)
        net = TeacherNet(
            o.teacher, o.n_in, o.n_out, o.width, o.depth, g, o.activation, o.gain
        )  # drawn before the data

        n = o.n_train + o.n_val + o.n_test
        x = self._inputs(n, g)  # (n, n_in) float32, unit variance
        y = net(x)  # (n, n_out) float64
        train, val, test, target_std, sample = regression_splits(
            x, y, o.n_train, o.n_val, o.noise, g, net, self._inputs if o.online else None
        )
        info = {
            "teacher": o.teacher,
            "n_in": o.n_in,
            "target_std_before_norm": float(target_std.mean()),
        }
        return TaskData(train, val, test, self.kind, o.n_out, info, sample=sample)

    def _inputs(self, n: int, g: torch.Generator) -> torch.Tensor:
        if self.options.inputs == "uniform":  # on [-sqrt 3, sqrt 3]: unit variance
            u = torch.rand(n, self.options.n_in, generator=g)  # (n, n_in)
            return (2 * u - 1) * math.sqrt(3.0)
        return torch.randn(n, self.options.n_in, generator=g)  # (n, n_in)

"""The Hyena operator (Poli et al. 2023, "Hyena Hierarchy: Towards Larger Convolutional Language
Models", arXiv 2302.10866), order N (`order`, default 2), inner width D = d_out:

    v, x_1 .. x_N = split(S(W_in u)),          W_in: d_in -> (N + 1) D,
    S: a causal depthwise convolution of length 3 per channel (the paper's short filter),
    z_0 = v,   z_n = x_n * (h_n conv z_{n-1} + D_n * z_{n-1}),   n = 1 .. N,
    y = W_out z_N,                              W_out: D -> d_out,

with `conv` the causal long convolution (h conv z)_t = sum_{s <= t} h_s z_{t-s}, per channel
(`fft_conv`), `*` the elementwise product, and D_n a per-channel skip ("u * D" of the paper's
long convolution: a weight on lag 0). Each long filter h_n (T, D) is implicit, as the paper's
Hyena filters (section 3.3), h_t = Window(t) * (FFN o PositionalEncoding)(t):

    PosEmb(t) = [t / T, cos(2 pi k t / T), sin(2 pi k t / T) for k = 1, 2]      (5 numbers),
    FFN = Linear(5, W) -> Sin -> Linear(W, W) -> Sin -> Linear(W, W) -> Sin -> Linear(W, N D),
    Sin(a) = sin(w * a), w learnable (W,), shared by the three activations, initialized at 1,
    Window_c(t) = exp(-alpha_c t / T) + 0.05,

W = `filter_width`. The decay rates alpha_c are fixed and spread over each filter's D channels
from slow (1% reached at 1.5 T) to fast (1% at 0.3 T), as the paper's exponential modulation.
The filters are made for the input's T at every forward: no `seq_len`.

The data path is a product of N + 1 linear maps of the input and linear convolutions: degree
N + 1, homogeneous when bias=False. `bias` is the biases of W_in, S and W_out; the FFN's own
biases act on positions, not data, and are always there.

Simplifications, for small CPU runs: the FFN is W = 16 wide by default (the paper: 64); the
positional embedding's frequencies are 1..2 (the reference code's bands start near 0); one
shift b = 0.05 for every channel; the sine frequency starts at 1 (the reference code's filter
default; its long-sequence recall runs use 10, which on sequences of 16-128 made rough filters
that trained worse at lr 1e-2 here); the positions are normalized by the input's T, not by a
maximum length fixed at build time; no dropout; no bidirectional form (causal only).

Initialization (unit-variance-ish at T = 64, the middle of the lab's sequence lengths): W_in and
W_out with unit-variance outputs, S with N(0, 1/3) taps (unit variance for a white input),
D_n ~ N(0, 1/2) (the paper draws N(0, 1)), and the FFN's last layer rescaled at build time so
that at T = 64 a long convolution adds variance 1/2 (mean over channels of sum_s h_s^2) to the
skip's 1/2; the FFN otherwise keeps PyTorch's default, as the paper's code does. The long
convolution's share grows with T: at order 2, width 48, outputs have variance about 0.5 at
T = 8, 1.5 at T = 64 and 3 at T = 128.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from blocklab.blocks import BLOCKS
from blocklab.blocks._attention import flag, linear, positive_int
from blocklab.blocks._longconv import direct_conv, fft_conv
from blocklab.blocks.base import Block, per_member
from blocklab.errors import UserError

SHORT = 3  # taps of the short depthwise filter
BANDS = 2  # frequencies of the positional embedding: emb_dim = 1 + 2 * BANDS
EMB = 1 + 2 * BANDS
INNER = 2  # hidden W x W layers of the filter FFN (the paper's depth 4: 4 linear maps)
SIN_FREQ = 1.0  # initial frequency of the sine activations
# decay rates: each channel's window falls to TARGET at SLOW..FAST times the sequence length
TARGET, SLOW, FAST = 1e-2, 1.5, 0.3
SHIFT = 0.05  # the window's floor, so that no channel forgets the far past entirely
T_REF = 64  # the sequence length the initialization is scaled at


def decay_rates(d: int, like: torch.Tensor | None = None) -> torch.Tensor:
    """alpha (d,): from slow to fast over the channels, exp(-alpha) per sequence length."""
    first, last = math.log(1 / TARGET) / SLOW, math.log(1 / TARGET) / FAST
    if like is None:
        return torch.linspace(first, last, d)
    return torch.linspace(first, last, d, dtype=like.dtype, device=like.device)


def window(t: int, d: int, like: torch.Tensor) -> torch.Tensor:
    """Window_c(s) = exp(-alpha_c s / T) + SHIFT, (T, d)."""
    pos = torch.arange(t, dtype=like.dtype, device=like.device)[:, None] / t  # (T, 1)
    alpha = decay_rates(d, like)  # (d,)
    return torch.exp(-alpha * pos) + SHIFT  # (T, d)


def positions(t: int, like: torch.Tensor) -> torch.Tensor:
    """PosEmb(s) = [s / T, cos(2 pi k s / T), sin(2 pi k s / T)], (T, EMB)."""
    pos = torch.arange(t, dtype=like.dtype, device=like.device)[:, None] / t  # (T, 1)
    k = torch.arange(1, BANDS + 1, dtype=like.dtype, device=like.device)  # (BANDS,)
    angle = 2 * math.pi * pos * k  # (T, BANDS)
    return torch.cat([pos, torch.cos(angle), torch.sin(angle)], dim=-1)  # (T, EMB)


def short_conv(u: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Causal depthwise convolution: y_t = sum_j weight[j] * u_{t-j}, u (..., T, C), weight
    (SHORT, C), or an ensemble's (E, SHORT, C) with u (E, ..., T, C); zeros before the first
    position, so no output reads a later input."""
    t = u.shape[-2]
    padded = F.pad(u, (0, 0, SHORT - 1, 0))  # (..., T + SHORT - 1, C)
    taps = [per_member(weight[..., j, :], u, 1) for j in range(SHORT)]  # (C,) or (E, 1.., C)
    y = sum(padded[..., SHORT - 1 - j : SHORT - 1 - j + t, :] * taps[j] for j in range(SHORT))
    return y if bias is None else y + per_member(bias, u, 1)  # (..., T, C)


@BLOCKS.register
class Hyena(Block):
    mixes_tokens = True
    # an ensemble stacks the filter FFN too: each member makes its own filters (`filters`)
    stackable = True
    examples = [
        {"causal": True},
        {"order": 1, "causal": True, "bias": True},
        {"order": 3, "filter_width": 4, "causal": True},
        {"filter_width": 8, "bias": True},
    ]

    def __init__(
        self,
        d_in: int,
        d_out: int,
        order: int = 2,
        filter_width: int = 16,
        causal: bool = True,
        bias: bool = False,
    ):
        super().__init__(d_in, d_out)
        self.order = positive_int(order, "hyena order")
        self.filter_width = positive_int(filter_width, "hyena filter_width")
        self.bias = flag(bias, "bias")
        if not flag(causal, "causal"):
            raise UserError("hyena is causal only: its long filters convolve over past positions")
        self.causal = True
        self.degree = self.order + 1
        n, d, w = self.order, d_out, self.filter_width
        self.proj = linear(d_in, (n + 1) * d, bias)  # v, x_1 .. x_N
        # N(0, 1/3) taps: a white unit-variance input keeps unit variance
        self.short_weight = nn.Parameter(torch.randn(SHORT, (n + 1) * d) / math.sqrt(SHORT))
        self.short_bias = nn.Parameter(torch.zeros((n + 1) * d)) if bias else None
        self.ffn = nn.ModuleList(
            [
                nn.Linear(EMB, w),
                *(nn.Linear(w, w) for _ in range(INNER)),
                nn.Linear(w, n * d, False),
            ]
        )
        self.freq = nn.Parameter(torch.full((w,), SIN_FREQ))
        with torch.no_grad():
            # a long convolution of a white unit-variance input adds variance sum_s h_s^2: make
            # it 1/2 at T_REF, averaged over the channels (the skip D_n adds the other 1/2)
            energy = self.filters(T_REF, torch.empty(0)).pow(2).sum(1).mean()  # (N, T, D) -> ()
            self.ffn[-1].weight.mul_(torch.sqrt(0.5 / energy))
        self.skip = nn.Parameter(torch.randn(n, d) / math.sqrt(2))  # D_n
        self.out = linear(d, d_out, bias)

    @property
    def homogeneous_degree(self) -> float | None:
        return None if self.bias else float(self.degree)

    @classmethod
    def count_params(
        cls,
        d_in: int,
        d_out: int,
        order: int = 2,
        filter_width: int = 16,
        causal: bool = True,
        bias: bool = False,
    ) -> int:
        n = positive_int(order, "hyena order")
        w = positive_int(filter_width, "hyena filter_width")
        d = d_out
        proj = d_in * (n + 1) * d + d * d_out  # W_in, W_out
        short = SHORT * (n + 1) * d
        ffn = (EMB + 1) * w + INNER * (w + 1) * w + w * n * d + w  # + the sine frequencies
        biases = (2 * (n + 1) * d + d_out) if bias else 0  # W_in, S, W_out
        return proj + short + ffn + n * d + biases  # n * d: the skips D_n

    def filters(self, t: int, like: torch.Tensor) -> torch.Tensor:
        """h_1 .. h_N as (N, T, D): Window(s) * FFN(PosEmb(s)) at the positions s < t; in an
        ensemble, whose FFN weights and sine frequencies carry a member axis, (E, N, T, D)."""
        # in full precision under autocast: bf16 would round the filter's sines coarsely
        with torch.autocast(like.device.type, enabled=False):
            # in the filter's own dtype: under autocast `like` may be bf16, and autocast is off
            h = positions(t, self.freq)  # (T, EMB)
            if self.freq.dim() == 2:  # an ensemble's (E, W): every member reads the positions
                h = h.expand(self.freq.shape[0], *h.shape)  # (E, T, EMB)
            for layer in self.ffn[:-1]:
                h = layer(h)  # (..., T, W)
                h = torch.sin(per_member(self.freq, h, 1) * h)  # (..., T, W)
            h = self.ffn[-1](h)  # (..., T, N * D)
        h = h * window(t, self.d_out, like).repeat(1, self.order)  # each filter: slow to fast
        return h.unflatten(-1, (self.order, self.d_out)).movedim(-2, -3)  # (..., N, T, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.operator(x, fft_conv)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The same operator with the plain lag-by-lag convolution in place of the FFT."""
        return self.operator(x, direct_conv)

    def operator(self, x: torch.Tensor, conv: Any) -> torch.Tensor:
        u = short_conv(self.proj(x), self.short_weight, self.short_bias)  # (B, T, (N + 1) D)
        v, *gates = u.split(self.d_out, dim=-1)  # N + 1 of (B, T, D)
        h = self.filters(x.shape[-2], x)  # (N, T, D), an ensemble's (E, N, T, D)
        z = v
        for n, gate in enumerate(gates):
            h_n = per_member(h[..., n, :, :], z, 2)  # (T, D), an ensemble's (E, 1, T, D)
            skip = per_member(self.skip[..., n, :], z, 1)  # (D,), an ensemble's (E, 1, 1, D)
            z = gate * (conv(z, h_n) + skip * z)  # (B, T, D)
        return self.out(z)  # (B, T, D_out)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, order={self.order}, filter_width={self.filter_width}, "
            f"bias={self.bias}"
        )

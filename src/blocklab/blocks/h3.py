"""H3, the Hungry Hungry Hippos layer (Fu, Dao et al. 2022, "Hungry Hungry Hippos: Towards
Language Modeling with State Space Models", arXiv 2212.14052, section 3 and Algorithm 1):

    q, k, v = x W_q, x W_k, x W_v                                  (T, D) each, D = d_out
    k'      = SSM_shift(k) = K_shift * k                           causal convolution per channel
    kv      = k' (outer) v  per head                               (T, H, dh, dh), H dh = D
    s       = SSM_diag(kv) = K_diag * kv + D_skip kv               per head, shared over (dh, dh)
    y       = (sum_i q_i s_ij) W_o                                 (T, d_out)

with dh = `head_dim` (default 1: the elementwise q * SSM_diag(SSM_shift(k) * v), H = D).

The shift SSM has A the shift matrix and B = e_1 (fixed), so the state is the last `state`
inputs and its kernel is a learned FIR filter of length `state` per channel:

    K_shift[t, d] = C_shift[d, t]  for t < state,  0 after.

The diagonal SSM is S4D with zero-order hold, P complex conjugate pairs per head (the real part
doubled for the conjugates), B folded into C as S4D does:

    K_diag[t, h] = 2 Re( sum_n C[h, n] (exp(dt_h A[h, n]) - 1) / A[h, n] exp(dt_h A[h, n] t) ),

A[h, n] = -exp(log_a[h, n]) + i A_im[h, n] (real part negative, so every mode decays), initialized
S4D-Lin: A_n = -1/2 + i pi n; dt_h = exp(log_dt_h), log_dt uniform in [log 1e-3, log 1e-1]; C
complex normal (C_re, C_im each N(0, 1/2)), D_skip normal, as H3. Both SSMs are applied with
`fft_conv` (`reference` uses `direct_conv`); their kernels are computed at the input's length T.

Without bias the output is a product of three linear maps of x through linear convolutions:
degree 3, homogeneous. H3 is causal (both SSMs are recurrences over past inputs): causal=False is
refused.

Simplifications and choices:
- `state` (default 8; the paper uses 64) is both the shift filter's length and the diagonal SSM's
  real state size N, as in H3's d_state: P = state // 2 conjugate pairs, A, C per head. state
  >= 4: with one pair, S4D-Lin's A_0 = -1/2 is real and C_im would start without a gradient.
- No skip term on the shift SSM (H3's code adds one, ssm_k_D; K_shift[0] already is one).
- D = d_out (q, k, v, o like attention's 4 D^2 without bias); head_dim must divide d_out.
- Init scaled for unit-variance outputs: C_shift uniform with variance 1 / state (H3: a Conv1d's
  1 / (3 state)), so k' keeps unit variance; C and D_skip divided by sqrt(head_dim), as q sums
  head_dim products. Projections are unit-variance factors (`linear`).
- A, C and dt are real parameters (C_re, C_im, log_a, A_im, log_dt), no separate learning rate
  or weight decay rule for the SSM parameters (the paper's S4 optimizer hooks).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from blocklab.blocks import BLOCKS
from blocklab.blocks._attention import flag, linear, positive_int
from blocklab.blocks._longconv import direct_conv, fft_conv
from blocklab.blocks.base import Block, per_member
from blocklab.errors import UserError

DT_MIN, DT_MAX = 1e-3, 1e-1


def sizes(d_out: int, state: int, head_dim: int, causal: bool, bias: bool) -> tuple[int, int, int]:
    """Checked options -> (state, head_dim, P complex pairs)."""
    state, head_dim = positive_int(state, "h3 state"), positive_int(head_dim, "h3 head_dim")
    flag(bias, "bias")
    if not flag(causal, "causal"):
        raise UserError("h3 is causal only: its shift and diagonal SSMs read past inputs alone")
    if state < 4:
        # S4D-Lin's first mode, A_0 = -1/2, is real, so its C_im starts without a gradient
        raise UserError(f"h3 state must be >= 4 (two conjugate pairs or more), got {state}")
    if d_out % head_dim:
        raise UserError(f"h3 head_dim must divide d_out, got head_dim={head_dim}, d_out={d_out}")
    return state, head_dim, state // 2


@BLOCKS.register
class H3(Block):
    mixes_tokens = True
    # an ensemble stacks the raw SSM parameters: each member makes its own kernels
    stackable = True
    degree = 3
    examples = [
        {},
        {"causal": True, "state": 5},
        {"causal": True, "state": 4, "bias": True},
        {"causal": True, "head_dim": 5, "state": 6},
    ]

    def __init__(
        self,
        d_in: int,
        d_out: int,
        state: int = 8,
        head_dim: int = 1,
        causal: bool = True,
        bias: bool = False,
    ):
        super().__init__(d_in, d_out)
        self.state, self.head_dim, p = sizes(d_out, state, head_dim, causal, bias)
        self.causal, self.bias = causal, bias
        d, h = d_out, d_out // self.head_dim
        self.heads = h
        self.q, self.k, self.v = (linear(d_in, d, bias) for _ in range(3))
        self.o = linear(d, d_out, bias)
        # shift SSM: the FIR taps, variance 1 / state so k' keeps unit variance
        bound = math.sqrt(3.0 / self.state)
        self.shift_c = nn.Parameter(torch.empty(d, self.state).uniform_(-bound, bound))  # (D, N)
        # diagonal SSM (S4D-Lin), one per head
        scale = 1.0 / math.sqrt(self.head_dim)  # q sums head_dim products
        self.c_re = nn.Parameter(torch.randn(h, p) * math.sqrt(0.5) * scale)  # (H, P)
        self.c_im = nn.Parameter(torch.randn(h, p) * math.sqrt(0.5) * scale)  # (H, P)
        self.log_a = nn.Parameter(torch.full((h, p), math.log(0.5)))  # Re A = -1/2
        self.a_im = nn.Parameter(
            (math.pi * torch.arange(p).to(torch.get_default_dtype())).repeat(h, 1)
        )
        lo, hi = math.log(DT_MIN), math.log(DT_MAX)
        self.log_dt = nn.Parameter(torch.rand(h) * (hi - lo) + lo)  # (H,) log-uniform dt
        self.d_skip = nn.Parameter(torch.randn(h) * scale)  # (H,)

    @property
    def homogeneous_degree(self) -> float | None:
        return None if self.bias else 3.0

    @classmethod
    def count_params(
        cls,
        d_in: int,
        d_out: int,
        state: int = 8,
        head_dim: int = 1,
        causal: bool = True,
        bias: bool = False,
    ) -> int:
        state, head_dim, p = sizes(d_out, state, head_dim, causal, bias)
        d, h = d_out, d_out // head_dim
        projections = 3 * d_in * d + d * d_out + ((3 * d + d_out) if bias else 0)
        # C_shift; per head: C_re, C_im, log_a, A_im (P each), log_dt, D_skip
        return projections + d * state + h * (4 * p + 2)

    # the kernels, from the raw parameters; an ensemble's carry a leading member axis E, and so
    # do its kernels

    def shift_kernel(self, t: int) -> torch.Tensor:
        taps = self.shift_c[..., :t]  # (D, min(N, T)): taps past T never act
        return F.pad(taps, (0, t - taps.shape[-1])).mT  # (T, D)

    def diag_kernel(self, t: int) -> torch.Tensor:
        dt = self.log_dt.exp()  # (H,)
        a = torch.complex(-self.log_a.exp(), self.a_im)  # (H, P), Re A < 0: stable
        dta = dt[..., None] * a  # (H, P)
        # zero-order hold: B_bar = (exp(dt A) - 1) / A B, with B folded into C
        c = torch.complex(self.c_re, self.c_im) * (dta.exp() - 1) / a  # (H, P)
        pos = torch.arange(t, dtype=dt.dtype, device=dt.device)  # (T,)
        powers = (dta[..., None] * pos).exp()  # (H, P, T): exp(dt A t)
        return 2 * torch.einsum("...hn,...hnt->...th", c, powers).real  # (T, H), conjugates x2

    def mix(self, x: torch.Tensor, conv) -> torch.Tensor:
        t, h, dh = x.shape[-2], self.heads, self.head_dim
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, D) each
        k = conv(k, per_member(self.shift_kernel(t), k, 2))  # (B, T, D)
        # per head the outer product k' v^T: dh * dh channels sharing the head's diagonal SSM
        kv = k.unflatten(-1, (h, dh, 1)) * v.unflatten(-1, (h, 1, dh))  # (B, T, H, dh, dh)
        kv = kv.flatten(-3)  # (B, T, H dh dh)
        kernel = self.diag_kernel(t).repeat_interleave(dh * dh, dim=-1)  # (T, H dh dh)
        kernel = per_member(kernel, kv, 2)
        skip = per_member(self.d_skip.repeat_interleave(dh * dh, dim=-1), kv, 1)  # (H dh dh,)
        s = conv(kv, kernel) + skip * kv  # (B, T, H dh dh)
        y = (q.unflatten(-1, (h, dh, 1)) * s.unflatten(-1, (h, dh, dh))).sum(-2)  # (B, T, H, dh)
        return self.o(y.flatten(-2))  # (B, T, D_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mix(x, fft_conv)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The same output with `direct_conv`, the loop over lags, in place of `fft_conv`."""
        return self.mix(x, direct_conv)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, state={self.state}, head_dim={self.head_dim}, "
            f"causal={self.causal}, bias={self.bias}"
        )

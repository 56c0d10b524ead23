"""Causal long convolutions, shared by the gated-convolution blocks (`hyena`, `h3`).

One filter per channel, as long as the sequence: y[t, d] = sum_{s <= t} k[s, d] u[t - s, d].

`fft_conv` is the fast path, O(T log T) per channel: both signals zero-padded to 2T, so the
circular convolution the FFT computes equals the linear one on the first T outputs and no output
reads a later input. `direct_conv` is its plain reference, a loop over the lag s; tests compare
the two on forward and backward.
"""

from __future__ import annotations

import torch


def fft_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """u (..., T, D) convolved causally with k (T, D), or with (..., T, D) matching u's leading
    dimensions; returns (..., T, D) in u's dtype."""
    t = u.shape[-2]
    n = 2 * t  # zero padding to 2T: the circular convolution is the linear one on [0, T)
    # the FFT of a float tensor runs in at least float32 (no half-precision rfft on every device)
    dtype = torch.promote_types(u.dtype, torch.float32)
    uf = torch.fft.rfft(u.to(dtype), n=n, dim=-2)  # (..., n // 2 + 1, D)
    kf = torch.fft.rfft(k.to(dtype), n=n, dim=-2)  # (..., n // 2 + 1, D)
    y = torch.fft.irfft(uf * kf, n=n, dim=-2)[..., :t, :]  # (..., T, D)
    return y.to(u.dtype)


def direct_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The reference: the same sum as `fft_conv`, one lag at a time."""
    t = u.shape[-2]
    y = torch.zeros_like(u)  # (..., T, D)
    for s in range(t):
        # lag s: output t' reads input t' - s, for t' >= s
        y = y + torch.nn.functional.pad(u[..., : t - s, :], (0, 0, s, 0)) * k[..., s : s + 1, :]
    return y

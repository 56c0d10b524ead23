"""Numerical limits of the grid-tensor ranks (`blocklab.measures`), free of torch, so that the
experiments' configs and the command line can name them as defaults.
"""

# Singular values at or below RTOL * sigma_max are not counted. A network's float64 evaluation
# error is ~1e-13 of its output scale, so this margin keeps noise out of the count: the
# numerical rank stays a lower bound of the exact grid rank (possibly lower than it, when the
# spectrum of a deep network decays past the tolerance).
RTOL = 1e-9
MAX_POINTS = 1 << 22  # grid points (a float64 tensor of 32 MiB); raise it explicitly for more

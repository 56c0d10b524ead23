"""One scaling curve L(P) = L_inf + a P^-alpha fitted to (parameter count, loss) points, and the
same fit for a batch of curves at once (the bootstrap of `scaling` refits thousands).

Least squares on log(loss): losses span decades and their noise is relative. The only non-linear
parameter is alpha, so a grid over alpha with (L_inf, log b) solved linearly at each grid point
picks the start (variable projection), and a bounded Levenberg-Marquardt (batch) or scipy's
least_squares (single curve) polishes it.
"""

import math

import numpy as np
from scipy import optimize

ALPHA_MAX = 4.0
_ALPHA_MIN = 1e-4  # alpha > 0: the fit's lower bound
_GRID = np.geomspace(0.01, ALPHA_MAX, 160)  # variable projection: alpha is the only non-linear one
_C_GAP = 1e-6  # L_inf < min(losses): the bound sits this relative gap below it
NAN = float("nan")


def power_law(p, L_inf, a, alpha):
    """L_inf + a * p^-alpha, elementwise."""
    return L_inf + a * np.asarray(p, dtype=float) ** (-alpha)


def _start(u, y, m):
    """Best grid alpha per row, with (L_inf, log b) from a linear solve at each alpha.

    u: (n,) log(p / P0); y: (B, n) losses (any positive value where masked); m: (B, n) 0/1 mask.
    For fixed alpha the curve c + b x, x = exp(-alpha u), is linear in (c, b): weighted by 1/y^2,
    least squares approximates the log residuals; it is solved exactly on the box 0 <= c <= cmax,
    b >= 0 (the unconstrained optimum, else the best of the three edges, as the objective is
    convex). The grid point is then chosen by its true log residuals.
    """
    x = np.exp(-_GRID[:, None] * u[None, :])  # (G, n)
    w = m / y**2
    wy = w * y
    s1, sy, syy = (v.sum(1)[:, None] for v in (w, wy, wy * y))
    sx, sxx, sxy = w @ x.T, w @ (x * x).T, wy @ x.T  # (B, G)
    cmax = (np.where(m > 0, y, np.inf).min(1) * (1 - _C_GAP))[:, None]

    def q(c, b):
        return syy - 2 * c * sy - 2 * b * sxy + c * c * s1 + 2 * c * b * sx + b * b * sxx

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        det = s1 * sxx - sx * sx
        c0, b0 = (sxx * sy - sx * sxy) / det, (s1 * sxy - sx * sy) / det
        zero = np.zeros_like(sx)
        b_lo, b_hi = np.maximum(sxy / sxx, 0), np.maximum((sxy - cmax * sx) / sxx, 0)
        c_b0 = np.clip(sy / s1, 0, cmax) + zero
        cands = [(zero, b_lo), (cmax + zero, b_hi), (c_b0, zero)]
        ok = (c0 >= 0) & (c0 <= cmax) & (b0 > 0) & np.isfinite(c0) & np.isfinite(b0)
        best_q, c, b = np.where(ok, q(c0, b0), np.inf), np.where(ok, c0, 0), np.where(ok, b0, 0)
        for cc, bb in cands:
            qq = np.where(np.isfinite(q(cc, bb)), q(cc, bb), np.inf)
            better = ~ok & (qq < best_q)
            best_q, c, b = (
                np.where(better, qq, best_q),
                np.where(better, cc, c),
                np.where(better, bb, b),
            )
        b = np.maximum(b, 1e-12 * cmax)  # a > 0: a flat curve starts from a tiny slope
        pred = c[:, :, None] + b[:, :, None] * x[None]
        cost = np.sum(m[:, None, :] * (np.log(pred) - np.log(y)[:, None, :]) ** 2, axis=2)
    cost = np.where(np.isfinite(cost), cost, np.inf)
    k = np.argmin(cost, axis=1)
    rows = np.arange(len(k))
    return np.stack([c[rows, k], np.log(b[rows, k]), _GRID[k]], axis=1), cmax[:, 0]


def _residuals(theta, u, ly, m):
    c, beta, alpha = (theta[:, i : i + 1] for i in range(3))
    bx = np.exp(beta - alpha * u)
    f = c + bx
    return m * (np.log(f) - ly), f, bx


def _polish(theta, cmax, u, ly, m, iters=100):
    """Levenberg-Marquardt on the log residuals, all rows at once, within the fit's bounds.

    A parameter on a bound whose gradient points out of the box is held there for the step (a
    projected active set); steps are clipped into the box and kept only when the cost falls.
    """
    n = len(theta)
    lo = np.column_stack([np.zeros(n), np.full(n, -np.inf), np.full(n, _ALPHA_MIN)])
    hi = np.column_stack([cmax, np.full(n, np.inf), np.full(n, ALPHA_MAX)])
    theta = np.clip(theta, lo, hi)
    lam = np.full(n, 1e-3)
    live = np.arange(n)
    eye = np.eye(3)
    r, f, bx = _residuals(theta, u, ly, m)
    cost = np.sum(r * r, axis=1)
    for _ in range(iters):
        if not len(live):
            break
        th, rr, ff, bb, mm, yy = theta[live], r[live], f[live], bx[live], m[live], ly[live]
        J = np.stack([mm / ff, mm * bb / ff, -mm * u * bb / ff], axis=2)  # (k, n, 3)
        g = np.einsum("kni,kn->ki", J, rr)
        H = np.einsum("kni,knj->kij", J, J)
        held = ((th <= lo[live]) & (g > 0)) | ((th >= hi[live]) & (g < 0))
        free = (~held).astype(float)
        diag = np.diagonal(H, axis1=1, axis2=2) + 1e-30
        A = (H + lam[live, None, None] * eye * diag[:, None, :]) * free[:, :, None] * free[:, None]
        A = A + eye * held[:, None, :]
        with np.errstate(all="ignore"):
            step = np.linalg.solve(A, (-g * free)[..., None])[..., 0]
            new = np.clip(th + step, lo[live], hi[live])
            r_new, f_new, bx_new = _residuals(new, u, yy, mm)
            c_new = np.sum(r_new * r_new, axis=1)
        accept = np.isfinite(c_new) & (c_new < cost[live])
        done = (
            accept & (np.abs(new - th) <= 1e-12 * (1 + np.abs(th))).all(1)
            | (lam[live] > 1e10)
            | (cost[live] <= 1e-30)
        )
        idx = live[accept]
        theta[idx], r[idx], f[idx], bx[idx], cost[idx] = (
            new[accept],
            r_new[accept],
            f_new[accept],
            bx_new[accept],
            c_new[accept],
        )
        lam[live] = np.where(accept, np.maximum(lam[live] * 0.3, 1e-12), lam[live] * 5)
        live = live[~done]
    return theta


def _unscale(theta, p0):
    """(L_inf, a, alpha) from (L_inf, log b, alpha) with b the coefficient of (p / p0)^-alpha."""
    c, beta, alpha = np.moveaxis(np.asarray(theta, dtype=float), -1, 0)
    with np.errstate(over="ignore"):
        return c, np.exp(beta + alpha * math.log(p0)), alpha


def fit_batch(params, losses, mask):
    """(L_inf, a, alpha) arrays, one fit per row of losses (B, n); nan where under 3 points."""
    params = np.asarray(params, dtype=float)
    m = np.asarray(mask, dtype=float)
    good = m.sum(1) >= 3
    out = np.full((len(m), 3), NAN)
    if good.any():
        p0 = math.exp(float(np.mean(np.log(params))))
        u = np.log(params / p0)
        y = np.where(m[good] > 0, losses[good], 1.0)
        theta, cmax = _start(u, y, m[good])
        theta = _polish(theta, cmax, u, np.log(y), m[good])
        out[good] = np.column_stack(_unscale(theta, p0))
    return out[:, 0], out[:, 1], out[:, 2]


def fit_power_law(params, losses):
    """(L_inf, a, alpha) of L = L_inf + a P^-alpha, by least squares on log(loss), or None.

    Losses span decades and their noise is relative, hence log residuals. Bounds: 0 <= L_inf <
    min(losses), a > 0, 0 < alpha <= ALPHA_MAX. Variable projection over a grid of alpha picks the
    start (no lucky initial guess), then scipy's least_squares polishes it. Points with a
    non-finite or non-positive count or loss are ignored; None below 3 distinct counts.
    """
    p = np.asarray(params, dtype=float).ravel()
    y = np.asarray(losses, dtype=float).ravel()
    if p.shape != y.shape:
        raise ValueError(f"params and losses differ in length: {len(p)} and {len(y)}")
    keep = np.isfinite(p) & np.isfinite(y) & (p > 0) & (y > 0)
    p, y = p[keep], y[keep]
    if len(np.unique(p)) < 3:
        return None
    p0 = math.exp(float(np.mean(np.log(p))))
    u, ly = np.log(p / p0), np.log(y)
    theta, cmax = _start(u, y[None], np.ones((1, len(y))))
    cmax = float(cmax[0])
    lo, hi = [0.0, -np.inf, _ALPHA_MIN], [cmax, np.inf, ALPHA_MAX]

    def fun(t):
        return np.log(t[0] + np.exp(t[1] - t[2] * u)) - ly

    def jac(t):
        bx = np.exp(t[1] - t[2] * u)
        f = t[0] + bx
        return np.column_stack([1 / f, bx / f, -u * bx / f])

    x0 = np.clip(theta[0], lo, hi)
    try:
        res = optimize.least_squares(
            fun, x0, jac=jac, bounds=(lo, hi), method="trf", ftol=1e-14, xtol=1e-14, gtol=1e-14
        )
        t = res.x if np.sum(res.fun**2) <= np.sum(fun(x0) ** 2) else x0
    except (ValueError, np.linalg.LinAlgError):
        t = x0
    c, a, alpha = (float(v) for v in _unscale(t, p0))
    c = 0.0 if c <= 1e-12 * cmax else c  # trf stops a hair inside the bound (even at 5e-324)
    if not all(math.isfinite(v) for v in (c, a, alpha)) or a <= 0:
        return None
    return c, a, alpha

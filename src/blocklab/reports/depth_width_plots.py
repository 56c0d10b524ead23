"""The depth-to-width report's figures, drawn as seed 001's figures 2, 3 and 4 from the
report's `Result`."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from blocklab.analysis import depth_width as dw
from blocklab.reports.figures import save_figure


def loss_plot(result, path: Path) -> str:
    """Figure 2: test loss against size per depth, one panel per adjacent pair, transitions
    marked at the size of the shallower net."""
    depths = sorted({s["depth"] for s in result.summaries})
    pairs = list(zip(depths, depths[1:], strict=False)) or [(depths[0], depths[0])]
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 3.6), squeeze=False)
    found = {(s.depth_shallow, s.depth_deep): s.transition for s in result.searches}
    for ax, (lo, hi) in zip(axes[0], pairs, strict=True):
        for depth, colour in ((lo, "tab:blue"), (hi, "tab:red")):
            group = [s for s in result.summaries if s["depth"] == depth and s["n"] >= 1]
            xs = [s["budget"] for s in group]
            ax.errorbar(
                xs,
                [s["mean"] for s in group],
                yerr=[0 if math.isnan(s["std"]) else s["std"] for s in group],
                marker="o",
                ms=3,
                capsize=2,
                color=colour,
                label=f"L = {depth}",
            )
        t = found.get((lo, hi))
        if t is not None:
            ax.axvline(t.n_params, color="grey", ls="--", lw=1, label=f"transition dx={t.width:g}")
        ax.set_xscale("log")
        ax.set_xlabel("non-embedding parameters N (count)")
        ax.set_ylabel("test loss (nats/token)")
        ax.set_title(f"L = {lo} vs {hi}")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def fit_plot(result, path: Path) -> str:
    """Figure 3(a, b): log transition width against depth with the fit, and N_transition(L)
    with its 1-sigma band."""
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(9, 3.6))
    # the paper's fit over this run's depths, and the sizes the run measured, for reference
    depths = sorted({s["depth"] for s in result.summaries})
    sizes = [s["budget"] for s in result.summaries]
    ref = np.linspace(min(depths), max(depths), 50)
    paper_n, _ = dw.n_transition(ref)
    ax_a.plot(ref, dw.PAPER_FIT.a + dw.PAPER_FIT.b * ref, "--", color="grey", label="paper")
    ax_b.plot(ref, paper_n, "--", color="grey", label="paper (eq. 10-11)")
    ax_b.axhspan(min(sizes), max(sizes), color="orange", alpha=0.2, label="sizes measured")
    found = [s.transition for s in result.searches if s.transition is not None]
    if found:
        ls = np.array([t.depth_shallow for t in found], dtype=float)
        ws = np.array([t.width for t in found])
        errs = np.array([t.error for t in found])
        ax_a.errorbar(ls, np.log(ws), yerr=errs / ws, fmt="kx", ecolor="red", capsize=3)
        ax_b.plot(ls, 12 * ls * ws**2, "kx", label="measured transitions")
    if result.fit is not None:
        fit = result.fit
        grid = np.linspace(min(fit.depths) - 0.5, max(fit.depths) + 0.5, 100)
        ax_a.plot(grid, fit.a + fit.b * grid, "b-", label=f"a={fit.a:.2f}, b={fit.b:.3f}")
        n, dn = dw.n_transition(grid, fit)
        ax_b.plot(grid, n, "b-", label="fit (eq. 10)")
        ax_b.fill_between(grid, n - dn, n + dn, color="green", alpha=0.3, label="+- delta N")
    else:
        ax_a.set_title(f"no fit: {result.fit_error}", fontsize=7, wrap=True)
    ax_a.legend(fontsize=7)
    ax_a.set_xlabel("depth L (layers)")
    ax_a.set_ylabel("ln dx at the transition (dimensionless)")
    ax_b.set_yscale("log")
    ax_b.set_xlabel("depth L (layers)")
    ax_b.set_ylabel("N_transition (non-embedding parameters)")
    ax_b.legend(fontsize=7)
    return save_figure(fig, path)


def projection_plot(result, path: Path, depth_max: int = 100) -> str:
    """Figure 4: N_transition(L) extrapolated to depth 100, the paper's fit beside this run's."""
    fig, ax = plt.subplots(figsize=(5, 3.6))
    grid = np.linspace(1, depth_max, 200)
    fits = [(dw.PAPER_FIT, "paper (eq. 11)", "tab:green")]
    if result.fit is not None and result.fit.b > 0:
        fits.append((result.fit, "this run", "tab:blue"))
    for fit, label, colour in fits:
        n, dn = dw.n_transition(grid, fit)
        ax.plot(grid, n, color=colour, label=label)
        ax.fill_between(grid, np.maximum(n - dn, 1), n + dn, color=colour, alpha=0.25)
    ax.set_yscale("log")
    ax.set_xlabel("depth L (layers)")
    ax.set_ylabel("N_transition, optimal size at depth L\n(non-embedding parameters)")
    ax.legend(fontsize=7)
    return save_figure(fig, path)

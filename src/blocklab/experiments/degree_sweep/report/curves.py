"""Figures of the degree sweep's capacity analysis (`degree_sweep.analysis.capacity`): test
loss against budget with the scaling fits, the parameter efficiency against d = 3, and for
second-order fits the loss of one fit per arm against its iterations.
"""

import math
from collections import defaultdict

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from blocklab.experiments.degree_sweep.report.intervals import after, computed
from blocklab.experiments.degree_sweep.report.plots import save
from blocklab.reports.figures import arm_colors
from blocklab.theory import predicted_multiplier


def _arm_key(capacity):
    return lambda a: (capacity.degrees.get(a) is None, capacity.degrees.get(a) or 0.0, a)


def _plain_log(ax, axes="xy"):
    """Log axes labelled 0.3, not 3 x 10^-1, at 1, 2 and 5 per decade (minor ticks unlabelled:
    over a wide range their labels overlap)."""
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for name in axes:
        axis = getattr(ax, f"{name}axis")
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(NullFormatter())


def scaling_curves(capacity, path, unit="MSE or cross-entropy in nats"):
    """Log-log test loss against actual block parameters: per arm each cell's geometric mean over
    its units with the 95% interval of its log loss (never below zero), and the shared scaling
    model L_a(P) = L_inf + A (P / m_a)^-alpha through them, its multiplier and interval in the
    legend (each arm's own curve where the shared model could not be fitted)."""
    stats, model = capacity.stats, capacity.model
    arms = sorted(stats, key=_arm_key(capacity))
    color = arm_colors(arms)
    fig, ax = plt.subplots(figsize=(7.5, 5), layout="constrained")
    for arm in arms:
        pts = [s for _, s in sorted(stats[arm].items()) if math.isfinite(s["gmean"])]
        if not pts:
            continue
        x = np.array([s["block_params"] for s in pts], dtype=float)
        y = np.array([s["gmean"] for s in pts])
        lo = np.array([s["g_low"] if math.isfinite(s["g_low"]) else s["gmean"] for s in pts])
        hi = np.array([s["g_high"] if math.isfinite(s["g_high"]) else s["gmean"] for s in pts])
        c = color[arm]
        ax.errorbar(x, y, yerr=[y - lo, hi - y], color=c, marker="o", ls="none", capsize=3)
        grid = np.geomspace(x.min() / 1.3, x.max() * 1.3, 100)
        m = model.multipliers.get(arm) if model is not None else None
        if m is not None and math.isfinite(m.value) and m.value > 0:
            curve = model.L_inf + model.A * (grid / m.value) ** (-model.alpha.value)
            if arm == model.reference:  # 1 by definition: no interval to show
                label = f"{arm}: m = 1 (the reference)"
            elif math.isfinite(m.low) and math.isfinite(m.high):
                label = f"{arm}: m = {m.value:.3g} [{m.low:.3g}, {m.high:.3g}]"
            else:
                label = f"{arm}: m = {m.value:.3g} (no interval: too few units)"
            ax.plot(grid, curve, color=c, label=label)
        elif arm in capacity.fit.fits:
            f = capacity.fit.fits[arm]
            ax.plot(grid, [f.predict(p) for p in grid], color=c, ls="--", label=f"{arm} (own fit)")
        else:
            ax.plot([], [], color=c, marker="o", label=f"{arm} (no fit)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax)
    ax.set(
        xlabel="block parameters P (actual count)",
        ylabel=f"test loss ({unit}), geometric mean and 95% CI",
    )
    if model is not None:
        a = model.alpha
        title = (
            f"shared fit L_inf + A (P / m)^-alpha: alpha = {a.value:.3g}{after(a.low, a.high)}"
            f"{'' if computed(a.low, a.high) else ' (no interval: too few units)'}, "
            f"m({model.reference}) = 1"
        )
    else:
        title = "test loss against parameters (no shared fit)"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, path)


UNIT_KEY = {"m_2 / m_4": "m2/m4"}  # the plot's name -> `MultiplierFit.per_unit`'s


def efficiency(capacity, path):
    """Each arm's multiplier against d = 3 in the shared model, with its bootstrap interval, beside
    seed 000's prediction h(3) / h(d), and m_2 / m_4 beside its predicted 1, each (teacher,
    seed) unit's own multiplier in grey beside its interval; above 1 the arm
    needs more parameters than d = 3 for the same loss. An unbounded end is drawn at the frame
    and marked."""
    model = capacity.model
    named = [(a, i) for a, i in model.multipliers.items()]
    named.sort(key=lambda ai: _arm_key(capacity)(ai[0]))
    if model.ratio_2_4 is not None:
        named.append(("m_2 / m_4", model.ratio_2_4))
    values = [v for _, i in named for v in (i.value, i.low, i.high)]
    values += [v for name, _ in named for v in model.per_unit.get(UNIT_KEY.get(name, name), ())]
    shown = [v for v in values if math.isfinite(v) and v > 0]
    top = max(shown + [1.2]) * 1.15
    bottom = max(min(shown + [0.8]) / 1.15, 1e-3)
    fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    for k, (name, i) in enumerate(named):
        if name in model.shape.differs:  # an exponent of its own: no multiplier to draw
            a = model.arm_alpha.get(name)
            said = f"own exponent\n{a.value:.2g}" if a is not None else "own exponent"
            ax.annotate(said, (k, 1.0), ha="center", va="center", fontsize=8)
            continue
        # every (teacher, seed) unit's own multiplier, beside the interval its units give
        units = [u for u in model.per_unit.get(UNIT_KEY.get(name, name), ()) if u > 0]
        if units:
            spread = np.linspace(-0.18, 0.18, len(units)) if len(units) > 1 else [0.0]
            ax.plot(k + 0.25 + np.asarray(spread) * 0.5, np.clip(units, bottom, top), ls="none",
                    marker=".", color="0.45", alpha=0.7, label="each unit")  # fmt: skip
        m = i.value if math.isfinite(i.value) and i.value > 0 else top
        lo = i.low if math.isfinite(i.low) and i.low > 0 else bottom
        hi = i.high if math.isfinite(i.high) else top
        # an interval that could not be computed (NaN ends) is no bar, not one to the frame
        bars = [[max(m - lo, 0.0)], [max(hi - m, 0.0)]] if computed(i.low, i.high) else None
        ax.errorbar([k], [m], yerr=bars, color="C0", marker="o", capsize=4, label="measured")
        if bars is None and name != model.reference:
            ax.annotate(
                "no interval",
                (k, m),
                xytext=(-7, 0),
                textcoords="offset points",
                ha="right",
                va="center",
                fontsize=8,
            )  # left: the units lie right
        elif not i.bounded and name != model.reference:
            ax.annotate("unbounded", (k, top), ha="center", va="bottom", fontsize=8)
        pred = (
            1.0 if name == "m_2 / m_4" else predicted_multiplier(name, capacity.degrees.get(name))
        )
        if pred is not None:
            ax.plot([k], [pred], color="C3", marker="x", ms=9, ls="none", label="predicted")
    ax.axhline(1.0, color="0.4", linestyle=":", linewidth=1)
    ax.set_xticks(range(len(named)), [n for n, _ in named])
    ax.set_yscale("log")
    ax.set_ylim(bottom, top * 1.1)
    _plain_log(ax, "y")
    ax.set(xlabel="arm", ylabel="parameters needed / those of d = 3 (ratio)")
    ax.set_title("shared-model multipliers with 95% CI; > 1: needs more than d = 3", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))  # one entry per kind, not per arm
    ax.legend(unique.values(), unique.keys(), fontsize=8)
    return save(fig, path)


# the ticks `contrasts` labels on its log axis, and how it draws each hypothesis's prediction
# (1, "no difference", is the dotted line)
MULTIPLIER_TICKS = (0.125, 0.25, 0.33, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 4, 8)
PREDICTION_MARKS = {"h(d)": ("x", "C3", "the note's h(d)"), "H_fd": ("+", "C1", "H_fd")}


def contrasts(capacity, path):
    """The matched answer (`capacity.matched`) teacher by teacher: each quantity's per-teacher
    multiplier (grey, one dot a teacher), the trimmed mean with Yuen's 95% interval, the plain
    mean with its t interval, the 95% prediction interval for a new teacher, and the hypotheses'
    predictions; the negative control beside them, whose prediction is 1."""
    res = capacity.matched
    est = res.estimates
    entries = {e["quantity"]: e for e in res.answer.entries}
    shown = [(q, est.get(q)) for q in entries if est.get(q) is not None]
    if est.control is not None:
        shown.append(("control", est.control))
    if not shown:
        return None
    values = [v for _, e in shown for v in (*np.exp(e.per_teacher), e.pi_low, e.pi_high)]
    values = [v for v in values if math.isfinite(v) and v > 0]
    bottom, top = min(values + [0.8]) / 1.1, max(values + [1.25]) * 1.1
    fig, ax = plt.subplots(figsize=(7.5, 4.4), layout="constrained")
    for k, (q, e) in enumerate(shown):
        per = np.exp(np.asarray(e.per_teacher))
        jitter = np.linspace(-0.16, 0.16, len(per)) if len(per) > 1 else np.zeros(1)
        ax.plot(k - 0.22 + jitter * 0.6, per, ls="none", marker=".", color="0.5", alpha=0.6,
                label="each teacher")  # fmt: skip
        m = math.exp(e.log_m)
        ax.errorbar([k], [m], yerr=[[m - e.low], [e.high - m]], color="C0", marker="o",
                    capsize=4, lw=2, label="20% trimmed mean, Yuen 95%")  # fmt: skip
        ax.errorbar([k + 0.14], [e.plain], yerr=[[e.plain - e.plain_low], [e.plain_high - e.plain]],
                    color="C0", marker="o", mfc="white", capsize=3, lw=1,
                    label="plain mean, t 95%")  # fmt: skip
        ax.plot([k + 0.26, k + 0.26], [e.pi_low, e.pi_high], color="C2", lw=1, marker="_",
                label="95% prediction interval")  # fmt: skip
        for name, h in (entries.get(q) or {}).get("hypotheses", {}).items():
            if name in PREDICTION_MARKS and h.get("predicted"):
                marker, color, label = PREDICTION_MARKS[name]
                ax.plot([k + 0.05], [h["predicted"]], ls="none", marker=marker, ms=9,
                        color=color, label=label)  # fmt: skip
    ax.axhline(1.0, color="0.4", linestyle=":", linewidth=1, label="no difference (1)")
    ax.set_xticks(range(len(shown)), [q.replace("m2/m4", "m_2 / m_4") for q, _ in shown])
    ax.set_yscale("log")
    ax.set_ylim(bottom, top)
    _plain_log(ax, "y")
    # fine ticks where the frame spans less than 4x, else only the powers of two
    fine = top / bottom < 4
    ticks = [t for t in MULTIPLIER_TICKS if bottom <= t <= top and (fine or math.log2(t) % 1 == 0)]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    teachers = max(e.teachers for _, e in shown)
    said = " (control: a second d=3 arm against d=3)" if est.control is not None else ""
    ax.set(xlabel=f"quantity{said}", ylabel="parameters needed, ratio")
    ax.set_title(f"the matched multipliers of {teachers} teachers; < 1: the first arm needs "
                 "fewer parameters", fontsize=10)  # fmt: skip
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="best")
    return save(fig, path)


def _first_at_middle(rows) -> dict[str, dict]:
    """Per arm, its first trial (teacher 0, seed 0) at the middle of its budgets."""
    budgets = defaultdict(set)
    for r in rows:
        budgets[r["arm"]].add(int(r["budget"]))
    middle = {arm: sorted(b)[len(b) // 2] for arm, b in budgets.items()}
    return {
        r["arm"]: r
        for r in rows
        if int(r["budget"]) == middle[r["arm"]] and (r.get("teacher") or 0) == 0 and r["seed"] == 0
    }


def _fit_curve(r) -> tuple[np.ndarray, np.ndarray, str]:
    """A fit's checkpoints and its training loss there, or its validation loss where the trial
    recorded no training loss; a loss at or below zero is left out (the axis is logarithmic)."""
    kind, values = "training", r.get("curve_train_loss") or []
    if not any(v is not None for v in values):
        kind, values = "validation", r.get("curve_val_loss") or []
    y = np.array([np.nan if v is None else v for v in values], dtype=float)
    y[~(y > 0)] = np.nan
    return np.asarray(r["curve_step"], dtype=float), y, kind


def _fit_panel(ax, picked, arms, color, title) -> None:
    """One optimizer's fits, one line per arm, each marked where its last doubling started: a
    fit stops at the first doubling that gains less than the tolerance, so the certificate
    compares the loss there with the loss at the curve's end."""
    kinds, marked = set(), False
    for arm in arms:
        r = picked.get(arm)
        if r is None or r["status"] != "done" or not len(r.get("curve_step") or []):
            continue
        steps, y, kind = _fit_curve(r)
        kinds.add(kind)
        ax.plot(steps, y, color=color[arm], label=f"{arm}, B = {int(r['budget']):,}")
        half = steps[-1] / 2
        ax.plot([half], [np.interp(half, steps, y)], "o", color=color[arm], ms=4)
        marked = True
    if marked:
        ax.plot([], [], "o", color="0.4", ms=4, label="certificate: the last doubling starts here")
        ax.legend(fontsize=8)
    ax.set_yscale("log")
    _plain_log(ax, "y")
    if kinds == {"validation"}:
        ylabel = "validation loss (MSE)"
    elif len(kinds) > 1:
        ylabel = "training loss (MSE; validation where none was recorded)"
    else:
        ylabel = "training loss (MSE)"
    ax.set(xlabel="iteration (iterations)", ylabel=ylabel)
    ax.set_title(title if marked else f"{title}: no finished fit", fontsize=10)


def fit_curves(rows, referee, path):
    """Loss against iterations of second-order fits, one panel per optimizer (the sweep's, from
    its best restart, and the referee's, from the first restart's initialization), one line per
    arm at its middle budget (teacher 0, seed 0). The axis is logarithmic, so a reader sees
    where a fit flattens: the plateau the convergence certificate measures."""
    main = _first_at_middle(rows)
    degree = {r["arm"]: r["degree"] for r in rows}
    arms = sorted(degree, key=lambda a: (degree[a] is None, degree[a] or 0.0, a))
    panels = [(main, f"{rows[0]['optimizer']}: the sweep's fits (best restart)")]
    if referee:
        at = {arm: int(r["budget"]) for arm, r in main.items()}
        picked = {r["arm"]: r for r in referee if at.get(r["arm"]) == int(r["budget"])}
        panels.append((picked, f"{referee[0]['optimizer']}: referee (restart 0's start)"))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False, layout="constrained"
    )
    color = arm_colors(arms)
    for ax, (picked, title) in zip(axes[0], panels, strict=True):
        _fit_panel(ax, picked, arms, color, title)
    fig.suptitle("teacher 0, seed 0, each arm at its middle budget", fontsize=10)
    return save(fig, path)

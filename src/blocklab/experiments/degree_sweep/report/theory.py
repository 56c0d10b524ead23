"""The degree sweep's theory beside its measurement (report.md's "Question" and "Theory beside
measurement"): h(d) per arm, seed 000's degree proxy per budget, and the ranking h predicts
beside the measured one, every number from `blocklab.theory`."""

import math

from blocklab.formatting import markdown_table
from blocklab.theory import (
    degree_proxy_log10,
    h,
    layer_degrees,
    layers_at_budget,
    optimal_degree,
)


def _order(arms, values):
    # "a > b = c": equal predicted scores (h(2) == h(4) exactly) are shown as ties, not an order.
    text = arms[0]
    for i in range(1, len(arms)):
        tie = math.isclose(values[i - 1], values[i], rel_tol=1e-12)
        text += (" = " if tie else " > ") + arms[i]
    return text


def question():
    return (
        "Seed 000 asks: at a fixed parameter budget B, which polynomial degree d of a building "
        "block is most expressive? A degree-d layer costs d N_dx parameters (eq. 4), so B buys "
        "B / (d N_dx) layers and a network polynomial of degree (d^(1/d))^(B / N_dx) (eq. 17). "
        f"That is largest where h(d) = ln d / d is (eq. 5): at d = e = {optimal_degree():.4f}, "
        f"so d = 3 among integers (h(3) = {h(3):.4f} > h(2) = h(4) = {h(2):.4f}). Each arm below "
        "is trained at the same block budget over several seeds: integer and fractional "
        "degrees, mixed stacks (per-layer degrees in the label, their average as the degree) and "
        "an mlp control; the verdicts state which differences the seeds support."
    )


def theory_section(summaries, rankings):
    lines = [
        "## Theory beside measurement",
        "",
        "h of each arm (for a mixed stack [d_1, ..., d_L]: sum ln d_i / sum d_i, the "
        "per-parameter log-degree of eq. 16-17, which is not h of the average degree):",
        "",
    ]
    arms = {s.arm: s.degree for s in summaries if s.degree is not None}
    body = [
        (
            arm,
            ", ".join(f"{x:g}" for x in layer_degrees(arm, d)),
            f"{d:.4g}",
            f"{h(layer_degrees(arm, d)):.5f}",
        )
        for arm, d in sorted(arms.items(), key=lambda kv: (kv[1], kv[0]))
    ]
    lines += markdown_table(("arm", "layer degrees", "degree", "h"), body)
    lines += [
        "",
        "Degree proxy of seed 000 eq. 17 at each budget, with N_dx = width^2 at the "
        "width the arm ran at; layers B / (d N_dx) of eq. 4 beside the depth it ran at:",
        "",
    ]
    body = {}  # tasks that ran an arm at the same shape share a line
    for s in summaries:
        if s.degree is not None and s.width > 0:
            n_dx = s.width**2
            body.setdefault(
                (str(s.budget), s.arm, str(s.width), str(s.depth)),
                (
                    f"{layers_at_budget(s.degree, s.budget, n_dx):.3g}",
                    f"{degree_proxy_log10(layer_degrees(s.arm, s.degree), s.budget, n_dx):.4g}",
                ),
            )
    lines += markdown_table(
        ("budget", "arm", "width", "depth", "layers (eq. 4)", "log10 degree (eq. 17)"),
        [k + v for k, v in body.items()],
    )
    lines += [
        "",
        "Ranking predicted by h (best first) and measured by mean test metric, with "
        "Spearman's rank correlation (rho > 0: the measurement follows the theory):",
        "",
    ]
    for r in rankings:
        h_of = dict(zip(r.arms, r.h, strict=True))
        rho = (
            f"rho = {r.rho:.3g} over {len(r.arms)} arms"
            if math.isfinite(r.rho)
            else "no rho: one arm ran at this budget"
            if len(r.arms) == 1
            else f"rho undefined ({len(r.arms)} arms: too few, or a constant ranking)"
        )
        lines.append(
            f"- {r.task}, budget {r.budget}: predicted "
            f"{_order(r.predicted, [h_of[a] for a in r.predicted])}; "
            f"measured {' > '.join(r.measured)}; {rho}"
        )
    return lines

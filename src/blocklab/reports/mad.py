"""Report of `blocklab mad`: every sequence block at one parameter budget on the MAD and MQAR token
tasks, per difficulty level, with intervals, an aggregate per block, paired tests, the degree of
each block beside its aggregate, and the published findings the run can test."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from blocklab.analysis import suite
from blocklab.analysis.summary import summarize
from blocklab.formatting import markdown_table, number, plain
from blocklab.reports import Findings, Report, Status, markdown
from blocklab.reports.figures import save_figure
from blocklab.reports.markdown import require_finished

QUESTION = (
    "Seed 000 says attention is a degree-3 block and that degree 3 is the most expressive per "
    "parameter. Does a sequence block's degree predict its recall, copying, compression and "
    "memorization at an equal parameter budget? Every causal token-mixing block in one backbone, "
    "its width set by the budget, its learning rate chosen per task on validation, over seeds, "
    "on mad-lab's tasks (Poli et al. 2024) and zoology's MQAR (Arora et al. 2023)."
)

MAD = "Poli et al. 2024 (mad-lab)"
ZOOLOGY = "Arora et al. 2023 (zoology)"
ATTENTION, LINEAR = "softmax_attention", "linear_attention"
GATED_CLAIM = (
    "gated convolutions (H3, Hyena) need a width growing with the key-value pairs to solve MQAR, "
    "attention does not"
)


def analyze(cfg, trials) -> Findings:
    summaries = summarize(trials.rows, ("block", "task", "level"))
    return Findings(trials.rows, summaries, published(cfg, trials), trials.failed)


def _block(trials, name: str) -> str | None:
    """The first block of the run that is the registered block `name` (any options)."""
    return next((b for b in trials.degrees if b.split("(")[0] == name), None)


def _accuracies(trials, block: str, task: str, level: int) -> list[float]:
    return suite.cells(trials.rows).get((block, task, level), [])


def _levels(trials, task: str) -> list[int]:
    return sorted({r["level"] for r in trials.rows if r["task"] == task})


def published(cfg, trials) -> list[dict[str, Any]]:
    """The papers' qualitative findings, each marked from the measured numbers: "agrees",
    "disagrees" or "not tested here" (a block, task or ladder the run did not include)."""
    out = []
    att, lin = _block(trials, ATTENTION), _block(trials, LINEAR)

    claim = "attention solves in-context recall at every difficulty level"
    levels = _levels(trials, "icr")
    if att is None or not levels:
        out.append(_untested(claim, MAD, "softmax attention or icr not run"))
    else:
        means = [float(np.mean(_accuracies(trials, att, "icr", lv) or [np.nan])) for lv in levels]
        ok = all(m >= cfg.solved for m in means)
        evidence = ", ".join(f"level {lv}: {m:.3f}" for lv, m in zip(levels, means, strict=True))
        out.append(_claim(claim, MAD, ok, f"{att} icr accuracy {evidence} (solved: >= "
                                          f"{cfg.solved:g})"))  # fmt: skip

    levels = _levels(trials, "mqar")
    claim = "linear attention degrades on MQAR as key-value pairs grow at fixed width"
    if lin is None or len(levels) < 2:
        out.append(_untested(claim, ZOOLOGY, "linear attention or two MQAR levels not run"))
    else:
        easy, hard = (_accuracies(trials, lin, "mqar", lv) for lv in (levels[0], levels[-1]))
        p = suite.one_sided_lower(hard, easy)
        evidence = (
            f"{lin} MQAR accuracy {_mean(easy)} at level {levels[0]} vs {_mean(hard)} at level "
            f"{levels[-1]}, one-sided Welch p = {number(p, 3)}"
        )
        out.append(_tested(claim, ZOOLOGY, p, cfg.alpha, evidence))

    claim = "attention beats linear attention on MQAR at equal size"
    if att is None or lin is None or not levels:
        out.append(_untested(claim, ZOOLOGY, "softmax or linear attention, or MQAR, not run"))
    else:
        hard = levels[-1]
        a, b = _accuracies(trials, att, "mqar", hard), _accuracies(trials, lin, "mqar", hard)
        p = suite.one_sided_lower(b, a)
        evidence = (
            f"hardest level {hard}: {att} {_mean(a)} vs {lin} {_mean(b)}, one-sided Welch "
            f"p = {number(p, 3)}"
        )
        out.append(_tested(claim, ZOOLOGY, p, cfg.alpha, evidence))

    out.append(_untested(GATED_CLAIM, ZOOLOGY, "the width sweep did not run (--sweep-width)"))
    out.append(
        _untested(
            "the MAD score predicts which architectures reach lower compute-optimal perplexity",
            MAD,
            "the suite trains no language models at scale",
        )
    )
    return out


def _mean(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}"


def _claim(claim: str, source: str, agrees: bool, evidence: str) -> dict[str, Any]:
    status = "agrees" if agrees else "disagrees"
    return {"claim": claim, "source": source, "status": status, "evidence": evidence}


def _tested(claim: str, source: str, p: float | None, alpha: float, evidence: str):
    """A claim read from a one-sided test: "agrees" at p < alpha, else "disagrees"; a test that
    could not run (p None: fewer than 2 seeds on a side) tests nothing, and says so."""
    if p is None:
        return _untested(claim, source, f"the test needs 2 seeds or more on each side: {evidence}")
    return _claim(claim, source, p < alpha, evidence)


def _untested(claim: str, source: str, why: str) -> dict[str, Any]:
    return {"claim": claim, "source": source, "status": "not tested here", "evidence": why}


def heat_map(results: list[dict[str, Any]], path: Path) -> str:
    """Blocks x tasks, each cell the mean accuracy over the task's levels."""
    blocks = sorted({r["block"] for r in results})
    tasks = list(dict.fromkeys(r["task"] for r in results))
    grid = np.full((len(blocks), len(tasks)), np.nan)
    for i, b in enumerate(blocks):
        for j, t in enumerate(tasks):
            means = [r["mean"] for r in results if (r["block"], r["task"]) == (b, t) and r["n"]]
            if means:
                grid[i, j] = np.mean(means)
    fig, ax = plt.subplots(figsize=(1.2 * len(tasks) + 3, 0.5 * len(blocks) + 1.6))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for i in range(len(blocks)):
        for j in range(len(tasks)):
            if np.isfinite(grid[i, j]):
                color = "black" if grid[i, j] > 0.6 else "white"
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=8, c=color)
    ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right")
    ax.set_yticks(range(len(blocks)), blocks)
    ax.set_xlabel("task (mean over its difficulty levels)")
    ax.set_ylabel("block")
    fig.colorbar(im, ax=ax, label="test accuracy\n(fraction correct)")
    return save_figure(fig, path)


def curves(results: list[dict[str, Any]], ladders: dict[str, list[str]], path: Path) -> str:
    """Accuracy against difficulty level, one panel per task, one line per block, with each
    mean's 95% interval (clipped to [0, 1])."""
    tasks = list(dict.fromkeys(r["task"] for r in results))
    cols = min(4, len(tasks))
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.3 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks, strict=False):
        for block in sorted({r["block"] for r in results}):
            group = sorted(
                (r for r in results if (r["block"], r["task"]) == (block, task) and r["n"]),
                key=lambda r: r["level"],
            )
            xs = [r["level"] for r in group]
            ys = np.array([r["mean"] for r in group])
            lo = np.array([r["ci_low"] if r["n"] > 1 else r["mean"] for r in group])
            hi = np.array([r["ci_high"] if r["n"] > 1 else r["mean"] for r in group])
            ax.errorbar(xs, ys, yerr=[ys - lo, hi - ys], marker="o", capsize=3, label=block)
        ax.set_xticks(range(len(ladders[task])), ladders[task], fontsize=7)
        ax.set_title(task)
        ax.set_xlabel("difficulty level")
        ax.set_ylabel("test accuracy (fraction correct)")
        ax.set_ylim(-0.02, 1.02)
    for ax in list(axes.flat)[len(tasks) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    return save_figure(fig, path)


def write(out_dir, cfg, trials) -> Report:
    from blocklab.experiments.mad import ladder

    if cfg.mode == "width-sweep":
        from blocklab.reports import mad_width

        return mad_width.write(out_dir, cfg, trials)
    require_finished(trials)
    result = analyze(cfg, trials)
    out = Path(out_dir)
    cell_results = suite.results(trials.rows)
    scores = suite.scores(trials.rows, trials.degrees)
    corr = suite.correlation(scores)
    corr_h = suite.correlation(scores, against="h(degree)")
    pairs = suite.paired(trials.rows, cfg.alpha)
    rungs = {t: [_rung(o) for o in ladder(t, cfg.levels)] for t in cfg.tasks}
    figures = [heat_map(cell_results, out / "mad_heat_map.png")]
    figures.append(curves(cell_results, rungs, out / "mad_accuracy_vs_level.png"))
    results = (
        ["block", "task", "level", "width", "lr", "test accuracy (mean ± std [95% CI])", "seeds"],
        [
            [r["block"], r["task"], f"{r['level']} ({rungs[r['task']][r['level']]})"]
            + [str(_width(trials, r)), _lr(trials, r)]
            + [_spread(r), str(r["n"]) + (f" ({r['diverged']} diverged)" if r["diverged"] else "")]
            for r in cell_results
        ],
    )
    notes = [_score_table(scores), _correlations(corr, corr_h), _paired_table(pairs, cfg.alpha)]
    notes.append(
        f"Aggregate: the mean over a block's (task, level) cells of its mean accuracy over seeds; "
        f"95% percentile bootstrap over seeds within each cell ({suite.BOOTSTRAP} draws). Cell "
        f"intervals: Student-t over seeds, clipped to [0, 1]. Degree: the block's "
        f"`nominal_degree` (attention's q k v counts 3, as seed 000 reads it; softmax and "
        f"feature maps as the identity). Published findings: 'agrees' needs the stated test "
        f"at level {cfg.alpha:g}."
    )
    notes.append(_edges(cfg, trials.lr_choice))
    timing = suite.trial_time(trials.rows, trials.lr_choice)
    notes.append(time_note(timing))
    notes += markdown.failures(result)
    extra = {
        "results": [{k: r[k] for k in ("block", "task", "level", "mean", "ci_low", "ci_high", "n")}
                    for r in cell_results],
        "scores": {b: {k: s[k] for k in ("score", "ci_low", "ci_high", "degree")}
                   for b, s in scores.items()},
        "correlation": {k: corr[k] for k in ("rho", "p", "against")},
        "correlation_h": {k: corr_h[k] for k in ("rho", "p", "against")},
        "paired": pairs,
        "published": result.findings,
        "lr_choice": trials.lr_choice,
        "trial_time": timing,
    }  # fmt: skip
    findings = (
        ["source", "claim", "status", "evidence"],
        [[f["source"], f["claim"], f["status"], f["evidence"]] for f in result.findings],
    )
    path = markdown.write(
        out,
        cfg,
        title="The token-manipulation suite: sequence blocks at one budget",
        question=QUESTION,
        findings=findings,
        results=results,
        figures=figures,
        notes=notes,
    )
    lines = [
        f"{b}: score {number(s['score'], 3)} [{number(s['ci_low'], 3)}, "
        f"{number(s['ci_high'], 3)}], degree {s['degree']}"
        for b, s in sorted(scores.items(), key=lambda kv: -(kv[1]["score"] or -1))
    ]
    lines.append(_correlations(corr, corr_h))
    lines += [f"{f['status']}: {f['claim']} ({f['source']}): {f['evidence']}"
              for f in result.findings]  # fmt: skip
    payload = {**extra, "summaries": result.summaries, "failed": result.failed}
    best = max(scores.items(), key=lambda kv: kv[1]["score"] or -1, default=None)
    counts = Counter(f["status"] for f in result.findings)
    line = f"FINDINGS: best score {best[0]} ({number(best[1]['score'], 3)}); " if best else ""
    line += "published findings: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return Report(path, plain(payload), lines + markdown.failures(result), Status(False, line))


def _rung(options: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items()) or "defaults"


def _row_of(trials, r: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (x for x in trials.rows if (x["block"], x["task"], x["level"]) == (r["block"], r["task"],
                                                                              r["level"])),
        None,
    )  # fmt: skip


def _width(trials, r) -> int | str:
    row = _row_of(trials, r)
    return "-" if row is None else row["width"]


def _lr(trials, r) -> str:
    c = trials.lr_choice.get(f"{r['block']}/{r['task']}")
    return "-" if c is None else f"{c['lr']:.3g}" + (" (edge)" if c["at_edge"] else "")


def _edges(cfg, lr_choice: dict[str, dict[str, Any]]) -> str:
    """How many (block, task) rate choices stayed at an edge of what was tried: a choice there
    may be short of the block's best rate."""
    edge = sorted(key for key, c in lr_choice.items() if c["at_edge"])
    named = f": {', '.join(edge)}" if edge else ""
    return (
        f"Learning rates: {len(edge)} of {len(lr_choice)} (block, task) choices at an edge of the "
        f"rates tried (the grid {list(cfg.lr_grid)}, extended up to {cfg.lr_extend} time(s) past "
        f"an edge){named}."
    )


def time_note(t: dict[str, Any], by: str = "task") -> str:
    """Where the training time went, largest shares first (`suite.trial_time`)."""

    def shares(d: dict[str, float]) -> str:
        return ", ".join(f"{k} {v:.0f} s ({v / t['total']:.0%})" for k, v in d.items())

    if not t["total"]:
        return "Trial time: not recorded."
    return (
        f"Trial time (the trainings' own seconds, summed over processes): {t['total']:.0f} s in "
        f"{t['trainings']} trainings, {t['search']:.0f} s of it the rate search's other rates. "
        f"By block: {shares(t['by_block'])}. By {by}: {shares(t[f'by_{by}'])}."
    )


def _spread(r: dict[str, Any]) -> str:
    if not r["n"]:
        return "-"
    if r["n"] == 1:
        return f"{r['mean']:.3f}"
    return f"{r['mean']:.3f} ± {r['std']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"


def _score_table(scores: dict[str, dict[str, Any]]) -> str:
    body = [
        [b, number(s["score"], 3), f"[{number(s['ci_low'], 3)}, {number(s['ci_high'], 3)}]"]
        + [str(s["degree"]), str(s["cells"])]
        for b, s in sorted(scores.items(), key=lambda kv: -(kv[1]["score"] or -1))
    ]
    table = markdown_table(["block", "score", "95% bootstrap CI", "degree", "cells"], body)
    return "Aggregate score per block:\n\n  " + "\n  ".join(table)


def _correlations(corr: dict[str, Any], corr_h: dict[str, Any]) -> str:
    def one(c):
        if c["rho"] is None:
            return f"against {c['against']}: not computable ({c['n']} blocks with a degree)"
        return f"against {c['against']}: rho = {c['rho']:.3f}, p = {c['p']:.3g} ({c['n']} blocks)"

    return f"Degree vs aggregate score ({suite.CORRELATION}): {one(corr)}; {one(corr_h)}"


def _paired_table(pairs: list[dict[str, Any]], alpha: float) -> str:
    body = [
        [p["a"], p["b"], str(p["cells"]), number(p["difference"], 3), number(p["p"], 3)]
        + [number(p["p_holm"], 3), p["better"] or "no significant difference"]
        for p in pairs
    ]
    header = ["block a", "block b", "cells", "mean a - b", "p", "Holm p", f"better (at {alpha:g})"]
    return f"Paired tests ({suite.PAIRED}):\n\n  " + "\n  ".join(markdown_table(header, body))

"""One colour per arm on every figure of every run: each figure that draws arms is rendered
twice, from two runs whose arm sets and orders differ, and the colours are read off its
matplotlib artists; an arm's colour is `figures.arm_color(label)` in both. A planted figure that
colours its arms by their order fails the same check."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from types import SimpleNamespace

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_hex

from blocklab.experiments.collapse import report as collapse
from blocklab.experiments.degree_sweep.report import curves, plots
from blocklab.experiments.mad.report import suite, width_sweep
from blocklab.experiments.needle import report as needle
from blocklab.experiments.sanford_match import report as sanford_match
from blocklab.experiments.seprank_degree import report as seprank_degree
from blocklab.reports import figures
from blocklab.reports.figures import ARM_COLORS, OTHER_COLORS, arm_color
from blocklab.theory import CONTROL_LABEL

DEGREES = {"d=2": 2.0, "d=3": 3.0, "d=4": 4.0, "d=e": 2.718281828, CONTROL_LABEL: 3.0}
DEGREES["mix[3,2,3]"] = 8 / 3


def degree(arm: str) -> float | None:
    return DEGREES.get(arm)


def read_colours(draw: Callable[[list[str]], None], arms: list[str], monkeypatch) -> dict:
    """{arm: the colours its legend entries are drawn in}, over every figure `draw(arms)`
    saves: each labelled artist of each axes (a line, or an error bar's line) whose label
    starts with an arm's (the longest such arm: "d=3 (control)" before "d=3")."""
    saved = []
    close = plt.close

    def keep(fig=None):
        saved.append(fig)
        close(fig)

    monkeypatch.setattr(plt, "close", keep)
    draw(arms)
    monkeypatch.setattr(plt, "close", close)
    found: dict[str, set[str]] = {}
    for fig in saved:
        for ax in fig.axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                named = [a for a in arms if label.startswith(a)]
                if named:
                    line = handle[0] if isinstance(handle, tuple) else handle
                    found.setdefault(max(named, key=len), set()).add(to_hex(line.get_color()))
    assert set(found) == set(arms), f"arms drawn {sorted(found)}, expected {sorted(arms)}"
    return found


def one_colour_per_arm(draw, first: list[str], second: list[str], monkeypatch) -> list[str]:
    """What is wrong with `draw`'s colours over two runs (arm sets `first` and `second`): an arm
    drawn in two colours, or in another colour in one run than in the other."""
    a = read_colours(draw, first, monkeypatch)
    b = read_colours(draw, second, monkeypatch)
    wrong = [f"{arm}: {sorted(c)} in one run" for arm, c in {**a, **b}.items() if len(c) > 1]
    wrong += [f"{arm}: {a[arm]} then {b[arm]}" for arm in set(a) & set(b) if a[arm] != b[arm]]
    return wrong


# --- the figures, each from planted inputs for any arms -----------------------------------------


def learning_curves(arms, tmp_path):
    rows = [
        dict(
            task="teacher",
            budget=100,
            arm=arm,
            degree=degree(arm),
            seed=0,
            status="done",
            curve_step=[0, 16, 32],
            curve_val_loss=[1.0, 0.5, 0.2],
            threshold=0.22,
            optimizer="adam",
        )
        for arm in arms
    ]
    plots.learning_curves(rows, tmp_path / "learning_curves.png")


def ranking_vs_theory(arms, tmp_path):
    summaries = [
        SimpleNamespace(
            task="teacher",
            budget=100,
            arm=arm,
            degree=degree(arm),
            mean=0.1 + i,
            higher_is_better=False,
        )
        for i, arm in enumerate(arms)
    ]
    plots.ranking_vs_theory(summaries, tmp_path / "ranking_vs_theory.png")


def scaling_curves(arms, tmp_path):
    cell = {"block_params": 100, "gmean": 0.2, "g_low": 0.1, "g_high": 0.3}
    stats = {arm: {100: cell, 200: {**cell, "block_params": 200}} for arm in arms}
    capacity = SimpleNamespace(
        stats=stats, model=None, degrees={a: degree(a) for a in arms}, fit=SimpleNamespace(fits={})
    )
    curves.scaling_curves(capacity, tmp_path / "scaling.png")


def fit_curves(arms, tmp_path):
    rows = [
        dict(
            arm=arm,
            budget=100,
            teacher=0,
            seed=0,
            status="done",
            degree=degree(arm),
            curve_step=[1, 2, 4],
            curve_train_loss=[1.0, 0.5, 0.2],
            optimizer="lm",
        )
        for arm in arms
    ]
    curves.fit_curves(rows, [], tmp_path / "fit_curves.png")


def seprank_degree_plots(arms, tmp_path):
    rank = {"min": 3, "mean": 3.0, "max": 3}
    summaries = [
        dict(
            arm=arm.removeprefix("d="),
            depth=p,
            polynomial=True,
            predicted=3,
            exact=rank,
            float=rank,
            exact_saturated=False,
            float_saturated=False,
            block_params=10 * p,
        )
        for arm in arms
        for p in (1, 2)
    ]
    seprank_degree._degree_plot(summaries, SimpleNamespace(templates=64), tmp_path / "d.png")
    seprank_degree._budget_plot(summaries, tmp_path / "b.png")


def mad_curves(arms, tmp_path):
    results = [
        dict(task="icr", block=arm, level=level, n=2, mean=0.5, ci_low=0.4, ci_high=0.6)
        for arm in arms
        for level in (0, 1)
    ]
    suite.curves(results, {"icr": ["easy", "hard"]}, tmp_path / "mad.png")


def mad_width_sweep(arms, tmp_path):
    table = [
        dict(seq_len=16, pairs=4, block=arm, width=w, n=2, mean=0.5, ci_low=0.4, ci_high=0.6)
        for arm in arms
        for w in (8, 16)
    ]
    width_sweep.figure(table, 0.9, tmp_path / "widths.png")


def needle_plot(arms, tmp_path):
    random = [
        dict(model=arm, tau1=tau1, seq_len=t, fraction=0.5, lo=0.4, hi=0.6)
        for arm in arms
        for tau1 in (2.0, 3.0)
        for t in (16, 32)
    ]
    summaries = [
        dict(model=arm, seq_len=t, n=2, mean=0.5, lo=0.4, hi=0.6) for arm in arms for t in (16, 32)
    ]
    needle._plot(SimpleNamespace(random=random, summaries=summaries), tmp_path / "needle.png")


def collapse_curves(arms, tmp_path):
    summaries = [
        dict(
            norm="composite",
            stage=stage,
            variant=arm,
            layer=layer,
            n=2,
            mean=-1.0,
            lo=-1.2,
            hi=-0.8,
        )
        for arm in arms
        for stage in ("init", "trained")
        for layer in (1, 2)
    ]
    collapse.curves_figure(SimpleNamespace(summaries=summaries, bound={}), tmp_path / "c.png")


def sanford_lines(arms, tmp_path):
    summaries = [
        dict(model=arm, width=w, seq_len=n, task="match3", n=2, mean=0.5, lo=0.4, hi=0.6)
        for arm in arms
        for w in (6, 12)
        for n in (16, 32)
    ]
    cfg = SimpleNamespace(seq_len=(16, 32), solved=0.9)
    sanford_match._accuracy_plot(cfg, summaries, tmp_path / "match.png")


DEGREE_ARMS = (["d=2", "d=3", "mlp"], ["mlp", "d=e", "d=3", CONTROL_LABEL, "my_block"])
BLOCK_ARMS = (
    ["softmax_attention", "hyena", "h3"],
    ["hyena", "linear_attention", "my_block", "softmax_attention"],
)
FIGURES = {
    "degree sweep: learning curves": (learning_curves, *DEGREE_ARMS),
    "degree sweep: ranking vs theory": (
        ranking_vs_theory,
        ["d=2", "d=3", "d=4"],
        ["d=e", "d=3", "mix[3,2,3]"],
    ),
    "degree sweep: scaling": (scaling_curves, *DEGREE_ARMS),
    "degree sweep: fit curves": (fit_curves, *DEGREE_ARMS),
    "seprank degree": (seprank_degree_plots, ["d=2", "d=3"], ["d=e", "d=3", "d=2.5"]),
    "mad: curves": (mad_curves, *BLOCK_ARMS),
    "mad: width sweep": (mad_width_sweep, *BLOCK_ARMS),
    "needle": (needle_plot, ["softmax", "linear"], ["linearized", "softmax", "linear"]),
    "collapse": (collapse_curves, ["pure", "skip", "mlp"], ["norm", "mlp", "skip+norm", "pure"]),
    "sanford": (sanford_lines, ["standard", "tensor"], ["tensor", "other", "standard"]),
}


@pytest.mark.parametrize("name", FIGURES)
def test_an_arm_has_one_colour_in_every_figure_and_run(name, tmp_path, monkeypatch):
    figure, first, second = FIGURES[name]
    draw = lambda arms: figure(arms, tmp_path)  # noqa: E731
    assert one_colour_per_arm(draw, first, second, monkeypatch) == []
    drawn = read_colours(draw, second, monkeypatch)
    assert all(colours == {arm_color(arm)} for arm, colours in drawn.items()), drawn


def test_a_figure_that_colours_its_arms_by_order_fails(tmp_path, monkeypatch):
    """Planted: the colour cycle in the arms' sorted order, as the figures drew them before."""

    def by_order(arms, path=tmp_path / "o.png"):
        fig, ax = plt.subplots()
        for i, arm in enumerate(sorted(arms)):
            ax.plot([1, 2], [i, i + 1], color=f"C{i}", label=arm)
        ax.set(xlabel="step (steps)", ylabel="loss (MSE)")
        figures.save_figure(fig, path)

    wrong = one_colour_per_arm(by_order, *DEGREE_ARMS, monkeypatch)
    assert any(w.startswith("d=3:") for w in wrong) and any(w.startswith("mlp:") for w in wrong)


def test_the_labs_arms_have_fixed_distinct_colours_and_others_a_stable_hash():
    lab = ["d=2", "d=3", "d=4", "d=e", CONTROL_LABEL, "mlp"]
    mad = ["softmax_attention", "linear_attention", "linearized_attention", "tensor_attention"]
    mad += ["hyena", "h3", "quadratic_mixing", "poly_attention", "mixer"]
    together = [arm_color(a) for a in lab + mad]
    assert len(set(together)) == len(together)  # any of them may share a figure
    assert not set(OTHER_COLORS) & set(ARM_COLORS.values())  # a hashed arm is none of theirs
    # one block, one colour, under each experiment's name for it
    assert arm_color("softmax") == arm_color("standard") == arm_color("softmax_attention")
    assert arm_color("fully connected") == arm_color("mlp")
    # the same in every process, whatever Python's string hashing salt
    labels = ["my_block", "d=5", "mix[3,2,3]", "cubic", "softmax_attention(heads=2)", "skip+norm"]
    code = "from blocklab.reports.figures import arm_color as c; "
    code += f"print([c(a) for a in {labels}])"
    said = set()
    for salt in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": salt}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        said.add(run.stdout)
    assert said == {f"{[arm_color(a) for a in labels]}\n"}
    assert all(arm_color(a) in OTHER_COLORS for a in labels)

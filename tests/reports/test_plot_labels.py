"""The rule `conftest` applies to every saved figure: a label on each axis, a unit on each
numeric one."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

import blocklab.reports  # noqa: F401  (the Agg backend every report draws with)
from _plots import check_labels, label_problems


@pytest.fixture
def fig_ax():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [0.5, 0.4, 0.3])
    yield fig, ax
    plt.close(fig)


def test_an_unlabelled_numeric_axis_is_refused(fig_ax, tmp_path):
    fig, ax = fig_ax
    ax.set_xlabel("optimizer step (steps)")
    with pytest.raises(AssertionError, match=r"plot\.png.*y axis has no label"):
        check_labels(fig, tmp_path / "plot.png")


def test_a_label_without_a_unit_is_refused(fig_ax):
    fig, ax = fig_ax
    ax.set(xlabel="optimizer step (steps)", ylabel="test loss")
    (problem,) = label_problems(fig)
    assert "'test loss'" in problem and "unit" in problem


def test_labels_with_units_pass(fig_ax):
    fig, ax = fig_ax
    ax.set(xlabel="optimizer step (steps)", ylabel="test loss (MSE)")
    ax.set_yscale("log")  # a log axis still has the unit of its values
    assert label_problems(fig) == []


def test_a_categorical_axis_needs_a_label_but_no_unit(fig_ax):
    fig, ax = fig_ax
    ax.set_xticks([1, 2, 3], ["mlp", "d=2", "d=3"])
    ax.set_ylabel("test loss (MSE)")
    assert "x axis has no label" in label_problems(fig)[0]
    ax.set_xlabel("arm")
    assert label_problems(fig) == []


def test_hidden_axes_are_skipped_and_a_colorbar_needs_its_unit():
    fig, (ax, off) = plt.subplots(1, 2)
    off.axis("off")
    im = ax.imshow(np.eye(2))
    ax.set_xticks([0, 1], ["icr", "mqar"])
    ax.set_yticks([0, 1], ["mlp", "attention"])
    ax.set(xlabel="task", ylabel="block")
    bar = fig.colorbar(im, ax=ax)
    assert [p for p in label_problems(fig) if "colorbar" in p]
    bar.set_label("test accuracy")
    assert "'test accuracy'" in label_problems(fig)[0]
    bar.set_label("test accuracy (fraction correct)")
    assert label_problems(fig) == []
    plt.close(fig)


def test_the_suite_checks_every_saved_figure(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2])
    with pytest.raises(AssertionError, match="unlabelled.png"):
        fig.savefig(tmp_path / "unlabelled.png")
    assert not (tmp_path / "unlabelled.png").exists()
    plt.close(fig)


def test_ticks_placed_by_hand_without_names_are_still_numeric(fig_ax):
    fig, ax = fig_ax
    ax.set_xticks([1, 2, 3])  # positions only: the numbers are still drawn
    ax.set(xlabel="depth L", ylabel="test loss (MSE)")
    assert "'depth L' states no unit" in label_problems(fig)[0]

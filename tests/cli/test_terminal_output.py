"""What a run prints in a terminal: at most 100 columns, long lines wrapped under their text, and
the status line last."""

from __future__ import annotations

from blocklab.cli import main
from blocklab.formatting import wrapped


def test_long_lines_wrap_under_their_text_and_short_ones_stay():
    bullet = "- FAILED: plateau: " + "word " * 40
    out = wrapped(f"short\n{bullet}", width=40).splitlines()
    assert out[0] == "short" and all(len(line) <= 40 for line in out)
    assert out[1].startswith("- FAILED") and all(line.startswith("  w") for line in out[2:])
    assert wrapped("x" * 120, width=100) == "x" * 120  # a word longer than the line stays whole


def test_a_degree_sweep_prints_in_100_columns_and_ends_in_its_status(tmp_path, capsys):
    args = ["degree-sweep", "--out", str(tmp_path), "--quiet", "--workers", "1"]
    args += ["--task-option", "n_in=2", "--task-option", "n_train=64", "--task-option", "n_val=32"]
    args += ["--task-option", "n_test=32", "--degrees", "2", "3", "--baselines", "--budgets", "24"]
    args += ["--width", "2", "--seeds", "2", "--lr-grid", "0.01", "--steps", "4"]
    args += ["--batch-size", "16", "--eval-points", "2", "--optimizer", "adam"]
    assert main(args) == 0
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    assert max(map(len, lines)) <= 100
    # the status line, last, wrapped at 100 columns where it is longer
    start = max(i for i, line in enumerate(lines) if line.startswith("NO VERDICT: "))
    status = " ".join(lines[start:])
    assert "to change: " in status and status.endswith(lines[-1])
    assert not any(line.startswith("verdict:") for line in lines)  # the status line says it

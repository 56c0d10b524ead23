"""The rule of `benchmarks/bench_compare.py` on planted figures (nothing is timed): a row fails
where its ratio falls below 1 by more than its run-to-run spread. Its error rates are simulated at
the script's default size (3 rounds) with figures that move as a shared machine's do: a few
percent, and one run in 20 slowed by 30%."""

from __future__ import annotations

import contextlib

import numpy as np

from _scripts import load


def _load():
    return load("bench_compare")


def _rounds(values: list[float]) -> list[dict[str, float]]:
    return [{"mlp 256 ensemble": v} for v in values]


def test_a_planted_slowdown_fails_and_no_change_passes():
    cmp = _load()
    base = _rounds([224.0, 225.0, 221.0])
    [slow] = cmp.compare(_rounds([89.0, 78.0, 92.0]), base)
    assert slow["slower"] and slow["ratio"] < 0.45
    [same] = cmp.compare(_rounds([223.0, 226.0, 219.0]), base)
    assert not same["slower"]
    [fast] = cmp.compare(_rounds([300.0, 310.0, 305.0]), base)
    assert not fast["slower"] and fast["ratio"] > 1
    # one round has no spread to judge by: nothing fails
    [once] = cmp.compare(_rounds([89.0]), _rounds([224.0]))
    assert not once["slower"] and once["spread"] == 0


def test_every_speed_of_a_bench_result_is_a_row():
    cmp = _load()
    result = {
        "widths": [{"width": 32, "ensemble_steps_per_s": 3.0, "sequential_steps_per_s": 2.0,
                    "speedup": 1.5}],
        "lm_widths": [{"width": 16, "ensemble": 4.0, "sequential": 2.0, "speedup": 2.0}],
        "fit_depths": [{"depth": 2, "sequential_fits_per_min": 5.0, "batched_fits_per_min": 6.0}],
        "fit_split": [{"params": 409, "residuals_ms": 1.0, "jacobian_ms": 1.0, "normal_ms": 2.0,
                       "solve_ms": 1.0}],
    }  # fmt: skip
    rows = cmp.rates(result)
    assert len(rows) == 3 + 3 + 2 + 1
    assert rows["split P=409 iterations/s"] == 200.0


def _simulated(cmp, ratio: float, rows: int, rng) -> float:
    """The share of rows failing when the side's true speed is `ratio` times the base's."""
    failed = 0
    for _ in range(rows):
        runs = []
        for true in (1.0, ratio):
            # a few percent, only ever slower than the machine's best, and now and then a slow spell
            noise = 1 - np.abs(rng.normal(0, 0.02, 3))
            spell = np.where(rng.random(3) < 0.05, 0.7, 1.0)
            runs.append(_rounds(list(100 * true * noise * spell)))
        [row] = cmp.compare(runs[1], runs[0])
        failed += row["slower"]
    return failed / rows


def test_its_error_rates_at_three_rounds():
    cmp = _load()
    rng = np.random.default_rng(0)
    # measured with this model: 0.6% of unchanged rows fail; a 20% loss is caught in 74% of rows
    # (a slow spell in either side's three runs widens the spread past it), a 50% loss in 97%
    assert _simulated(cmp, 1.0, 2000, rng) < 0.02
    assert _simulated(cmp, 0.8, 2000, rng) > 0.6
    assert _simulated(cmp, 0.5, 2000, rng) > 0.95  # the loss this guard was made for


def test_each_finished_run_is_saved_and_a_failed_bench_is_one_line(monkeypatch, tmp_path, capsys):
    cmp = _load()
    result = {"widths": [], "lm_widths": [], "fit_depths": [], "fit_split": []}
    monkeypatch.setattr(cmp, "bench", lambda src, threads, flags: result)
    saved = []
    sides = {"tree": tmp_path, "abc1234": tmp_path}
    cmp.run(
        sides,
        [1, 2],
        2,
        [],
        lambda r: saved.append(sum(len(v) for t in r.values() for v in t.values())),
    )
    assert saved == list(range(1, 9))  # 2 rounds x 2 thread counts x 2 sides, one save each

    def fails(src, threads, flags):
        raise RuntimeError("tree: bench exited 2: error: --widths takes positive integers")

    monkeypatch.setattr(cmp, "bench", fails)
    monkeypatch.setattr(cmp, "checkout", lambda commit: contextlib.nullcontext(tmp_path))
    assert cmp.main(["HEAD", "--rounds", "1", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: tree: bench exited 2") and "Traceback" not in "".join(err)

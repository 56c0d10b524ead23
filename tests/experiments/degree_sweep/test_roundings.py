"""`--roundings K`: each unit fitted again with every initial parameter moved by its last bit,
the way another machine's kernels move a fit's bits; the report states the status, each check
and each multiplier across the roundings, and a status that differs between them is not the
run's result."""

from __future__ import annotations

import dataclasses
import json

import torch
from test_capacity_fits import analyze, fit_rows
from test_ladder import TINY

from blocklab.cli import main
from blocklab.experiments.degree_sweep.analysis import capacity
from blocklab.experiments.degree_sweep.report.roundings import Across
from blocklab.fitting.network import rounded


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))


def test_a_rounding_moves_every_parameter_by_exactly_one_unit_in_its_last_place():
    base, moved, again, other = _net(), _net(), _net(), _net()
    rounded(moved, seed=0, rounding=1)
    rounded(again, seed=0, rounding=1)
    rounded(other, seed=0, rounding=2)
    ups = total = 0
    for b, m, a, o in zip(*(n.parameters() for n in (base, moved, again, other)), strict=True):
        up = torch.nextafter(b, b.new_tensor(float("inf")))
        down = torch.nextafter(b, b.new_tensor(float("-inf")))
        assert bool(((m == up) | (m == down)).all())  # one ulp, every entry
        ups, total = ups + int((m == up).sum()), total + m.numel()
        assert torch.equal(m, a)  # the same (seed, rounding): the same bits
        assert not torch.equal(m, o)  # another rounding: other signs
    assert 0 < ups < total  # both directions drawn


def test_rounding_zero_keeps_a_trials_id_and_another_rounding_is_another_trial():
    from test_trial_ids import CASES, _spec

    for case in CASES:  # the ids stored before roundings existed
        spec = _spec(case["fields"])
        assert spec.id == case["id"] and "rounding" not in spec.config()
        other = dataclasses.replace(spec, rounding=1)
        assert other.id != spec.id and other.config()["rounding"] == 1
        assert "rounding=1" in other.describe()


def _result(outcome):
    result = analyze(fit_rows())
    return dataclasses.replace(
        result, decision=dataclasses.replace(result.decision, outcome=outcome)
    )


def test_a_status_that_differs_across_roundings_is_inconclusive_naming_each():
    run = _result(capacity.Outcome.VERDICT)
    same = Across(run, [_result(capacity.Outcome.VERDICT)])
    assert same.json()["statuses"] == ["VERDICT", "VERDICT"] and same.json()["same"]
    assert same.status(True, "VERDICT: x") == (True, "VERDICT: x; the same in 2 roundings")
    split = Across(run, [_result(capacity.Outcome.VERDICT), _result(capacity.Outcome.NO_VERDICT)])
    got = split.json()
    assert got["k"] == 3 and got["statuses"] == ["VERDICT", "VERDICT", "NO VERDICT"]
    assert got["same"] is False
    verdict, line = split.status(True, "VERDICT: x")
    assert not verdict and line.startswith("INCONCLUSIVE: the status differs across 3 roundings")
    assert "VERDICT, VERDICT, NO VERDICT" in line and line.endswith("the run's own: VERDICT: x")
    assert any("NOT the same" in s for s in split.lines())


def test_a_sweep_with_two_roundings_fits_each_unit_twice_and_reports_both(tmp_path, capsys):
    out = str(tmp_path / "r")
    tiny = [*TINY]
    tiny[tiny.index("--seeds") + 1] = "1"
    assert main(["degree-sweep", "--out", out, "--json", *tiny, "--roundings", "2"]) in (0, 1)
    payload = json.loads(capsys.readouterr().out)
    r = payload["roundings"]
    assert r["k"] == 2 and len(r["statuses"]) == 2 and isinstance(r["same"], bool)
    assert r["same"] == (r["statuses"][0] == r["statuses"][1])
    assert set(r["checks"][0]) == {c["name"] for c in payload["design_checks"]}
    # the run's own tables hold rounding 0 alone: one row per (arm, budget, seed)
    assert all(s["n_seeds"] == 1 for s in payload["summaries"])
    from blocklab import load_runs

    runs = load_runs(out)
    assert len(runs) == 2 * 2  # (arm, rounding): one stored ladder each

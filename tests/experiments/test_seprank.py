"""The separation-rank experiments: exact rank over F_p, tiny runs of both experiments (bounds,
resume, report), the d^p + 1 law, verdict logic, and `blocklab seprank` through the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from blocklab import theory
from blocklab.analysis import seprank
from blocklab.cli import main
from blocklab.experiments import _seprank as sr
from blocklab.experiments import seprank_degree as dg
from blocklab.experiments import seprank_depth_width as dw
from blocklab.experiments.seprank_degree import report as dg_report
from blocklab.experiments.seprank_depth_width import report as dw_report
from blocklab.measures import exact_rank as ex
from blocklab.measures import separation_rank
from blocklab.models import block_params, mixes_tokens, parse_arm
from blocklab.store import Store


def at(depth: int, width: int):
    """Seed 001's analyzed stack at a depth and width."""
    return dataclasses.replace(sr.ANALYZED, depth=depth, width=width)


P = ex.PRIME


def _product_mod_p(m: int, n: int, k: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    x = torch.from_numpy(g.integers(0, P, (m, k))).double()
    y = torch.from_numpy(g.integers(0, P, (k, n))).double()
    return ex._matmul(x, y).numpy()  # rank k (generic) over F_p


@pytest.mark.parametrize("m,n,k", [(40, 70, 9), (150, 100, 37), (130, 130, 130), (5, 7, 2)])
def test_rank_mod_p_finds_the_rank_of_a_product(m, n, k):
    a = _product_mod_p(m, n, k, seed=m)
    a[:, 5] = 0  # a zero column and a repeated row must not count
    a[4] = a[1]
    expect = min(k, m - 1, n - 1)  # generic: one row and one column lost
    assert ex.rank_mod_p(a) == ex.rank_mod_p(a, block=7) == expect


def test_rank_mod_p_of_exact_small_cases():
    assert ex.rank_mod_p(np.zeros((4, 6))) == 0
    assert ex.rank_mod_p(np.fliplr(np.eye(70))) == 70  # pivots found out of order
    # rank 1 over F_p, though its float rank is 2: 2 * 4194297 = P + 1 = 1 mod P
    assert ex.rank_mod_p(np.array([[1.0, 2.0], [4194297.0, 1.0]])) == 1


def _integer_weights(net, high=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randint(0, high, p.shape, generator=g).double())


@pytest.mark.parametrize(
    "block", ["linearized_attention(heads=2)", "linearized_attention(heads=2,causal=true)", "2"]
)
def test_exact_net_computes_the_float_network_mod_p(block):
    # heads = width = 2 gives head_dim 1 (scale 1/sqrt(1)), so the float network with integer
    # weights differs from the exact one by the 1/n_i of attention only, which both apply
    arm = parse_arm(block)
    net = sr.build_net(arm, at(2, 2), 3, 2, seed=0).double()
    _integer_weights(net)
    exact = ex.ExactNet(net, seed=0)
    for m in exact.params:  # use the float network's weights instead of random residues
        exact.params[m] = (m.weight.detach().T.clone(), None if m.bias is None else m.bias.detach())
    x = torch.randint(0, 2, (5, 3, 2)).double()  # (B, N, D) integer inputs
    y = net(x if net.seq_len else x.flatten(1)).detach()  # rational: 1/n_i, n_i in {1, 2, 3}
    scale = 6.0**4  # clears the denominators: layer 2 is cubic in layer 1's output, times 1/n_i
    assert ((y * scale - (y * scale).round()).abs() < 0.1).all()
    expect = ex._mod((y * scale).round()) * ex._inverse(int(scale)) % P
    assert torch.equal(exact(x).double(), expect)


@pytest.mark.parametrize("block,depth,width", [("linearized_attention", 1, 4), ("2", 2, 4)])
def test_exact_and_float_ranks_agree_where_float_is_reliable(block, depth, width):
    arm = parse_arm(block)
    dim = width if mixes_tokens(arm) else 1
    net = sr.build_net(arm, at(depth, width), 2, dim, seed=1)
    m = sr.measure(net, 2, dim, 64, seed=1, rtol=1e-9)
    assert m["exact_rank"] == m["float_rank"] and not m["exact_saturated"]


def test_exact_rank_refuses_non_polynomial_networks():
    from blocklab.errors import UserError

    net = sr.build_net(parse_arm("softmax_attention"), at(1, 4), 2, 4, seed=0)
    with pytest.raises(UserError, match="polynomial network"):
        ex.exact_grid_rank(net, 2, 4, templates=4)


# --- experiment 1 ------------------------------------------------------------------------------

TINY_DW = dw.DepthWidthConfig(widths=(2, 4), depths=(1, 2), templates=48, seeds=2)


def test_depth_width_tiny_run_respects_the_bounds_resumes_and_reports(tmp_path, monkeypatch):
    calls = []
    measure = sr.measure
    # one worker: the points are measured in this process (`_seprank.measure_point`)
    monkeypatch.setattr(sr, "measure", lambda *a, **k: calls.append(a) or measure(*a, **k))
    store = Store(tmp_path)
    trials = dw.run(TINY_DW, store, progress=False)
    assert len(calls) == len(trials.rows) == 2 * 2 * 2 and trials.failed == []
    result = dw_report.analyze(TINY_DW, trials)
    for s in result.summaries:
        lower, upper = theory.sep_rank_bounds(s["depth"], s["width"], 1)
        # Theorems 1-2 hold almost everywhere; at L = 1 the upper bound dx + H is met exactly
        assert s["exact"]["max"] >= 1 and math.log(s["exact"]["max"], 3) <= upper + 1e-9, s
        assert s["exact"]["max"] <= 48
        assert s["float"]["max"] <= s["exact"]["max"]  # a numerical rank never exceeds it here
    verdicts = {f["part"]: f["verdict"] for f in result.findings}
    assert verdicts["upper bound"] == "holds"
    assert verdicts["seeds"] == "holds"  # generic weights: one rank
    # a rerun finds every record and computes nothing
    calls.clear()
    again = dw.run(TINY_DW, Store(tmp_path), progress=False)
    assert calls == [] and dw_report.analyze(TINY_DW, again).summaries == result.summaries
    text = dw_report.write(tmp_path, TINY_DW, trials).path.read_text()
    assert "## Prediction and measurement" in text and "Theorem" in text
    for fig in ("seprank_depth_width.png", "seprank_spectra.png"):
        assert (tmp_path / fig).stat().st_size > 0


def test_depth_width_ranks_at_two_positions(tmp_path):
    # L = 1: y_B = f(x_B) + sum_a (Q x_B)_a (K x_A)_a (v . x_A): dx mixed terms and one local one
    cfg = dw.DepthWidthConfig(widths=(3, 5), depths=(1,), templates=32, seeds=1)
    result = dw_report.analyze(cfg, dw.run(cfg, Store(tmp_path), progress=False))
    assert [s["exact"]["min"] for s in result.summaries] == [4, 6]


def _dw_summary(depth, width, rank, saturated=False):
    lower, upper = theory.sep_rank_bounds(depth, width, 1)
    spread = {"min": rank, "max": rank, "mean": rank, "values": [rank]}
    return {
        "width": width,
        "depth": depth,
        "regime": theory.sep_rank_regime(depth, width),
        "log3_lower": lower,
        "log3_upper": upper,
        "grid": 4096,
        "exact": spread,
        "exact_saturated": saturated,
        "float": spread,
        "float_saturated": saturated,
    }


def test_depth_width_verdicts_report_a_violation_and_the_regimes():
    cfg = dw.DepthWidthConfig(widths=(2, 10), depths=(1, 2), seeds=1)
    over = 3 ** theory.sep_rank_bounds(1, 2, 1)[1] * 2  # twice the upper bound
    bad = [_dw_summary(1, 2, int(over)), _dw_summary(1, 10, 1)]  # 1 < 3^lower = 2.4
    verdicts = {f["part"]: f["verdict"] for f in dw_report.depth_width_findings(cfg, bad)}
    assert verdicts["upper bound"].startswith("VIOLATED")
    assert verdicts["lower bound"].startswith("VIOLATED")
    # below the threshold (dx = 10, L = 1 -> 2) log3 rank triples; above it (dx = 2) it grows less
    ok = [_dw_summary(1, 2, 3), _dw_summary(2, 2, 15), _dw_summary(1, 10, 11)]
    ok.append(_dw_summary(2, 10, 1001))
    found = {f["part"]: f for f in dw_report.depth_width_findings(cfg, ok)}
    assert found["depth threshold"]["verdict"] == "consistent"
    ok[-1] = _dw_summary(2, 10, 30)  # slower growth below than above: the claim fails
    found = {f["part"]: f for f in dw_report.depth_width_findings(cfg, ok)}
    assert found["depth threshold"]["verdict"] == "NOT consistent"
    ok[-1] = _dw_summary(2, 10, 4096, saturated=True)
    found = {f["part"]: f for f in dw_report.depth_width_findings(cfg, ok)}
    assert found["depth threshold"]["verdict"].startswith("not testable")


# --- experiment 2 ------------------------------------------------------------------------------


@pytest.mark.parametrize("d,p", [(2, 1), (2, 2), (2, 3), (3, 1), (3, 2)])
def test_degree_network_rank_is_d_to_the_p_plus_one(d, p):
    # Two scalar variables: f(x, y) = sum_ab c_ab x^a y^b has sep = rank(C). The network is a
    # polynomial of degree D = d^p (eq. 16; the embedding's bias only adds lower-degree terms),
    # and its top part g(u x + v y), g the homogeneous stack on the embedded direction, has
    # every coefficient c_(a, D-a) nonzero for generic weights: C is triangular after reversing
    # its columns, with a nonzero diagonal, so sep = D + 1. A grid of M > D distinct templates
    # has a full-column-rank Vandermonde factor on each side, so it shows all of it.
    net = sr.build_net(parse_arm(str(d)), at(p, 4), 2, 1, seed=p)
    assert d**p < 32
    assert ex.exact_grid_rank(net, 2, 1, templates=32, seed=p, vector=True).rank == d**p + 1
    # float64 sees it while the spectrum stays above rtol: sigma_(D+1) / sigma_1 is ~1e-3 at
    # D <= 4 but 1e-8 .. 1e-14 at D = 8, 9, where the float rank often counts one fewer
    r = separation_rank(net, 2, 1, "half", 32, seed=p, vector=True)
    assert r.rank == d**p + 1 if d**p <= 4 else d**p - 1 <= r.rank <= d**p + 1
    assert not r.saturated


TINY_DEG = dg.DegreeConfig(degrees=("2", "e", "3", "4"), width=3, templates=90, seeds=2)


def test_degree_tiny_run(tmp_path):
    trials = dg.run(TINY_DEG, Store(tmp_path), progress=False)
    assert trials.failed == []
    result = dg_report.analyze(TINY_DEG, trials)
    by = {(s["arm"], s["depth"]): s for s in result.summaries}
    assert sorted(p for a, p in by if a == "3") == [1, 2, 3, 4, 5]  # 3^5 + 1 > 90: saturated
    assert by[("3", 5)]["exact_saturated"] and by[("3", 5)]["exact"]["min"] == 90
    for s in result.summaries:
        if s["polynomial"] and not s["exact_saturated"]:
            assert set(s["exact"]["values"]) == {s["predicted"]}
        assert s["block_params"] == block_params(parse_arm(s["arm"]), s["depth"], 3)
        assert s["params"] == s["block_params"]  # the key the JSON contract pins
    assert by[("e", 1)]["exact"]["min"] is None  # not a polynomial: no exact rank
    for s in result.summaries:  # float64 cannot count what it does not resolve
        if s["float"]["min"] is not None:
            assert s["float"]["max"] <= s["resolved"]["max"]
    parts = [(f["part"], f["verdict"]) for f in result.findings]
    assert ("per parameter", "matches h(d)") in parts
    assert ("equal budget", "agrees") in parts  # B = 12 w^2: 65, 82, 65
    assert all(v != "DIFFERS" for _, v in parts)
    text = dg_report.write(tmp_path, TINY_DEG, trials).path.read_text()
    assert "## Prediction and measurement" in text
    _explains_its_float64_and_real_degree_ranks(text, result.findings)
    for fig in ("seprank_degree.png", "seprank_degree_params.png"):
        assert (tmp_path / fig).stat().st_size > 0


def _explains_its_float64_and_real_degree_ranks(text: str, findings) -> None:
    """Beside the float64 ranks below the exact ones, why (float64's dynamic range) and which to
    read; beside d = e's, that it has no exact rank."""
    found = {f["part"]: f for f in findings}
    floated = found["float64 rank"]["measured"]
    assert "below at" in floated and "dynamic range" in floated
    assert "Read the exact rank over F_p" in floated and "rounding floor" in floated
    real = found["real degree"]
    assert "no exact rank" in real["predicted"] and "dynamic range" in real["measured"]
    rows = [line for line in text.splitlines() if line.startswith("| e |")]
    assert rows and all("none (not a polynomial)" in line for line in rows)
    assert "float64 resolves" in text


def test_degree_workers_measure_the_same_ranks_with_progress_from_the_start(tmp_path, capsys):
    """--workers 2 measures in two processes what one measures (the stored metrics, seconds
    aside); the display counts n/N with an ETA from the first point, says why a float64 rank
    falls below the exact one and that d = e has no exact rank, each once."""
    cfg = dg.DegreeConfig(degrees=("2", "e"), width=2, templates=40, seeds=2)
    args = ["seprank", "degree", "--degrees", "2", "e", "--width", "2", "--templates", "40"]
    args += ["--seeds", "2", "--json"]
    code, _, err = _run(capsys, *args, "--out", str(tmp_path / "two"), "--workers", "2")
    assert code == 0
    lines = err.splitlines()
    total = sum(len(dg.degree_depths(d, cfg)) for d in (2, math.e)) * cfg.seeds
    start = f"[seprank-degree] {total} of {total} points to measure, 2 processes"
    assert start in lines[:3]  # before any point is measured
    counted = [line for line in lines if line.startswith("[seprank-degree ") and " p=" in line]
    assert len(counted) == total and counted[0].startswith(f"[seprank-degree 1/{total}, ")
    assert all(" ETA " in line for line in counted)
    assert sum("dynamic range" in line for line in lines) == 1
    assert sum("has no exact rank" in line for line in lines) == 1
    assert _run(capsys, *args, "--out", str(tmp_path / "one"), "--workers", "1")[0] == 0

    def metrics(out):
        records = Store(tmp_path / out, read_only=True).records()
        return {r["id"]: {k: v for k, v in r["metrics"].items() if k != "seconds"} for r in records}

    assert metrics("two") == metrics("one") and len(metrics("one")) == total


def test_degree_verdicts_catch_a_wrong_rank():
    s = {"arm": "2", "degree": 2.0, "block_params": 8, "polynomial": True, "grid": 64, "n": 1}
    rows = []
    for p, rank in ((1, 3), (2, 4), (3, 5), (4, 6)):  # linear, not 2^p + 1
        spread = {"min": rank, "max": rank, "mean": rank, "values": [rank]}
        rows.append(s | {"depth": p, "predicted": 2**p + 1, "exact": spread, "float": spread})
        rows[-1] |= {"exact_saturated": False, "float_saturated": False}
    found = dg_report.degree_findings(dg.DegreeConfig(degrees=("2",)), rows)
    assert found[0]["verdict"] == "DIFFERS at p=2, p=3, p=4"
    assert found[1]["part"] == "slope per layer" and found[1]["verdict"] == "DIFFERS"


def test_order_reads_ties():
    assert seprank.order({"2": 1.0, "3": 2.0, "4": 1.0}, dict.fromkeys("234", 0.0)) == "3 > 2 = 4"
    h = {str(d): theory.h(d) for d in (4, 2, 3)}
    assert seprank.order(h, dict.fromkeys(h, 0.0)) == "3 > 2 = 4"  # h(2) == h(4) exactly
    assert seprank.order({"2": 1.0, "3": 1.5}, {"2": 0.3, "3": 0.3}) == "2 = 3"


def test_configs_refuse_bad_grids():
    with pytest.raises(ValueError, match="positions"):
        dw.DepthWidthConfig(positions=1)
    with pytest.raises(ValueError, match="points"):
        dw.DepthWidthConfig(positions=4, templates=100)
    with pytest.raises(ValueError, match="exceed heads"):
        dw.DepthWidthConfig(widths=(2,), heads=2)
    with pytest.raises(ValueError):
        dg.DegreeConfig(degrees=("mlp",))


# --- the command line --------------------------------------------------------------------------


def _run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_measure_prints_ranks_and_bounds(capsys):
    code, out, _ = _run(capsys, "seprank", "measure", "--depth", "1", "--templates", "32")
    assert code == 0
    assert "rank (float64, rtol 1e-09): 5" in out  # dx + 1 at L = 1 (see above)
    assert "theorem 1" in out and "log3 sep" in out  # L = 1 < log3 4
    code, out, _ = _run(capsys, "seprank", "measure", "--block", "2", "--templates", "32")
    assert code == 0 and "rank (float64, rtol 1e-09): 5" in out  # 2^2 + 1


def test_measure_json(capsys):
    args = ["seprank", "measure", "--block", "2", "--depth", "3", "--templates", "16", "--json"]
    code, out, _ = _run(capsys, *args, "--exact", "--eps", "0.001")
    assert code == 0
    m = json.loads(out)
    assert m["exact"]["rank"] == 9 and m["degree"] == 8 and m["polynomial"]
    assert m["shape"] == [16, 16] and m["rank"] <= 9 and "epsilon_rank" in m
    assert math.isclose(m["log3_rank"], math.log(m["rank"], 3))


@pytest.mark.parametrize(
    "args",
    [
        ["--block", "linearized_atention"],
        ["--templates", "0"],
        ["--positions", "1"],
        ["--positions", "4", "--templates", "100"],
        ["--depth", "0"],
        ["--block", "softmax_attention", "--exact"],
        ["--partition", "sideways"],
    ],
)
def test_measure_bad_input_is_one_line(args, capsys):
    code, out, err = _run(capsys, "seprank", "measure", *args)
    assert code == 2 and out == ""
    assert err.startswith("blocklab: error:") and err.count("\n") == 1, err
    if "linearized_atention" in args:
        assert "did you mean 'linearized_attention'" in err


@pytest.mark.parametrize(
    "args",
    [
        ["depth-width", "--templates", "0"],
        ["depth-width", "--positions", "1"],
        ["depth-width", "--widths", "1"],
        ["degree", "--degrees", "mlp"],
        ["degree", "--templates", "5000"],
        ["degree", "--workers", "0"],
        ["degree", "--device", "cuda"],  # CPU arithmetic: no flag that would do nothing
        ["nope"],
    ],
)
def test_experiment_bad_input_is_one_line(args, capsys, tmp_path):
    code, _, err = _run(capsys, "seprank", *args, "--out", str(tmp_path))
    assert code == 2
    assert err.startswith("blocklab: error:") and err.count("\n") == 1, err


@pytest.mark.slow
def test_seprank_degree_end_to_end(tmp_path, capsys):
    args = ["seprank", "degree", "--degrees", "2", "3", "--width", "2", "--templates", "40"]
    args += ["--seeds", "2", "--out", str(tmp_path), "--quiet", "--json"]
    code, out, _ = _run(capsys, *args)
    assert code == 0
    payload = json.loads(out)
    assert {f["part"] for f in payload["findings"]} >= {"rank = d^p + 1", "slope per layer"}
    assert payload["report"].endswith("report.md") and payload["config"]["templates"] == 40
    assert (tmp_path / "report.md").exists()
    n = len(Store(tmp_path).records(experiment="seprank-degree"))
    assert n == 2 * (6 + 4)  # seeds x depths (2: p = 1..6, 3: p = 1..4)
    code, out2, _ = _run(capsys, *args)  # a rerun resumes from the store
    assert code == 0 and json.loads(out2)["summaries"] == payload["summaries"]
    assert len(Store(tmp_path).records(experiment="seprank-degree")) == n
    assert main(["runs", "--out", str(tmp_path)]) == 0  # the stored points, one line each
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == n and all("exact_rank=" in line for line in lines)

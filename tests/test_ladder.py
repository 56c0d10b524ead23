"""The degree sweep's depth ladder: a deeper network continued from a fitted one computes the same
function (exactly for products of factors), a ladder trial stores one row per rung, and a network
that hides an input is refused before any fit."""

from __future__ import annotations

import json

import pytest
import torch

from blocklab.cli import main
from blocklab.engine import converge
from blocklab.models import Net, continue_from, parse_arm
from blocklab.specs import NetShape, TrainConfig
from blocklab.tasks import make_task

X = torch.randn(64, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def _net(arm: str, depth: int, seed: int, **kw) -> Net:
    torch.manual_seed(seed)
    return Net(parse_arm(arm), NetShape(depth, 4, norm="rms", **kw), 3, 1).double()


@pytest.mark.parametrize("arm", ["2", "3", "4", "e", "[3,2]"])
@pytest.mark.parametrize("scaled", [False, True])
def test_products_of_factors_continue_exactly(arm, scaled):
    old, new = _net(arm, 2, 0, scaled_residual=scaled), _net(arm, 5, 1, scaled_residual=scaled)
    assert continue_from(new, old) is True
    with torch.no_grad():
        torch.testing.assert_close(new(X), old(X), rtol=0, atol=1e-12)
    # the silenced layers still get a gradient: a fit can move them
    new(X).sum().backward()
    added = [p.grad for layer in list(new.layers)[2:] for p in layer.parameters()]
    assert all(g is not None for g in added) and any(float(g.abs().max()) > 0 for g in added)


def test_relu_layers_continue_to_within_their_silent_scale():
    old, new = _net("mlp", 2, 0), _net("mlp", 4, 1)
    assert continue_from(new, old) is False  # relu(0) has no gradient: shrunk, not zeroed
    with torch.no_grad():
        assert float((new(X) - old(X)).abs().max()) < 1e-4


def test_a_block_that_cannot_rescale_its_output_refuses_scaled_residual_ladders():
    from blocklab.errors import UserError

    old = _net("mlp(activation=tanh)", 1, 0, scaled_residual=True)
    new = _net("mlp(activation=tanh)", 2, 1, scaled_residual=True)
    with pytest.raises(UserError, match="cannot rescale"):
        continue_from(new, old)


def test_each_rung_starts_where_the_rung_below_ended(monkeypatch):
    """Every continued chain enters its rung with the loss the chain's fitted network below has
    on that rung's training set: the function carried over unchanged."""
    data = make_task("teacher", n_in=3, n_train=256, n_val=64, n_test=64).make(0)
    cfg = TrainConfig(optimizer="lm", steps=8, restarts=2, data_ratio=4)
    entered, ended = [], []
    fit_once = converge.fit_once

    def spy(model, data, sets, cfg, seed, threshold):
        with torch.no_grad():
            x, y = sets.train.x, sets.train.y
            entered.append(float(((model.double()(x) - y) ** 2).mean()))
        run = fit_once(model, data, sets, cfg, seed, threshold)
        # the fitted network below, on the next rung's (larger) training set
        ended.append(lambda x2, y2, m=run.model: float(((m(x2).detach() - y2) ** 2).mean()))
        return run

    monkeypatch.setattr(converge, "fit_once", spy)
    rungs = converge.fit_ladder((1, 2), lambda d, s: _net("3", d, s).float(), data, cfg, 0, 10.0)
    assert [r.depth for r in rungs] == [1, 2] and all(r.exact_start for r in rungs)
    second = rungs[1].result
    assert len(second.restarts) == 2
    assert second.train_loss == min(c["train_loss"] for c in second.restarts)
    split = converge.training_set(data, second.examples, 0)
    x, y = split.x, split.y
    for chain in range(2):  # calls: rung 1 chains 0, 1, then rung 2 chains 0, 1
        assert entered[2 + chain] == pytest.approx(ended[chain](x, y), rel=1e-12)
    assert rungs[0].result.examples < second.examples


def test_batched_chains_fit_as_the_chains_do_one_at_a_time(monkeypatch):
    """A rung's chains as one batched fit (a GPU's path, forced here on the CPU) take the steps
    and certificates they take one at a time: the same losses to float64 rounding, every rung,
    and the record says which ran."""
    data = make_task("teacher", n_in=3, n_train=256, n_val=64, n_test=64).make(0)
    cfg = TrainConfig(optimizer="lm", steps=16, restarts=3, data_ratio=4, warm_start=0)

    def ladder():
        return converge.fit_ladder((1, 2), lambda d, s: _net("3", d, s), data, cfg, 0, 10.0)

    alone = ladder()
    monkeypatch.setattr(converge, "batch_chains", lambda device, cfg: True)
    batched = ladder()
    for a, b in zip(alone, batched, strict=True):
        assert (a.result.batched, b.result.batched) == (False, True)
        assert a.result.jacobian == b.result.jacobian == "layers"
        for ca, cb in zip(a.result.restarts, b.result.restarts, strict=True):
            assert cb["train_loss"] == pytest.approx(ca["train_loss"], rel=1e-8)
            assert (cb["iterations"], cb["converged"]) == (ca["iterations"], ca["converged"])
        assert b.result.test_loss == pytest.approx(a.result.test_loss, rel=1e-6)


TINY = [
    "--task-option", "n_train=256", "--task-option", "n_val=64", "--task-option", "n_test=256",
    "--degrees", "2", "3", "--baselines", "--width", "4", "--norm", "rms", "--depths", "1", "2",
    "--seeds", "3", "--restarts", "2", "--steps", "8", "--warm-start", "20", "--data-ratio", "4",
    "--n-boot", "20", "--workers", "1", "--quiet",
]  # fmt: skip


def test_a_ladder_run_stores_one_trial_per_chain_set_and_a_row_per_rung(tmp_path, capsys):
    out = str(tmp_path / "ladder")
    assert main(["degree-sweep", "--out", out, "--json", *TINY]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["ladder"] == "on" and payload["input_rank"]["d=3"]["rank"] == 2
    rows = {(r["arm"], r["budget"]) for r in payload["summaries"]}
    assert rows == {("d=2", 32), ("d=2", 64), ("d=3", 48), ("d=3", 96)}
    from blocklab import load_runs

    runs = load_runs(out)
    assert len(runs) == 2 * 3  # one stored trial per (arm, seed): its chains climb both depths
    names = [c["name"] for c in payload["design_checks"]]
    assert {"input_rank", "curve", "resolution", "search"} <= set(names)
    assert payload["status"]["line"].split(":")[0] in ("VERDICT", "INCONCLUSIVE", "NO VERDICT")
    assert payload["status"]["verdict"] is payload["status"]["line"].startswith("VERDICT")


def test_a_network_that_hides_an_input_is_refused_before_any_fit(tmp_path, capsys):
    """LayerNorm at width 3 removes the all-ones direction: 3 inputs reach the readout through
    2 combinations, and the run stops with one line that names the fix."""
    out = tmp_path / "hidden"
    tiny = " ".join(TINY).replace("--width 4 --norm rms", "--width 3 --norm layer").split()
    tiny += ["--task-option", "n_in=3"]
    code = main(["degree-sweep", "--out", str(out), *tiny])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "input_rank" in err and "2 of the task's 3" in err and "--norm rms" in err
    from blocklab import load_runs

    assert not out.exists() or len(load_runs(out)) == 0  # nothing was fitted

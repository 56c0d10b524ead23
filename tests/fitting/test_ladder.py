"""The degree sweep's depth ladder: a deeper network continued from a fitted one computes the same
function (exactly for products of factors), a ladder trial stores one row per rung, and a network
that hides an input is refused before any fit."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from _isolated import Ran, isolated
from blocklab.blocks import Block
from blocklab.cli import main
from blocklab.errors import UserError
from blocklab.fitting import converge, ladder
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
        # the added layers add exact zeros to the same float64 path: ulps of the unit-scale
        # output at most (a different reduction order), where a wrong copy misses by order one
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

    def spy(model, data, sets, cfg, seed, threshold, resume=None):
        with torch.no_grad():
            x, y = sets.train.x, sets.train.y
            entered.append(float(((model.double()(x) - y) ** 2).mean()))
        run = fit_once(model, data, sets, cfg, seed, threshold)
        # the fitted network below, on the next rung's (larger) training set
        ended.append(lambda x2, y2, m=run.model: float(((m(x2).detach() - y2) ** 2).mean()))
        return run

    monkeypatch.setattr(ladder, "fit_once", spy)
    rungs = ladder.fit_ladder((1, 2), lambda d, s: _net("3", d, s).float(), data, cfg, 0, 10.0)
    assert [r.depth for r in rungs] == [1, 2] and all(r.exact_start for r in rungs)
    second = rungs[1].result
    assert len(second.restarts) == 2
    assert second.train_loss == min(c["train_loss"] for c in second.restarts)
    split = converge.training_set(data, second.examples, 0)
    x, y = split.x, split.y
    for chain in range(2):  # calls: rung 1 chains 0, 1, then rung 2 chains 0, 1
        # the same network on the same set by the same kernels: equal to a mean's rounding
        assert entered[2 + chain] == pytest.approx(ended[chain](x, y), rel=1e-12)
    assert rungs[0].result.examples < second.examples


# What a batched fit of a rung's chains promises against the chains fitted one at a time. Exactly:
# each chain's iterations and certificate, and which chain ends best. Its losses only to rounding
# amplified: the batched J^T J (bmm) and the lone one (syrk) differ in their last bits, and each
# of the 32 iterations in mid-descent here (two rungs of 16) multiplies a parameter difference by
# a few, so on this problem a difference of one ulp grows to about 1e-7 of the loss and a few ulps
# of another CPU's kernels to about 1e-6, whatever the thread count. 1e-4 leaves a hundredfold
# margin over that and stays a hundred times below the gap between any two chains' losses: a
# chain's result read into another's row fails it.
CHAINS_REL = 1e-4


def test_batched_chains_fit_as_the_chains_do_one_at_a_time(monkeypatch):
    """A rung's chains as one batched fit (a GPU's path, forced here on the CPU) take the steps
    and certificates they take one at a time, and the same chain ends best: the same iterations,
    certificates and best chain exactly, the losses to float64 rounding amplified by the fit
    (`CHAINS_REL`), every rung, and the record says which ran."""
    data = make_task("teacher", n_in=3, n_train=256, n_val=64, n_test=64).make(0)
    cfg = TrainConfig(optimizer="lm", steps=16, restarts=3, data_ratio=4, warm_start=0)

    def climb():
        return ladder.fit_ladder((1, 2), lambda d, s: _net("3", d, s), data, cfg, 0, 10.0)

    alone = climb()
    monkeypatch.setattr(ladder, "batch_chains", lambda device, cfg: True)
    batched = climb()
    for a, b in zip(alone, batched, strict=True):
        assert (a.result.batched, b.result.batched) == (False, True)
        assert a.result.jacobian == b.result.jacobian == "layers"
        for ca, cb in zip(a.result.restarts, b.result.restarts, strict=True):
            assert (cb["iterations"], cb["converged"]) == (ca["iterations"], ca["converged"])
            assert cb["train_loss"] == pytest.approx(ca["train_loss"], rel=CHAINS_REL)
        losses = [c["train_loss"] for c in a.result.restarts]
        best = losses.index(min(losses))
        assert [c["train_loss"] for c in b.result.restarts].index(b.result.train_loss) == best
        # the premise of CHAINS_REL: any two chains end far further apart than it
        assert min(abs(u - v) / min(u, v) for u, v in itertools.combinations(losses, 2)) > 100 * (
            CHAINS_REL
        )
        assert b.result.test_loss == pytest.approx(a.result.test_loss, rel=CHAINS_REL)


TINY = [
    "--task-option", "n_train=256", "--task-option", "n_val=64", "--task-option", "n_test=256",
    "--degrees", "2", "3", "--baselines", "--width", "4", "--norm", "rms", "--depths", "1", "2",
    "--seeds", "3", "--restarts", "2", "--steps", "8", "--warm-start", "20", "--data-ratio", "4",
    "--n-boot", "20", "--workers", "1", "--quiet",
]  # fmt: skip


def test_a_ladder_run_stores_one_trial_per_chain_set_and_a_row_per_rung(ladder_run):
    out, payload = ladder_run.out, ladder_run.printed  # TINY's run (conftest)
    assert payload["ladder"] == "on" and payload["input_rank"]["d=3"]["rank"] == 2
    rows = {(r["arm"], r["budget"]) for r in payload["summaries"]}
    assert rows == {("d=2", 32), ("d=2", 64), ("d=3", 48), ("d=3", 96)}
    from blocklab import load_runs

    runs = load_runs(out)
    assert len(runs) == 2 * 3  # one stored trial per (arm, seed): its chains climb both depths
    # d=2 at 64 meets d=3 between its rungs at 48 and 96: the answer's checks lead, the
    # scaling law's stand apart
    names = {c["name"] for c in payload["design_checks"]}
    assert {"input_rank", "robustness", "generalization", "negative_control"} <= names
    assert {"curve", "resolution"} <= {c["name"] for c in payload["scaling_checks"]}
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


# --- a block the ladder cannot continue: `check` fails it and the sweep refuses it -------------

ROOT = Path(__file__).resolve().parents[2]

# the README's gated linear unit without its scale_output_: its output is a product, not a
# linear map's own output, so nothing in it says how to rescale or silence it
# the README's block with its output squashed and without its scale_output_: linear in no one
# module's parameters, so nothing silences an added layer (`Block.linear_factor`)
_README_BLOCK = (ROOT / "examples" / "my_block.py").read_text().split("    @torch.no_grad()")[0]
UNSCALED = _README_BLOCK.replace("return self.value(x) *", "return torch.tanh(self.value(x)) *")


def blocklab(*args: str) -> Ran:
    """The command run from the checkout in this process, and undone after: a plugin registers
    for the life of its process (`_isolated`)."""
    return isolated(*args, cwd=ROOT)


class Gated(Block):
    """Unregistered stand-ins, swapped into a network's layers: y = (W x) * sigmoid(V x)."""

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.value = nn.Linear(d_in, d_out, bias=False)
        self.gate = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        return self.value(x) * torch.sigmoid(self.gate(x))  # (..., D_out)


class Unscaled(Gated):
    """tanh(W x) * sigmoid(V x): linear in neither factor's weights, and no scale_output_."""

    name = "unscaled"

    def forward(self, x):
        return torch.tanh(self.value(x)) * torch.sigmoid(self.gate(x))  # (..., D_out)


class Lying(Gated):
    name = "lying"

    def scale_output_(self, c):  # says it rescales, does nothing
        pass


class Deaf(Block):
    """(W x)^2, rescaled through W: silenced by W = 0, where its gradient 2 (W x) x is zero too."""

    name = "deaf"

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.linear = nn.Linear(d_in, d_out, bias=False)

    @torch.no_grad()
    def scale_output_(self, c):
        self.linear.weight *= c**0.5

    def forward(self, x):
        return self.linear(x) ** 2  # (..., D_out)


def _swapped(cls, scaled: bool = True):
    def make(depth: int, seed: int) -> Net:
        net = _net("mlp", depth, seed, scaled_residual=scaled)
        for layer in net.layers:
            layer.block = cls(4, 4)
        return net

    return make


@pytest.mark.parametrize(
    ("cls", "said"),
    [
        (Unscaled, "implement scale_output_"),
        (Lying, "moved the network's output"),
        (Deaf, "gets no gradient"),
    ],
)
def test_the_shared_ladder_check_refuses_each_way_a_continuation_fails(cls, said):
    from blocklab.checks.blocks import LadderRefused, check_ladder

    with pytest.raises(LadderRefused) as caught:
        check_ladder(_swapped(cls), X, f"block {cls.name}")
    message = str(caught.value)
    assert message.startswith(f"block {cls.name} cannot continue") and said in message
    assert "--ladder off" in message and len(message.splitlines()) == 1
    # a failure the block did not state: `blocklab check` fails it (not "not applicable")
    assert caught.value.declared is False


def test_the_shared_ladder_check_passes_the_fixed_gate_and_relu_within_its_scale():
    from blocklab.checks.blocks import check_ladder

    class Fixed(Gated):
        @torch.no_grad()
        def scale_output_(self, c):
            self.value.weight *= c

    assert check_ladder(_swapped(Fixed), X, "fixed") is True
    assert check_ladder(lambda d, s: _net("mlp", d, s, scaled_residual=True), X, "mlp") is False


def test_a_linear_map_as_the_output_rescales_by_default_and_a_product_does_not():
    from blocklab.blocks import make_block

    wrapped = make_block("module", 4, 4, factory="blocklab.blocks.module:example")
    assert wrapped.final_linear() is wrapped.inner[-1]
    x = torch.randn(8, 4)
    with torch.no_grad():
        before = wrapped(x)
        wrapped.scale_output_(0.5)
        torch.testing.assert_close(wrapped(x), 0.5 * before)  # W h + b halved with W and b
    assert Unscaled(4, 4).final_linear() is None


def test_the_check_reads_the_default_sweeps_network():
    from dataclasses import replace

    from blocklab.checks import blocks as contract
    from blocklab.experiments.degree_sweep import SHAPE, DegreeSweepConfig

    assert replace(contract.LADDER_SHAPE, depth=SHAPE.depth) == SHAPE
    cfg = DegreeSweepConfig()
    assert cfg.staged and cfg.task == "teacher"
    assert make_task(cfg.task).make(0).train.x.shape[-1] == contract.LADDER_INPUTS


def test_a_block_that_states_it_cannot_rescale_is_not_applicable_and_says_ladder_off():
    from blocklab.checks import NotApplicable
    from blocklab.checks import blocks as contract

    with pytest.raises(NotApplicable, match="--ladder off"):
        contract.ladder(contract.Case("mlp", {"activation": "tanh", "bias": False}))
    contract.ladder(contract.Case("mlp", {}))  # relu: silenced to within mlp.SILENT


@pytest.mark.slow
def test_a_block_the_ladder_cannot_silence_fails_check_and_the_sweep_refuses_it_before_any_fit(
    tmp_path,
):
    plugin = tmp_path / "gated.py"
    plugin.write_text(UNSCALED)
    check = blocklab("check", "--import", str(plugin), "--only", "gated")
    assert check.returncode == 1, check.stdout + check.stderr
    failed = [line for line in check.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith("FAIL block gated [ladder]: block gated")
    assert "implement scale_output_" in failed[0] and "--ladder off" in failed[0]

    out = tmp_path / "refused"
    sweep = blocklab("degree-sweep", "--import", str(plugin), "--baselines", "gated", "mlp",
                     "--degrees", "2", "3", "--out", str(out))  # fmt: skip
    # the checks before any fit say they begin; the refusal is one line after them
    said = sweep.stderr.strip().splitlines()
    err = said[-1]
    staged = [re.match(r"\[\d+(m\d+)?s\] ", line) for line in said[:-1]]
    assert sweep.returncode == 2 and all(staged), said
    assert err.startswith("blocklab: error: block gated cannot continue") and "--ladder off" in err
    assert "gatedlinear" not in err.lower()  # the registered name, not the class's
    from blocklab import load_runs

    assert not out.exists() or len(load_runs(out)) == 0  # nothing was fitted


@pytest.mark.slow
def test_the_example_blocks_pass_check_and_every_trial_of_their_sweep_is_done(tmp_path):
    """The README's block (examples/my_block.py, with `scale_output_`) and a plain cubic block
    with none (examples/cubic_block.py) pass `check`, the ladder included, and every trial of a
    ladder sweep with both is done: the ladder silences an added layer of the plain block through
    the last factor its output is linear in (`Block.linear_factor`). One command of each kind
    for both blocks: a plugin registers for the life of its process."""
    imports = ("--import", "examples/my_block.py", "--import", "examples/cubic_block.py")
    check = blocklab("check", *imports, "--only", "my_block", "cubic_block", "--json")
    assert check.returncode == 0, check.stdout + check.stderr
    ladder = [c for c in json.loads(check.stdout)["checks"] if c["check"] == "ladder"]
    assert sorted((c["name"], c["passed"], c["message"]) for c in ladder) == [
        ("cubic_block", True, ""),  # run, not skipped
        ("my_block", True, ""),
    ]

    out = tmp_path / "blocks"
    tiny = " ".join(TINY).replace(
        "--degrees 2 3 --baselines", "--degrees 2 --baselines my_block cubic_block"
    )
    tiny = tiny.replace("--seeds 3", "--seeds 2").split()
    sweep = blocklab("degree-sweep", *imports, "--out", str(out), "--json", *tiny)
    assert sweep.returncode == 0, sweep.stderr
    payload = json.loads(sweep.stdout)
    assert payload["failed"] == [] and "failed_arms" not in payload and payload["ladder"] == "on"
    assert {r["arm"] for r in payload["summaries"]} == {"d=2", "my_block", "cubic_block"}
    from blocklab import load_runs

    runs = load_runs(out)
    assert len(runs) == 3 * 2 and set(runs["status"]) == {"done"}


# --- a run in which every trial of an arm failed -------------------------------------------


def _plant_failures(monkeypatch) -> None:
    """Every trial of d=3 raises, and d=2's seed 0."""
    from blocklab.engine import trial

    prepare = trial._prepare

    def planted(spec, device, *args, **kwargs):
        if spec.arm.label == "d=3" or (spec.arm.label == "d=2" and spec.seed == 0):
            raise RuntimeError(f"planted failure in {spec.arm.label}")
        return prepare(spec, device, *args, **kwargs)

    monkeypatch.setattr(trial, "_prepare", planted)


def test_an_arm_whose_every_trial_failed_is_said_on_stderr_and_the_run_exits_1(
    tmp_path, capsys, monkeypatch
):
    """d=3's trials all raise, one of d=2's too: one line per arm, exit 1, and what finished is
    stored and reported."""
    _plant_failures(monkeypatch)
    out = str(tmp_path / "lost")
    assert main(["degree-sweep", "--out", out, "--json", *TINY]) == 1
    captured = capsys.readouterr()
    said = [line for line in captured.err.splitlines() if line.startswith("blocklab: d=")]
    assert sorted(said) == [
        "blocklab: d=2: 1 of 3 trials failed; the first: RuntimeError: planted failure in d=2",
        "blocklab: d=3: 3 of 3 trials failed; the first: RuntimeError: planted failure in d=3",
    ]
    payload = json.loads(captured.out)
    lost = {a["arm"]: (a["failed"], a["trials"]) for a in payload["failed_arms"]}
    assert lost == {"d=2": (1, 3), "d=3": (3, 3)}
    assert {r["arm"] for r in payload["summaries"]} == {"d=2"}
    from blocklab import load_runs

    runs = load_runs(out)
    assert sorted(runs["status"]) == ["done", "done", "failed", "failed", "failed", "failed"]


def test_blocklab_run_raises_where_an_arm_lost_every_trial(tmp_path, monkeypatch):
    """From Python, as the command exits 1 (TINY's design): `ArmsFailed` names the arm, and
    carries the JSON."""
    from blocklab.api import run
    from blocklab.errors import ArmsFailed

    _plant_failures(monkeypatch)
    with pytest.raises(ArmsFailed, match="d=3: 3 of 3 trials failed") as raised:
        run(
            "degree-sweep", out=tmp_path / "lost", workers=1, progress=False,
            task_options={"n_train": 256, "n_val": 64, "n_test": 256},
            degrees=("2", "3"), baselines=(), width=4, norm="rms", depths=(1, 2), seeds=3,
            restarts=2, steps=8, warm_start=20, data_ratio=4, n_boot=20,
        )  # fmt: skip
    assert {a["arm"] for a in raised.value.result["failed_arms"]} == {"d=2", "d=3"}


@pytest.mark.parametrize("activation", ["tanh", "gelu"])
def test_tanh_and_gelu_layers_continue_exactly_without_scaled_branches(activation):
    """tanh(0) = gelu(0) = 0 with a slope there: zeroed weights silence an added layer exactly
    and leave it a gradient."""
    arm = f"mlp(activation={activation})"
    old, new = _net(arm, 2, 0), _net(arm, 4, 1)
    assert continue_from(new, old) is True
    with torch.no_grad():
        torch.testing.assert_close(new(X), old(X), rtol=0, atol=1e-12)  # the same float64 path
    new(X).sum().backward()
    added = [p.grad for layer in list(new.layers)[2:] for p in layer.parameters()]
    assert any(g is not None and float(g.abs().max()) > 0 for g in added)


@pytest.mark.slow
class Cubic(Block):
    """Unregistered: examples/cubic_block.py's block, (A x) * (B x) * (C x), no scale_output_."""

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.a, self.b, self.c = (nn.Linear(d_in, d_out, bias=False) for _ in range(3))

    def forward(self, x):
        return self.a(x) * self.b(x) * self.c(x)


class Squashed(Block):
    """Unregistered: sigmoid(A x), linear in no module's parameters."""

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.a = nn.Linear(d_in, d_out)

    def forward(self, x):
        return torch.sigmoid(self.a(x))


def test_the_linear_factor_is_the_last_one_the_output_is_linear_in():
    torch.manual_seed(0)
    block = Cubic(3, 3)
    assert block.final_linear() is None and block.linear_factor() is block.c
    x = torch.randn(4, 2, 3)
    before = block(x)
    block.scale_output_(0.5)
    torch.testing.assert_close(block(x), 0.5 * before)
    assert block.silence_() and block(x).abs().max() == 0 and block.c.weight.abs().max() == 0
    odd = Squashed(3, 3)
    assert odd.linear_factor() is None
    with pytest.raises(UserError, match="implement scale_output_"):
        odd.scale_output_(0.5)

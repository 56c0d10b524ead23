"""The ensemble engine against its reference: each member trained alone with `train.train`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from blocklab.blocks import BLOCKS
from blocklab.checks import label
from blocklab.checks.blocks import cases
from blocklab.engine import trial
from blocklab.errors import UserError
from blocklab.fitting import ensemble as ensemble_module
from blocklab.fitting.ensemble import Ensemble, stackable, train_ensemble
from blocklab.fitting.train import train
from blocklab.models import Net, mixes_tokens, parse_arm
from blocklab.specs import Arm, NetShape, TrainConfig, TrialSpec, batches, ensemble_key
from blocklab.tasks.base import IGNORE, Split, TaskData, member_losses

TRAIN = TrainConfig(steps=40, batch_size=16, lr=3e-3, eval_points=4)


def _spec(task, arm, seed, lr=3e-3, data_seed=None, depth=2, width=8, options=None, **kw):
    cfg = dataclasses.replace(TRAIN, lr=lr, **kw)
    return TrialSpec(
        task,
        options or {},
        parse_arm(arm),
        0,
        NetShape(depth, width, norm="layer"),
        cfg,
        seed,
        data_seed,
    )


def _close(alone: dict, together: dict, rtol: float = 1e-4) -> None:
    assert together["status"] == alone["status"]
    a, b = alone["metrics"], together["metrics"]
    assert b["diverged_step"] == a["diverged_step"]
    assert b["steps_to_threshold"] == a["steps_to_threshold"]
    for key in ("test_metric", "test_loss", "val_metric"):
        if a[key] is None:
            assert b[key] is None
        else:
            assert b[key] == pytest.approx(a[key], rel=rtol, abs=1e-6), key
    for key in ("step", "train_loss", "val_loss"):  # the first training loss is NaN (none yet)
        assert together["curves"][key] == pytest.approx(
            alone["curves"][key], rel=rtol, abs=1e-6, nan_ok=True
        ), key
    assert b["params"] == a["params"]


@pytest.mark.parametrize(
    ("task", "arm", "path"),
    [
        ("teacher", "3", "stacked"),
        ("poly_target", "2", "stacked"),
        ("teacher", "[3,2]", "stacked"),
        # spow's curvature near 0 amplifies float32 rounding: the members agree with their lone
        # runs to 1e-7 after 10 steps and to 2.5e-4 after 40 (seed 1, lr 1e-2)
        pytest.param("teacher", "e", "stacked", marks=pytest.mark.rtol(1e-3)),
        ("mnist1d", "mlp", "stacked"),
        ("qsa", "softmax_attention", "stacked"),
        ("match2", "linear_attention", "stacked"),
        ("teacher", "module(factory=blocklab.blocks.module:example)", "vmap"),
    ],
)
def test_members_equal_training_alone(task, arm, path, request):
    """Seeds, data and learning rates differ per member; each member's record equals the trial
    trained alone, on both forward paths."""
    marker = request.node.get_closest_marker("rtol")
    rtol = marker.args[0] if marker else 1e-4
    specs = [_spec(task, arm, seed, lr) for seed, lr in ((0, 3e-3), (1, 1e-2), (2, 3e-3))]
    together = trial.run_group(specs, "cpu")
    for spec, record in zip(specs, together, strict=True):
        assert record["metrics"]["ensemble"] == {"members": 3, "path": path}
        _close(trial.run_trial(spec, "cpu"), record, rtol)


def test_members_equal_training_alone_under_wsd():
    """The schedule is the engine's as much as the reference's: under wsd too, each member's
    record, its plateau reading included, equals the trial trained alone."""
    wsd = {"schedule": "wsd", "decay": 0.25, "eval_points": 12}
    specs = [_spec("teacher", "3", seed, lr, **wsd) for seed, lr in ((0, 3e-3), (1, 1e-2))]
    together = trial.run_group(specs, "cpu")
    for spec, record in zip(specs, together, strict=True):
        alone = trial.run_trial(spec, "cpu")
        _close(alone, record)
        assert alone["metrics"]["plateau_improvement"] is not None
        assert record["metrics"]["plateau_improvement"] == pytest.approx(
            alone["metrics"]["plateau_improvement"], rel=1e-3, abs=1e-6
        )
        assert record["metrics"]["half_val_loss"] == pytest.approx(
            alone["metrics"]["half_val_loss"], rel=1e-4
        )


def test_the_wsd_branch_leaves_the_members_as_they_were(monkeypatch):
    """The ensemble takes `train`'s branch (`train.wsd_half_run`, where `train.half_run` says):
    with it and without it, every member's run is the same to the bit, a member diverged before
    the branch included."""
    wsd = {"schedule": "wsd", "decay": 0.25, "eval_points": 12}
    lrs = (3e-3, 1e4, 1e-2)
    specs = [_spec("teacher", "3", seed, lr, **wsd) for seed, lr in enumerate(lrs)]
    _, with_branch, _ = trial.train_group(specs, "cpu")
    monkeypatch.setattr(ensemble_module, "half_run", lambda cfg: None)  # no branch
    _, without, _ = trial.train_group(specs, "cpu")
    assert [r.status for r in with_branch] == ["done", "diverged", "done"]
    assert [r.half_val_loss is None for r in with_branch] == [False, True, False]
    assert all(r.half_val_loss is None for r in without)
    for a, b in zip(with_branch, without, strict=True):
        assert (a.status, a.diverged_step, a.test_loss) == (b.status, b.diverged_step, b.test_loss)
        for key in ("step", "train_loss", "val_loss"):  # the first train loss is NaN in both
            np.testing.assert_array_equal(a.curves[key], b.curves[key])


def test_shared_data_and_the_vmap_fallback_agree():
    """Members reading one dataset (data_seed fixed) share it; the vmap path forced on a
    stackable network gives the stacked path's results."""
    specs = [_spec("teacher", "3", seed, data_seed=7) for seed in range(3)]
    cache: dict = {}
    prepared = [trial._prepare(s, "cpu", cache) for s in specs]
    assert all(p.data is prepared[0].data for p in prepared)
    runs = {}
    for path in ("stacked", "vmap"):
        _, results, used = trial.train_group(specs, "cpu", path=path)
        assert used == path
        runs[path] = results
    for a, b in zip(runs["stacked"], runs["vmap"], strict=True):
        assert b.test_metric == pytest.approx(a.test_metric, rel=1e-4)
        assert b.curves["val_loss"] == pytest.approx(a.curves["val_loss"], rel=1e-4)


def test_one_member_diverging_leaves_the_others_untouched():
    """A learning rate that blows up stops that member at the step it would stop alone; the
    others match their lone runs exactly as if it were not there."""
    specs = [_spec("teacher", "3", 0), _spec("teacher", "3", 1, lr=1e4), _spec("teacher", "3", 2)]
    together = trial.run_group(specs, "cpu")
    alone = [trial.run_trial(s, "cpu") for s in specs]
    assert alone[1]["status"] == "diverged" and together[1]["status"] == "diverged"
    for a, b in zip(alone, together, strict=True):
        _close(a, b)
    solo_pair = trial.run_group([specs[0], specs[2]], "cpu")
    assert together[0]["metrics"]["test_metric"] == solo_pair[0]["metrics"]["test_metric"]
    assert together[2]["metrics"]["test_metric"] == solo_pair[1]["metrics"]["test_metric"]


def _poisoned(data):
    """The task's data with every training input NaN: the fixed split and the fresh stream."""
    nan = float("nan")
    train = dataclasses.replace(data.train, x=data.train.x * nan)
    if not data.online:
        return dataclasses.replace(data, train=train)

    def sample(n, gen):
        x, y = data.sample(n, gen)
        return x * nan, y

    return dataclasses.replace(data, train=train, sample=sample)


@pytest.mark.parametrize("online", [True, False])
def test_nan_inputs_of_one_member_do_not_reach_the_others(online):
    """Per-member divergence on the engine itself: a member whose data are NaN diverges at its
    first step; the other members finish with finite weights and their lone results."""
    spec = _spec("teacher", "3", 0, options={"online": online})
    good = trial._prepare(spec, "cpu")
    bad = trial._prepare(dataclasses.replace(spec, seed=1), "cpu")
    assert good.data.online == online
    results, _ = train_ensemble(
        [good.model, bad.model], [good.data, _poisoned(bad.data)], [TRAIN] * 2, [0, 1], [0.0, 0.0]
    )
    assert results[1].status == "diverged" and results[1].diverged_step == 1
    assert results[0].status == "done"
    assert all(torch.isfinite(p).all() for p in good.model.parameters())
    ref = trial._prepare(spec, "cpu")
    alone = train(ref.model, ref.data, TRAIN, 0, 0.0)
    assert results[0].test_metric == pytest.approx(alone.test_metric, rel=1e-4)


def test_members_stay_usable_and_follow_the_ensemble():
    nets = []
    for seed in range(2):
        torch.manual_seed(seed)
        nets.append(Net(parse_arm("3"), NetShape(2, 8, norm="layer"), 4, 1))
    x = torch.randn(2, 5, 4)  # (E, B, F)
    ens = Ensemble(nets)
    with torch.no_grad():
        ens.params["layers.0.block.proj.weight"].mul_(2.0)
    out = ens(x)  # (E, B, 1)
    for e, net in enumerate(nets):
        assert torch.allclose(net(x[e]), out[e], atol=1e-5)
    assert not any(p.requires_grad for p in nets[0].parameters())


def _block_arms() -> list[Arm]:
    arms = []
    for name in BLOCKS.names():
        if name in ("poly", "fractional"):
            continue  # the polynomial family is reached through degrees
        arms.append(parse_arm(label(name, BLOCKS.get(name).examples[0])))  # `module` needs one
    return arms + [parse_arm("3"), parse_arm("2.5")]


@pytest.mark.parametrize("arm", _block_arms(), ids=lambda a: a.label)
def test_every_block_runs_in_an_ensemble(arm):
    """Contract: every registered block, on the path the engine picks for it, gives each
    member's own forward and gradients."""
    seq = 6 if mixes_tokens(arm) or BLOCKS.get(arm.block).needs_seq_len else None
    nets = []
    for seed in range(3):
        torch.manual_seed(seed)
        nets.append(
            Net(arm, NetShape(2, 8, norm="layer"), 4, 3, seq_len=seq, pooled=seq is not None)
        )
    shape = (3, 5, seq, 4) if seq else (3, 5, 4)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))  # (E, B, ...)
    refs = [torch.func.functional_call(n, dict(n.named_parameters()), (x[e],)) for e, n in
            enumerate(nets)]  # fmt: skip
    grads = []
    for e, n in enumerate(nets):
        n.zero_grad()
        refs[e].square().sum().backward()
        grads.append({k: p.grad.clone() for k, p in n.named_parameters()})
    ens = Ensemble(nets)
    assert ens.path == ("stacked" if BLOCKS.get(arm.block).stackable else "vmap")
    assert stackable(nets[0]) == (ens.path == "stacked")
    out = ens(x)
    out.square().sum().backward()
    for e in range(3):
        assert torch.allclose(out[e], refs[e].detach(), atol=1e-5, rtol=1e-4)
        for name, p in ens.params.items():
            assert torch.allclose(p.grad[e], grads[e][name], atol=1e-5, rtol=1e-4), name


def test_units_group_by_architecture_and_fill_the_workers():
    specs = [_spec("teacher", "3", s, lr) for s in range(4) for lr in (1e-3, 1e-2)]
    specs += [_spec("teacher", "2", s) for s in range(3)]
    units = batches(specs, ensemble=16, workers=2)
    # at most ceil(11 / 2) = 6 members each, split evenly
    assert sorted(len(u) for u in units) == [3, 4, 4]
    for unit in units:
        assert len({ensemble_key(s) for s in unit}) == 1
    assert [len(u) for u in batches(specs, ensemble=1, workers=1)] == [1] * 11
    measured = dataclasses.replace(specs[0], measures=("collapse",))
    assert ensemble_key(measured) is None


def test_configs_may_differ_in_learning_rate_only():
    specs = [_spec("teacher", "3", 0), _spec("teacher", "3", 1, steps=20)]
    prepared = [trial._prepare(s, "cpu") for s in specs]
    with pytest.raises(ValueError, match="learning rate only"):
        train_ensemble(
            [p.model for p in prepared],
            [p.data for p in prepared],
            [s.train for s in specs],
            [0, 1],
            [0.0, 0.0],
        )


@pytest.mark.parametrize("ignored", [False, True])
def test_the_ensembles_cross_entropy_is_torchs(ignored):
    """`member_losses` takes its own cross-entropy (fewer passes over large logits): equal to
    F.cross_entropy per member in values and gradients, a label whose probability underflows
    included, and with IGNORE labels left out of both."""
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(2, 40, 7, generator=gen)).requires_grad_()  # (E, B, C)
    labels = torch.randint(7, (2, 40), generator=gen)
    with torch.no_grad():
        logits[1, 5, labels[1, 5]] -= 300.0  # exp(-300) is 0 in float32
    if ignored:
        labels[0, :7] = IGNORE
        labels[1, 30:] = IGNORE
    weights = torch.randn(2, generator=gen)
    ours = member_losses(logits, labels, "classification")  # (E,)
    (grad,) = torch.autograd.grad((ours * weights).sum(), logits)
    ref = torch.stack([F.cross_entropy(logits[e], labels[e]) for e in range(2)])
    (ref_grad,) = torch.autograd.grad((ref * weights).sum(), logits)
    assert torch.isfinite(ours).all() and ours[1] > 290 / 40
    assert torch.allclose(ours, ref, rtol=1e-5, atol=1e-5)
    assert torch.allclose(grad, ref_grad, rtol=1e-5, atol=1e-6)
    if ignored:
        assert grad[0, :7].abs().max() == 0 and grad[1, 30:].abs().max() == 0


# The stacked path against its references, for every stackable block: each member alone (the
# forward, the gradients, a few optimizer steps through `train.train`), and the vmap path.

STEPS = TrainConfig(steps=4, batch_size=8, lr=1e-2, eval_points=1, warmup=0.0)


# Members trained stacked against each trained alone, in float64: bmm against mm sums each
# gradient entry in another order, a few ulps of its terms apart. Adam steps by m / (sqrt(v) +
# eps), so an entry that is itself a cancellation of larger terms carries that rounding into its
# step as a relative error of ulps times (terms / entry): in four steps the weights part by up to
# some 1e-6 of their scale (the language model's relu4x feed-forward most), the losses, second
# order in them at a smooth point, by some 1e-10. 1e-6 on the losses and 1e-4 of the tensor's
# scale on the weights leave a factor of 40 or more, on one thread or two; a member given another's
# seed, data or learning rate misses by percent.
TRAINED_REL = 1e-6


def _members(make, n: int = 3) -> list[nn.Module]:
    nets = []
    for seed in range(n):
        torch.manual_seed(seed)
        nets.append(make())
    return nets


def _near(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-4) -> bool:
    """Equal to float rounding at the tensor's own scale: sums of many terms with cancelling
    signs round differently by batched and single matmuls, so one entry alone may differ more."""
    return bool((a - b).abs().max() <= rtol * b.abs().max() + 1e-6)


def _grads(net: nn.Module, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, dict]:
    net.zero_grad()
    out = net(x)
    (out * w).sum().backward()
    return out.detach(), {k: p.grad.clone() for k, p in net.named_parameters()}


def _check_stacked(make, data: TaskData, n: int = 3) -> None:
    """Members built by `make` (seeded 0..n-1) on `data`: the stacked ensemble's forward and
    gradients equal each member's own and the vmap path's; after STEPS each member's weights
    equal its weights trained alone."""
    x = data.train.x[:5].expand(n, *data.train.x[:5].shape)  # (E, B, ...)
    nets = _members(make, n)
    w = torch.randn(n, *nets[0](x[0]).shape, generator=torch.Generator().manual_seed(3))
    alone = [_grads(net, x[e], w[e]) for e, net in enumerate(nets)]
    runs = {}
    for path in ("stacked", "vmap"):
        ens = Ensemble(_members(make, n), path)
        assert ens.path == path
        out = ens(x)  # (E, B, ...)
        (out * w).sum().backward()
        runs[path] = (out.detach(), {k: p.grad for k, p in ens.params.items()})
        for e, (ref, grads) in enumerate(alone):
            assert _near(out[e], ref), path
            for name, g in grads.items():
                assert _near(runs[path][1][name][e], g), (path, name)
    assert _near(runs["vmap"][0], runs["stacked"][0])
    for name, g in runs["stacked"][1].items():
        assert _near(runs["vmap"][1][name], g), name
    # trained in float64: Adam divides by sqrt(v) + eps, so on a gradient entry near zero
    # float32's rounding, which batched and single sums do differently, becomes a visible step
    # (hyena's filter network: 2e-4 of the weights' scale after 4 steps, on either path)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        data = _double(data)
        trained = _members(make, n)
        results, path = train_ensemble(trained, [data] * n, [STEPS] * n, list(range(n)), [0.0] * n)
        assert path == "stacked"
        for e, net in enumerate(_members(make, n)):
            ref = train(net, data, STEPS, e, 0.0)
            assert results[e].test_loss == pytest.approx(ref.test_loss, rel=TRAINED_REL, abs=1e-12)
            for (name, p), q in zip(trained[e].named_parameters(), net.parameters(), strict=True):
                assert _near(p, q, rtol=100 * TRAINED_REL), name
    finally:
        torch.set_default_dtype(default)


def _double(data: TaskData) -> TaskData:
    """The task's float tensors in float64 (token ids and labels stay integers)."""

    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.double() if t.is_floating_point() else t

    splits = {k: Split(cast(s.x), cast(s.y)) for k in ("train", "val", "test")
              for s in [getattr(data, k)]}  # fmt: skip
    return dataclasses.replace(data, **splits)


def _features(shape: tuple[int, ...], n_out: int) -> TaskData:
    g = torch.Generator().manual_seed(0)

    def split(k: int) -> Split:
        return Split(torch.randn(k, *shape, generator=g), torch.randn(k, n_out, generator=g))

    return TaskData(split(32), split(8), split(8), "regression", n_out, sequence=len(shape) > 1)


def _stackable_cases():
    return [c for c in cases() if c.cls.stackable]


@pytest.mark.parametrize("case", _stackable_cases(), ids=str)
def test_every_stackable_block_equals_its_members_alone(case):
    """Every registered block that says `stackable` (plugins included), with each of its
    examples, in a two-layer network on the stacked path."""
    arm = Arm(str(case), case.name, (), case.example)
    seq = 6 if case.cls.mixes_tokens or case.cls.needs_seq_len else None

    def make() -> Net:
        return Net(arm, NetShape(2, 8, norm="layer"), 4, 3, seq_len=seq, pooled=seq is not None)

    try:
        net = make()
    except UserError as exc:  # an example this network cannot hold (a width it refuses)
        pytest.skip(f"{case} does not build in a network: {exc}")
    assert stackable(net)
    _check_stacked(make, _features((seq, 4) if seq else (4,), 3))


def test_a_language_model_equals_its_members_alone():
    """Token ids, learned positions, causal softmax attention, a ReLU 4x feed-forward and layer
    norm: the depth-width experiment's transformer, on the stacked path."""
    arm = parse_arm("softmax_attention(heads=2,causal=true)")
    vocab, t = 32, 8

    def make() -> Net:
        return Net(
            arm, NetShape(2, 16, norm="layer", ff="relu4x"), vocab, vocab, seq_len=t, vocab=vocab
        )

    assert stackable(make())
    g = torch.Generator().manual_seed(0)

    def split(k: int) -> Split:
        ids = torch.randint(vocab, (k, t + 1), generator=g)  # (k, T + 1)
        return Split(ids[:, :-1], ids[:, 1:])  # (k, T): the next token is the target

    data = TaskData(
        split(32), split(8), split(8), "classification", vocab,
        sequence=True, per_position=True, vocab=vocab,
    )  # fmt: skip
    _check_stacked(make, data)

"""`input_rank` refuses a direction lost inside the network (LayerNorm over the inputs' width or
fewer hides the all-ones one) and states, without refusing, a bound the design chose: a linear
embedding narrower than the input, or a readout of fewer outputs than inputs on a network linear
in its inputs (logistic regression)."""

from __future__ import annotations

import pytest
import torch

from blocklab import options
from blocklab.errors import UserError
from blocklab.experiments.degree_sweep import DegreeSweepConfig, plan, preflight
from blocklab.experiments.degree_sweep.analysis.fit_checks import input_rank_check
from blocklab.experiments.degree_sweep.report.capacity import detail
from blocklab.measures._jacobian import input_rank
from blocklab.models import Net, parse_arm
from blocklab.specs import NetShape


def seen(degree: str, n_in: int, width: int, norm: str, n_out: int = 1, **shape):
    """A network's measured rank and its design's bound, on Gaussian inputs."""
    torch.manual_seed(0)
    net = Net(parse_arm(degree), NetShape(width=width, norm=norm, **shape), n_in, n_out)
    measured = input_rank(net, torch.randn(64, n_in))
    return measured, preflight.design_bound(net, measured)


def test_layer_norm_over_as_many_features_as_inputs_loses_a_direction_inside():
    measured, (bound, why) = seen("2", n_in=3, width=3, norm="layer")
    assert (measured.rank, bound, why) == (2, 3, None)  # no bound chosen: a direction lost
    measured, (bound, why) = seen("2", n_in=6, width=4, norm="layer")  # under a narrow embedding
    assert (measured.rank, bound, why) == (3, 4, "embedding of width 4")


def test_a_narrow_embedding_and_a_linear_classifier_are_bounds_the_design_chose():
    measured, bound = seen("2", n_in=6, width=4, norm="rms")
    assert (measured.rank, bound) == (4, (4, "embedding of width 4"))
    assert not measured.affine
    measured, bound = seen("1", n_in=8, width=8, norm="none", n_out=3, residual=False)
    assert measured.affine and measured.outputs == 3
    linear = "readout of 3 outputs on a network linear in its inputs"
    assert (measured.rank, bound) == (3, (3, linear))
    # the same readout on a nonlinear network bounds nothing: its gradients differ by example
    measured, bound = seen("2", n_in=8, width=8, norm="none", n_out=3, residual=False)
    assert (measured.rank, bound) == (8, (8, None))


def test_a_sequences_embedding_bounds_every_position():
    torch.manual_seed(0)
    net = Net(parse_arm("2"), NetShape(width=4), 6, 2, seq_len=5)  # 5 positions of 6 features
    measured = input_rank(net, torch.randn(64, 5, 6))
    assert measured.rank == 20
    bound = preflight.design_bound(net, measured)
    assert bound == (20, "embedding of width 4 at each of 5 positions")


def record(rank, inputs, width, bound=None, why=None):
    r = {"rank": rank, "inputs": inputs, "depth": 1, "width": width, "singular_values": []}
    return r if bound is None else {**r, "bound": bound, "bound_reason": why}


def test_the_check_fails_a_lost_direction_and_states_a_chosen_bound():
    lost = input_rank_check({"d=2": record(31, 40, 32, 32, "embedding of width 32")})
    assert not lost.passed
    assert "d=2 31 of 32" in detail(lost) and "width of 32" not in detail(lost)
    chosen = input_rank_check({
        "d=2": record(32, 40, 32, 32, "embedding of width 32"),
        "d=1": record(10, 40, 40, 10, "readout of 10 outputs on a network linear in its inputs"),
    })  # fmt: skip
    assert chosen.passed and chosen.bounds == (
        ("d=2", 32, "embedding of width 32"),
        ("d=1", 10, "readout of 10 outputs on a network linear in its inputs"),
    )
    said = detail(chosen)
    assert "not refused" in said and "d=2 at most 32 (embedding of width 32)" in said
    assert "d=1 at most 10 (readout of 10 outputs" in said
    # a record stored before bounds were measured: every arm against its inputs, as before
    assert not input_rank_check({"d=2": record(32, 40, 32)}).passed
    assert input_rank_check({"d=2": record(40, 40, 32)}).passed


def config(**given) -> DegreeSweepConfig:
    small = {"n_in": 3, "n_train": 64, "n_val": 16, "n_test": 64}
    shape = {"width": 3, "norm": "rms", "depth": 1, **given.pop("shape", {})}
    table = {"task_options": {**small, **given.pop("task_options", {})}, "shape": shape}
    return options.build(DegreeSweepConfig, {"degrees": "2", "baselines": "", "depths": "1",
                                             **table, **given})  # fmt: skip


def test_the_sweep_refuses_a_lost_direction_before_any_fit_naming_a_width_it_lacks():
    cfg = config(shape={"norm": "layer"})
    with pytest.raises(UserError) as caught:
        preflight.input_ranks(cfg, plan.shapes(cfg))
    said = str(caught.value)
    assert "input_rank" in said and "sees 2 of the task's 3" in said
    assert said.endswith("use a width of 4 or more, or --norm rms")


def test_the_sweep_runs_a_bound_the_design_chose_and_records_it():
    cfg = config(shape={"width": 2})  # an embedding of 3 inputs into width 2
    out = preflight.input_ranks(cfg, plan.shapes(cfg))["d=2"]
    assert (out["rank"], out["inputs"], out["bound"], out["bound_reason"]) == (
        2, 3, 2, "embedding of width 2",
    )  # fmt: skip
    cfg = config(degrees="1", shape={"width": 4, "norm": "none", "residual": False},
                 task_options={"n_out": 2})  # fmt: skip
    out = preflight.input_ranks(cfg, plan.shapes(cfg))["d=1"]
    assert (out["rank"], out["bound"]) == (2, 2) and out["bound_reason"].startswith("readout of 2")

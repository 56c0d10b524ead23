"""A trial's id stays what today's stores hold: `tests/data/trial_ids.json` keeps the ids that the
flat TrialSpec (before `NetShape`) gave eight specs covering every field, and the shape-held spec
must give the same, so a store written then is resumed, not rerun."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from blocklab.models import parse_arm
from blocklab.options import meta
from blocklab.specs import SINCE, NetShape, TrainConfig, TrialSpec

DATA = Path(__file__).resolve().parents[1] / "data"
CASES = json.loads((DATA / "trial_ids.json").read_text())
# the ids trials over every optimizer, schedule, warm start and ladder had before each setting
# declared who reads it (36 specs, 28 ids: the settings a trial does not read leave its id)
TRAIN_CASES = json.loads((DATA / "train_ids.json").read_text())
SHAPE = {f.name for f in dataclasses.fields(NetShape)}


def _spec(fields: dict) -> TrialSpec:
    f = dict(fields)
    shape = NetShape(**{k: f.pop(k) for k in list(f) if k in SHAPE})
    return TrialSpec(
        f.pop("task"), f.pop("task_options"), parse_arm(f.pop("arm")), f.pop("budget"), shape,
        TrainConfig(**f.pop("train")), f.pop("seed"), f.pop("data_seed", None),
        measures=tuple(f.pop("measures", ())), ladder=tuple(f.pop("ladder", ())),
    )  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_ids_are_the_flat_specs(case):
    assert _spec(case["fields"]).id == case["id"]


@pytest.mark.parametrize("case", TRAIN_CASES, ids=lambda c: c["id"])
def test_ids_are_those_stored_before_settings_declared_their_readers(case):
    assert _spec(case["fields"]).id == case["id"]


def test_a_setting_is_read_by_whom_its_declaration_says():
    """One declaration per setting: a fit's setting is unused by Adam and out of an Adam
    trial's id; an Adam setting is unused by a fit without a warm start and out of its id; decay
    is read under wsd alone; chains on a ladder alone; the precision never enters an id."""
    from blocklab.specs import READS, setting

    adam, fit = TrainConfig(), TrainConfig(optimizer="lm")
    for f in dataclasses.fields(TrainConfig):
        reads = f.metadata[READS]
        assert (f.name in adam.unused()) == (reads == "fit" or f.name == "decay")
        assert (f.name in fit.unused()) == (reads == "adam")
        if reads == "fit":
            assert f.metadata["help"].startswith("lbfgs, lm")
    warm = TrainConfig(optimizer="lm", warm_start=10, schedule="wsd")
    assert warm.unused() == {}
    assert "chains" not in warm.id_fields(ladder=False)
    assert "chains" in warm.id_fields(ladder=True)
    assert "precision" not in warm.id_fields(ladder=True)

    @dataclasses.dataclass(frozen=True)
    class Planted(TrainConfig):
        sketch: int = setting(0, "rows sketched", reads="fit", since=0)

    assert Planted(sketch=3).unread("sketch") == Planted().unread("sketch") is not None
    assert "sketch" not in Planted(optimizer="lm").id_fields(ladder=False)
    assert Planted(optimizer="lm", sketch=3).id_fields(ladder=False)["sketch"] == 3
    assert "sketch" not in Planted(optimizer="lm", sketch=3).unused()


def test_a_new_shape_switch_at_its_default_keeps_every_id(monkeypatch):
    """A switch added in one place, NetShape with `SINCE`, leaves stored ids as they were at its
    default and makes new ones away from it."""

    @dataclasses.dataclass(frozen=True)
    class Wider(NetShape):
        gate: bool = dataclasses.field(default=False, metadata={SINCE: False})

    import blocklab.specs as specs

    monkeypatch.setattr(specs, "NetShape", Wider)
    for case in CASES:
        spec = _spec(case["fields"])
        wide = dataclasses.replace(spec, shape=Wider(**dataclasses.asdict(spec.shape)))
        assert wide.id == case["id"]
        gated = dataclasses.replace(wide, shape=dataclasses.replace(wide.shape, gate=True))
        assert gated.id != case["id"]


@dataclasses.dataclass(frozen=True)
class Gated(NetShape):
    gate: bool = dataclasses.field(
        default=False, metadata={**meta("a gate after each block"), SINCE: False}
    )


def test_a_new_shape_switch_is_a_flag_and_a_config_key_that_reaches_the_trial(tmp_path):
    """The same one field is the degree sweep's `--gate` flag and its `[shape] gate` key, and it
    reaches every trial the sweep plans: no other place declares or copies it."""
    import argparse

    from blocklab import config
    from blocklab.experiments.degree_sweep import SHAPE, DegreeSweepConfig, plan

    @dataclasses.dataclass(frozen=True)
    class GatedSweep(DegreeSweepConfig):
        shape: Gated = Gated(**dataclasses.asdict(SHAPE))

    parser = argparse.ArgumentParser()
    config.add_flags(parser, GatedSweep)
    assert "a gate after each block (default: False)" in parser.format_help()
    flags = config.overrides(parser.parse_args(["--gate"]), GatedSweep)
    assert flags == {"shape": {"gate": True}}
    toml = tmp_path / "c.toml"
    toml.write_text("[shape]\ngate = true\n")
    for path, given in ((None, flags), (str(toml), {})):
        cfg = config.resolve(GatedSweep, GatedSweep(), path, given)
        specs = [plan.spec(cfg, arm, shape, 0.01, 0) for arm, shape in plan.shapes(cfg).values()]
        assert specs and all(s.shape.gate for s in specs)
    assert not plan.spec(
        GatedSweep(), *next(iter(plan.shapes(GatedSweep()).values())), 0.01, 0
    ).shape.gate

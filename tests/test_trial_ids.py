"""A trial's id stays what today's stores hold: `tests/data/trial_ids.json` keeps the ids that the
flat TrialSpec (before `NetShape`) gave eight specs covering every field, and the shape-held spec
must give the same, so a store written then is resumed, not rerun."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from blocklab.models import parse_arm
from blocklab.specs import SINCE, NetShape, TrainConfig, TrialSpec

CASES = json.loads((Path(__file__).parent / "data" / "trial_ids.json").read_text())
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

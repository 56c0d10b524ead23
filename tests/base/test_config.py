"""Options and configs: type coercion, unknown keys, defaults < TOML < flags."""

from pathlib import Path

import pytest

from blocklab import config, options
from blocklab.errors import UserError
from blocklab.experiments.degree_sweep import DegreeSweepConfig
from blocklab.specs import NetShape, TrainConfig


def test_unknown_key_suggests():
    with pytest.raises(UserError, match="did you mean 'steps'"):
        options.build(TrainConfig, {"stpes": 10})


def test_coercion_from_strings():
    train = options.build(TrainConfig, {"steps": "3", "lr": "1e-3", "threshold": "none"})
    assert train.steps == 3 and type(train.steps) is int
    assert train.lr == 1e-3 and type(train.lr) is float
    assert train.threshold is None
    cfg = options.build(
        DegreeSweepConfig,
        {"shape": {"bias": "true", "residual": "off"}, "degrees": "2,3", "budgets": "5,6"},
    )
    assert cfg.shape.bias is True and cfg.shape.residual is False
    assert cfg.degrees == ("2", "3")
    assert cfg.budgets == (5, 6)


@pytest.mark.parametrize(
    "values", [{"steps": "abc"}, {"steps": "2.5"}, {"lr": "fast"}, {"lr": "nan"}]
)
def test_bad_values_are_user_errors(values):
    with pytest.raises(UserError):
        options.build(TrainConfig, values)


def test_bad_bool_is_user_error():
    with pytest.raises(UserError):
        options.build(DegreeSweepConfig, {"bias": "maybe"})


def test_dataclass_validation_becomes_user_error():
    with pytest.raises(UserError, match="steps"):
        options.build(TrainConfig, {"steps": "0"})


def write(tmp_path, text):
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return str(path)


def test_resolve_precedence(tmp_path):
    path = write(tmp_path, 'seeds = 7\n\n[train]\noptimizer = "adam"\nsteps = 50\n')
    defaults = DegreeSweepConfig()
    from_toml = config.resolve(DegreeSweepConfig, defaults, path, {})
    assert (from_toml.seeds, from_toml.train.steps) == (7, 50)
    assert from_toml.train.lr == defaults.train.lr  # untouched nested keys keep their defaults
    flagged = config.resolve(DegreeSweepConfig, defaults, path, {"seeds": 2})
    assert (flagged.seeds, flagged.train.steps) == (2, 50)
    nested = config.resolve(DegreeSweepConfig, defaults, path, {"train": {"clip": "0.5"}})
    assert (nested.seeds, nested.train.steps, nested.train.clip) == (7, 50, 0.5)
    assert config.resolve(DegreeSweepConfig, defaults, None, {}) == defaults


@pytest.mark.parametrize("text", ["sedes = 3\n", "[train]\nstpes = 5\n"])
def test_resolve_unknown_toml_key(tmp_path, text):
    with pytest.raises(UserError, match="did you mean"):
        config.resolve(DegreeSweepConfig, DegreeSweepConfig(), write(tmp_path, text), {})


def test_resolve_invalid_toml(tmp_path):
    with pytest.raises(UserError, match="TOML"):
        config.resolve(DegreeSweepConfig, DegreeSweepConfig(), write(tmp_path, "seeds = = 3\n"), {})


def test_resolve_missing_file(tmp_path):
    with pytest.raises(UserError):
        config.resolve(DegreeSweepConfig, DegreeSweepConfig(), str(tmp_path / "none.toml"), {})


def test_split_list():
    assert options.split_list("2,[3,2],e") == ["2", "[3,2]", "e"]
    assert options.split_list(" 2 , e ,") == ["2", "e"]
    assert options.split_list("[3,2,3]") == ["[3,2,3]"]


def test_toml_string_lists_keep_brackets_and_bools_are_not_numbers():
    cfg = options.build(DegreeSweepConfig, {"degrees": "2,[3,2]"})
    assert cfg.degrees == ("2", "[3,2]")
    with pytest.raises(UserError):
        options.build(DegreeSweepConfig, {"seeds": True})


@pytest.mark.parametrize(
    "path", sorted(Path(__file__).resolve().parents[2].glob("examples/*.toml"))
)
def test_example_configs_resolve_and_plan(path):
    from blocklab.experiments import degree_sweep

    cfg = config.resolve(DegreeSweepConfig, DegreeSweepConfig(), str(path), {})
    assert degree_sweep.plan.shapes(cfg)  # every (budget, arm) has a shape within the tolerance


def test_an_empty_flag_list_means_none():
    from blocklab.cli import build_parser

    args = build_parser().parse_args(["degree-sweep", "--baselines", "--degrees", "3"])
    flags = config.overrides(args, DegreeSweepConfig, skip=("lr",))
    cfg = config.resolve(DegreeSweepConfig, DegreeSweepConfig(), None, flags)
    assert cfg.baselines == () and cfg.degrees == ("3",)


def test_help_shows_the_defaults_a_parent_config_sets():
    import argparse

    from blocklab.experiments.depth_width import DepthWidthConfig

    parser = argparse.ArgumentParser()
    config.add_flags(parser, DepthWidthConfig)
    text = " ".join(parser.format_help().split())
    quick = DepthWidthConfig().train
    assert quick.batch_size != TrainConfig().batch_size  # the experiment sets its own
    assert f"examples per step (default: {quick.batch_size})" in text
    assert f"peak learning rate (default: {quick.lr:g})" in text


def test_help_names_an_empty_default():
    import argparse
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Empty:
        names: tuple[str, ...] = dataclasses.field(default=(), metadata={"help": "names"})
        path: str = dataclasses.field(default="", metadata={"help": "a file"})

    parser = argparse.ArgumentParser()
    config.add_flags(parser, Empty)
    text = " ".join(parser.format_help().split())
    assert "names (default: none)" in text and "a file (default: '')" in text


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"clip": -1.0}, "clip"),
        ({"clip": 0.0}, "clip"),
        ({"blowup": 1.0}, "blowup"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"lr": float("inf")}, "lr"),
        ({"threshold": float("nan")}, "threshold"),
        ({"steps": 2.5}, "steps"),
        ({"steps": True}, "steps"),
    ],
)
def test_python_configs_hold_the_same_rules(kw, field):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**kw)
    with pytest.raises(ValueError, match=field):  # and inside an experiment's config
        options.build(DegreeSweepConfig, {"train": kw})


def test_field_rules():
    assert options.meta("x", ge=1) == {"help": "x", "ge": 1}
    with pytest.raises(TypeError, match="unknown field rules"):
        options.meta("x", minimum=1)
    with pytest.raises(ValueError, match="each of budgets must be >= 1"):
        DegreeSweepConfig(budgets=(3000, 0))
    with pytest.raises(ValueError, match="budgets must be a list"):
        DegreeSweepConfig(budgets=3000)
    with pytest.raises(ValueError, match="norm must be one of"):
        NetShape(norm="batch")


def test_number_flags_state_their_rules():
    import argparse

    count = config.number(int, ge=1)
    assert (count("3"), count.kind, count.rules) == (3, int, {"ge": 1})
    for bad in ("0", "1.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            count(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="finite"):
        config.number(float, gt=0)("inf")


def test_keys_the_config_does_not_read_fail(tmp_path):
    defaults = DegreeSweepConfig()
    adam = write(tmp_path, '[train]\noptimizer = "adam"\nlr = 0.5\n')
    with pytest.raises(UserError, match="train.lr is not used by degree-sweep: .*lr_grid"):
        config.resolve(DegreeSweepConfig, defaults, adam, {}, what="degree-sweep")
    # the default fit, Levenberg-Marquardt, reads no Adam setting and searches no rate
    cold = {"train": {"warm_start": "0", "clip": "0.5"}}
    with pytest.raises(UserError, match="train.clip is not used by .*--optimizer lm fits without"):
        config.resolve(DegreeSweepConfig, defaults, None, cold)
    # its Adam warm start reads them
    warm = config.resolve(DegreeSweepConfig, defaults, None, {"train": {"lr": "0.5"}})
    assert warm.train.lr == 0.5 and warm.train.warm_start > 0
    with pytest.raises(UserError, match="lr_grid is not used by .*without a learning rate"):
        config.resolve(DegreeSweepConfig, defaults, None, {"lr_grid": "0.1"})
    adam_flags = {"train": {"optimizer": "adam", "restarts": "3"}}
    with pytest.raises(UserError, match="train.restarts is not used by .*second-order"):
        config.resolve(DegreeSweepConfig, defaults, None, adam_flags)
    with pytest.raises(UserError, match="shape.depth is not used"):
        config.resolve(DegreeSweepConfig, defaults, None, {"shape": {"depth": "8"}})
    deep = config.resolve(
        DegreeSweepConfig,
        defaults,
        None,
        {"mode": "depth", "shape": {"depth": "8"}, "budgets": ["800"]},
    )
    assert deep.shape.depth == 8 and deep.shape.norm == defaults.shape.norm
    # a nested key at the top of a file is sent to its table, not called unknown
    flat = write(tmp_path, 'mode = "depth"\ndepth = 8\n')
    with pytest.raises(UserError, match=r"'depth' belongs in the \[shape\] table \(shape.depth\)"):
        config.resolve(DegreeSweepConfig, defaults, flat, {})

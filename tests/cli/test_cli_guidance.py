"""The command line guides its user: flags are spelled in full, a mistake is one line that says
what was likely meant, `--help` shows each experiment's choices under headings, and a reader that
stops early (`| head`) ends the command quietly."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import typing

import pytest

from blocklab import config
from blocklab.cli import build_parser, main
from blocklab.errors import UserError
from blocklab.experiments import EXPERIMENTS
from blocklab.experiments.degree_sweep import DegreeSweepConfig

HEADINGS = ("design:", "training:", "execution:", "output:")


def _fails(capsys, *args: str) -> str:
    """The one line a bad command prints, after checking it exits 2 with nothing else."""
    assert main(list(args)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert captured.err.count("\n") == 1, captured.err
    return captured.err.strip()


def _parsers(parser, words=()):
    """(words, parser) for the root and every subcommand under it."""
    yield words, parser
    for action in parser._subparsers._actions if parser._subparsers else ():
        for name, sub in (getattr(action, "choices", None) or {}).items():
            yield from _parsers(sub, (*words, name))


def _help(*words: str) -> str:
    for found, parser in _parsers(build_parser()):
        if found == words:
            return parser.format_help()
    raise KeyError(words)


def _sections(text: str) -> dict[str, str]:
    """{heading: its lines} of a help text."""
    out, current = {}, ""
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = line
        out[current] = out.get(current, "") + line + "\n"
    return out


# fails as the config is resolved, so a parse that let the flags before it through stops there
# rather than running the sweep
STOP = ("--degrees", "0")


def test_a_prefix_of_a_flag_is_not_read_as_the_flag():
    with pytest.raises(UserError, match=r"unrecognized argument --seed \(did you mean --seeds\?\)"):
        build_parser().parse_args(["degree-sweep", "--seed", "3"])
    assert not any(parser.allow_abbrev for _, parser in _parsers(build_parser()))


def test_an_unknown_flag_names_its_command_once(capsys, tmp_path):
    err = _fails(capsys, "degree-sweep", "--seed", "3", "--out", str(tmp_path), *STOP)
    assert err == (
        "blocklab: error: blocklab degree-sweep: unrecognized argument --seed "
        "(did you mean --seeds?)"
    )
    assert _fails(capsys, "--verison", "theory") == (
        "blocklab: error: unrecognized argument --verison (did you mean --version?)"
    )
    err = _fails(capsys, "sanford", "match", "--widht", "6", "--seedz=2")
    assert err.startswith("blocklab: error: blocklab sanford match: unrecognized arguments ")
    assert "--widht (did you mean --widths?), --seedz (did you mean --seeds?)" in err


def test_no_close_flag_no_suggestion(capsys):
    err = _fails(capsys, "theory", "--zzzzzzzz")
    assert err == "blocklab: error: blocklab theory: unrecognized argument --zzzzzzzz"
    assert _fails(capsys, "theory", "stray", "words").endswith("unrecognized arguments stray words")


def test_an_unknown_subcommand_suggests_one(capsys):
    err = _fails(capsys, "degre-sweep")
    assert "invalid choice 'degre-sweep': did you mean 'degree-sweep'?" in err
    assert "(choose from " in err and err.count("blocklab") == 1
    assert "did you mean 'qsa'?" in _fails(capsys, "sanford", "qas")


def test_help_groups_the_flags_and_shows_the_choices():
    text = _help("degree-sweep")
    assert all(heading in text for heading in HEADINGS)
    assert "--mode {width,depth}" in text and "--norm {none,layer,rms}" in text
    sections = _sections(text)
    assert "--mode" in sections["design:"] and "--degrees" in sections["design:"]
    assert "--optimizer {adam,lbfgs,lm}" in sections["training:"]
    assert "--schedule {cosine,wsd}" in sections["training:"]
    assert "--steps" in sections["training:"] and "--steps" not in sections["design:"]
    execution = sections["execution:"]
    for flag in ("--workers", "--device", "--ensemble", "--executor ", "--fresh", "--reuse-stale"):
        assert flag in execution, flag
    for flag in ("--out", "--json", "--tracker", "--quiet"):
        assert flag in sections["output:"], flag
    assert "(the defaults)" in " ".join(text.split())  # its time, or that none was measured


def test_each_form_on_a_manifest_is_its_configs_and_a_flag():
    for name in EXPERIMENTS.names():
        experiment = EXPERIMENTS.get(name)
        for form in experiment.forms:
            assert isinstance(inspect.getattr_static(experiment.Config, form), classmethod), form
            text = _help(*experiment.commands[-1].words.split())
            assert f"--{form.replace('_', '-')}" in text, (name, form)


def test_every_experiment_command_has_headings_a_description_and_its_choices():
    for name in EXPERIMENTS.names():
        experiment = EXPERIMENTS.get(name)
        for command in experiment.commands:
            text = " ".join(_help(*command.words.split()).split())
            assert all(heading in text for heading in HEADINGS[2:]), command.words
            assert f"{command.help}." in text, command.words
            for field, choices in _choices(experiment.Config):
                assert "{" + ",".join(choices) + "}" in text, (command.words, field)


def _choices(cls) -> list[tuple[str, tuple]]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += _choices(hints[f.name])
        elif "choices" in f.metadata:
            out.append((f.name, tuple(f.metadata["choices"])))
    return out


def test_a_bad_choice_fails_as_it_is_parsed(capsys, tmp_path):
    with pytest.raises(UserError, match=r"--norm: invalid choice 'bogus' \(choose from none, la"):
        build_parser().parse_args(["degree-sweep", "--norm", "bogus"])
    err = _fails(capsys, "degree-sweep", "--norm", "lyer", "--out", str(tmp_path), *STOP)
    assert "did you mean 'layer'?" in err and "(choose from none, layer, rms)" in err
    assert not any(tmp_path.iterdir())  # refused before the run directory was touched


def test_a_list_flag_checks_each_name_in_either_spelling():
    parse = build_parser().parse_args
    for given in (["match2,match3"], ["match2", "match3"]):
        args = parse(["sanford", "match", "--tasks", *given])
        assert config.overrides(args, EXPERIMENTS.get("sanford_match").Config)["tasks"] == [
            "match2",
            "match3",
        ]
    with pytest.raises(UserError, match=r"invalid choice 'match4': did you mean 'match3'\?"):
        parse(["sanford", "match", "--tasks", "match2,match4"])


def test_a_config_file_is_held_to_the_same_choices(tmp_path):
    path = tmp_path / "bad.toml"
    for table, key in (("shape", "norm"), ("", "mode"), ("shape", "activation"), ("shape", "ff")):
        path.write_text(f'[{table}]\n{key} = "bogus"\n' if table else f'{key} = "bogus"\n')
        with pytest.raises(UserError, match=f"{key} must be one of"):
            config.resolve(DegreeSweepConfig, DegreeSweepConfig(), str(path), {})
    path.write_text('[train]\noptimizer = "sgd"\n')
    with pytest.raises(UserError, match="optimizer must be one of adam, lbfgs, lm"):
        config.resolve(DegreeSweepConfig, DegreeSweepConfig(), str(path), {})


def test_a_reader_that_stops_early_ends_the_command_quietly():
    """The reader closes before the command writes (as `| head -1` does once it has its line):
    the write fails, and the command ends with SIGPIPE's status and nothing on stderr."""
    command = [sys.executable, "-m", "blocklab.cli", "theory", "--degrees", "2", "e", "3"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141, err
    assert err == "", err


def test_a_shell_pipeline_into_head_is_quiet():
    pipeline = f"{sys.executable} -m blocklab.cli theory --degrees 2 e 3 | head -1"
    proc = subprocess.run(pipeline, shell=True, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_a_pipe_other_than_stdout_breaking_is_not_hidden(monkeypatch):
    from blocklab.cli import theory

    def broken(args):
        raise BrokenPipeError("a worker's pipe")

    monkeypatch.setattr(theory, "run", broken)
    with pytest.raises(BrokenPipeError, match="a worker's pipe"):
        main(["theory"])

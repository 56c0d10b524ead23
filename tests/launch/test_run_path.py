"""One run path: the command line and `blocklab.api.run` both run an experiment through
`launch.run`, which alone loads the plugins, resolves and sizes the config and runs it; and
sizing is the manifest's hook (`Experiment.sizing`), which `launch` calls."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import blocklab
from blocklab import api, launch
from blocklab.cli import main
from blocklab.experiments import Experiment, Sizing
from blocklab.experiments.degree_sweep import DegreeSweep, sizing

SRC = Path(blocklab.__file__).resolve().parent

# the steps of a run that only `launch.run` takes: a caller that takes one itself repeats it
STEPS = {
    ("plugins", "load"),
    ("cfgmod", "imports"),
    ("cfgmod", "resolve"),
    ("launch", "find"),
    ("launch", "resolve"),
    ("launch", "sized"),
    ("launch", "execute"),
    ("launch", "failure_lines"),
    ("launch", "lost_an_arm"),
    ("importlib", "import_module"),
}


def _calls(source: str) -> set[tuple[str, str]]:
    """(module, name) of every `module.name(...)` call in `source`, and ("sizing", "size") for a
    call of a sizing hook's `size`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name):
                found.add((owner.id, node.func.attr))
            elif isinstance(owner, ast.Attribute) and owner.attr == "sizing":
                found.add(("sizing", node.func.attr))
    return found


def _repeated(source: str) -> list[tuple[str, str]]:
    return sorted(_calls(source) & (STEPS | {("sizing", "size")}))


@pytest.mark.parametrize("module", ["api.py", "cli/experiment.py"])
def test_both_callers_call_the_run_path_and_repeat_none_of_its_steps(module):
    source = (SRC / module).read_text()
    assert ("launch", "run") in _calls(source)
    assert _repeated(source) == []


def test_the_check_names_a_planted_step():
    """The check above, on a caller that still loads the plugins and sizes the config itself."""
    planted = (
        "def run(experiment, args):\n"
        "    plugins.load(args.imports)\n"
        "    cfg, plan = experiment.sizing.size(cfg, args.out, False)\n"
        "    return launch.run(args.command, lambda e: {})\n"
    )
    assert _repeated(planted) == [("plugins", "load"), ("sizing", "size")]


class Reached(Exception):
    """What the planted `launch.execute` raises: the inputs the run path gave it."""


def test_the_command_and_the_call_reach_the_same_run(monkeypatch, tmp_path):
    """The command's flags and the call's keywords make the same inputs of `launch.execute`
    (the experiment, the config, the directory, where the trials run), each through
    `launch.run`; only the record of the call differs."""
    entered = []
    real = launch.run

    def spy(words, given, **rest):
        entered.append(words)
        return real(words, given, **rest)

    def execute(experiment, cfg, out, **rest):
        raise Reached(experiment, cfg, str(out), rest)

    monkeypatch.setattr(launch, "run", spy)
    monkeypatch.setattr(launch, "execute", execute)
    out = str(tmp_path / "run")
    with pytest.raises(Reached) as call:
        api.run("degree-sweep", out=out, seeds=2, steps=8, workers=1, progress=False)
    flags = ["--seeds", "2", "--steps", "8", "--workers", "1", "--quiet"]
    with pytest.raises(Reached) as command:
        main(["degree-sweep", "--out", out, *flags])
    assert entered == ["degree-sweep", "degree-sweep"]
    (found, cfg, where, given), (found2, cfg2, where2, given2) = call.value.args, command.value.args
    assert (found, cfg, where) == (found2, cfg2, where2) and found is DegreeSweep
    assert cfg.seeds == 2 and cfg.train.steps == 8
    assert given.pop("command").startswith("blocklab.api.run('degree-sweep'")
    assert given2.pop("command") == f"blocklab degree-sweep --out {out} {' '.join(flags)}"
    assert given == given2 and given["resources"].workers == 1


def test_the_degree_sweep_declares_its_sizing_on_its_manifest():
    assert DegreeSweep.sizing == Sizing(sizing.size, sizing.plan_lines)
    assert Experiment.sizing is None


@dataclass(frozen=True)
class _Config:
    target_resolution: float | None = None
    teachers: int = 2


def test_launch_sizes_a_run_by_the_manifests_hook_alone(tmp_path):
    """An experiment with a sizing hook and no report module is sized by the hook: `launch`
    asks the manifest, never a module by name; one without a hook, or a config without a
    resolution, is run as given."""
    asked = []

    def size(cfg, out, pinned):
        asked.append((cfg, out, pinned))
        return _Config(cfg.target_resolution, 9), "the plan"

    class Sized(Experiment):
        Config = _Config
        report = "no.such.module"
        sizing = Sizing(size, lambda plan, cfg, words: [plan])

    cfg = _Config(0.1)
    assert launch.sized(Sized, cfg, tmp_path, pinned=True) == (_Config(0.1, 9), "the plan")
    assert asked == [(cfg, tmp_path, True)]

    class Unsized(Sized):
        sizing = None

    assert launch.sized(Unsized, cfg, tmp_path, pinned=False) == (cfg, None)
    assert launch.sized(Sized, _Config(), tmp_path, pinned=False) == (_Config(), None)
    assert len(asked) == 1

"""A command's --help states the values that command runs with: `blocklab demo` shows the demo
form's, not the quick defaults `blocklab degree-sweep` runs."""

from __future__ import annotations

import argparse

from blocklab.cli.main import build_parser
from blocklab.experiments import EXPERIMENTS


def _parser(words: str) -> argparse.ArgumentParser:
    """The subcommand's parser of `words` ("demo", "sanford qsa")."""
    p = build_parser()
    for word in words.split():
        (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        p = sub.choices[word]
    return p


def _helps(words: str) -> dict[str, str]:
    """Each flag's help as `--help` prints it (one line), by its destination."""
    p = _parser(words)
    p.format_help()  # what --help prints: a form's defaults are filled in then
    return {a.dest: " ".join((a.help or "").split()) for a in p._actions}


def test_the_demo_states_its_own_form_and_degree_sweep_its_defaults():
    demo, sweep = _helps("demo"), _helps("degree-sweep")
    said = {k: demo[k].rsplit("(default: ", 1)[-1] for k in ("steps", "seeds", "teachers")}
    from blocklab.experiments.degree_sweep.config import DEMO_TEACHERS

    assert said == {"steps": "512)", "seeds": "1)", "teachers": f"{DEMO_TEACHERS})"}
    assert demo["baselines"].endswith("(default: none)")
    assert sweep["baselines"].endswith("(default: mlp)") and sweep["steps"].endswith(
        "(default: 1024)"
    )
    assert "(this command: activation=relu)" in demo["task_option"]
    assert "this command" not in sweep["task_option"]


def test_every_command_states_the_config_it_runs():
    """Each scalar setting of each command's config, as that command resolves it with no flag,
    is the default its --help names."""
    checked = 0
    for name in EXPERIMENTS.names():
        experiment = EXPERIMENTS.get(name)
        for command in experiment.commands:
            runs = experiment.defaults(command.words)
            helps = _helps(command.words)
            for key in ("seeds", "teachers", "steps", "depth", "width"):
                holder = next((c for c in (runs, getattr(runs, "train", None),
                                           getattr(runs, "shape", None))
                               if c is not None and hasattr(c, key)), None)  # fmt: skip
                if holder is None or key not in helps:
                    continue
                value = getattr(holder, key)
                assert helps[key].endswith(f"(default: {value})"), (command.words, key)
                checked += 1
    assert checked >= 10

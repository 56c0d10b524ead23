"""Plugins through the command line: `--import` of a file or a module, a TOML config's `import`,
entry points of a distribution found on the path, the `module` block, and `blocklab check`.
A plugin registers for the life of its process: commands run here through `_isolated`, which
undoes what they import, and one through a fresh interpreter, as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _isolated import Ran, isolated
from blocklab.blocks import BLOCKS
from blocklab.checks import blocks as block_contract
from blocklab.cli import main
from blocklab.store import Store

# what `blocklab check` prints for two blocks that pass every check of the contract
ALL_PASSED_TWICE = "{0} of {0} checks passed".format(2 * len(block_contract.CHECKS))

ROOT = Path(__file__).resolve().parents[2]

CUBIC = """
import torch
from torch import nn

from blocklab.blocks import BLOCKS, Block


@BLOCKS.register
class Cubic(Block):
    degree = 3

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.linear = nn.Linear(d_in, d_out, bias=False)

    @property
    def homogeneous_degree(self):
        return 3.0

    @classmethod
    def count_params(cls, d_in, d_out):
        return d_in * d_out{extra}

    def forward(self, x):
        return self.linear(x) ** 3  # (..., D_out)

    @torch.no_grad()
    def scale_output_(self, c):  # (W x)^3 is c times itself when W is c^(1/3) times
        self.linear.weight *= c ** (1 / 3)

    def silence_(self):  # at W = 0 the gradient 3 (W x)^2 x is zero too: shrink W instead
        self.scale_output_(1e-6)
        return False


def make(width):  # a factory for the module block
    return nn.Sequential(nn.Linear(width, width), nn.Tanh())
"""
BROKEN = "raise RuntimeError('boom at import')\n"
ENTRY_BLOCK = CUBIC.replace("class Cubic", "class EntryCubic").format(extra="")

# a degree sweep small enough for a test
SWEEP = ["--optimizer", "adam", "--task", "teacher", "--task-option", "n_train=256"]
SWEEP += ["--task-option", "n_val=64"]
SWEEP += ["--task-option", "n_test=128", "--budgets", "3072", "--width", "16", "--steps", "20"]
SWEEP += ["--seeds", "2", "--lr-grid", "3e-3", "--lr-extend", "0", "--degrees", "3", "--quiet"]
SWEEP += ["--n-boot", "20"]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def cubic(folder: Path, name: str = "cubic", exact: bool = True) -> Path:
    """A plugin block file; with exact=False its count_params is off by one."""
    return write(folder / f"{name}.py", CUBIC.format(extra="" if exact else " + 1"))


def distribution(site: Path, name: str, entry_points: str, modules: dict[str, str]) -> Path:
    """An installed-looking distribution in `site`: its package and a dist-info directory that
    importlib.metadata finds on sys.path."""
    for module, text in modules.items():
        write(site / name / f"{module}.py", text)
    info = site / f"{name}-0.1.dist-info"
    write(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    write(info / "entry_points.txt", entry_points)
    return site


def blocklab(*args: str, path: tuple[Path, ...] = (), cwd: Path | None = None) -> Ran:
    """The command run in this process, as a fresh interpreter on `path` in `cwd` would run it,
    and undone after (`_isolated`)."""
    return isolated(*args, path=path, cwd=cwd)


def fresh_interpreter(*args: str, path: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    """The command as a user runs it: a new interpreter, with `path` on its PYTHONPATH."""
    env = dict(os.environ)
    given = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, path), *given])
    return subprocess.run(
        [sys.executable, "-m", "blocklab", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def one_line_error(proc: Ran | subprocess.CompletedProcess) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stderr
    assert len(err.splitlines()) == 1 and err.startswith("blocklab: error:"), err
    return err


def statuses(out: Path) -> dict[str, list[str]]:
    by_arm: dict[str, list[str]] = {}
    for record in Store(out).records():
        by_arm.setdefault(record["config"]["arm"]["label"], []).append(record["status"])
    return by_arm


@pytest.mark.slow
def test_file_entry_point_and_factory_plugins_reach_pool_workers(tmp_path):
    """Pool workers resolve each plugin block by name: one imported by a TOML config (its
    path read from the config's folder, the command run from another, and the import done before
    the config is resolved, which names the block), one from an entry point, and the `module`
    block wrapping a factory of the imported file."""
    cubic(tmp_path / "conf")
    config = write(
        tmp_path / "conf" / "sweep.toml",
        'import = ["cubic.py"]  # read from the config\'s folder\nbaselines = ["cubic"]\n',
    )
    site = distribution(
        tmp_path / "site",
        "epdemo",
        "[blocklab.blocks]\nentry_cubic = epdemo.entry_cubic\n",
        {"__init__": "", "entry_cubic": ENTRY_BLOCK},
    )
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    out = tmp_path / "sweep"
    arms = ["cubic", "entry_cubic", "module(factory=cubic:make)"]
    # one seed: the rate search's round of the pool trains every trial, the seeds' reuses them
    proc = blocklab(
        "degree-sweep", "--config", str(config), "--baselines", *arms, "--workers", "2",
        "--out", str(out), "--json", *SWEEP, "--seeds", "1", path=(site,), cwd=elsewhere,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summaries = json.loads(proc.stdout)["summaries"]
    assert {s["arm"] for s in summaries} == {"d=3", *arms}
    assert all(s["n"] == 1 for s in summaries)
    # without the plugins in the workers these trials would be stored as failed
    assert statuses(out) == {arm: ["done"] for arm in ["d=3", *arms]}


def test_a_toml_configs_import_must_be_a_list(tmp_path):
    """(That a config's import is read before it is resolved, and reaches the pool's workers,
    is the test above.)"""
    bad = write(tmp_path / "conf" / "bad.toml", "import = 3\n")
    err = one_line_error(blocklab("degree-sweep", "--config", str(bad), "--out", str(tmp_path)))
    assert "import must be a list" in err


def test_an_unknown_name_after_an_import_still_suggests(tmp_path):
    plugin = cubic(tmp_path)
    args = ["--import", str(plugin), "--baselines", "cubci", "--out", str(tmp_path / "o")]
    err = one_line_error(blocklab("degree-sweep", *args, *SWEEP))
    assert "did you mean 'cubic'" in err


def test_a_block_is_found_by_module_name_and_by_entry_point(tmp_path):
    """`--import mypkg.quartic_block` (a module name on the path, the plugin file's block under
    another name) and an entry point found without any import: one command checks both, and
    every check of each passes."""
    write(tmp_path / "mypkg" / "__init__.py", "")
    cubic(tmp_path / "mypkg", name="quartic_block")
    site = distribution(
        tmp_path / "site",
        "epdemo",
        "[blocklab.blocks]\nentry_cubic = epdemo.entry_cubic\n",
        {"__init__": "", "entry_cubic": ENTRY_BLOCK},
    )
    proc = fresh_interpreter(
        "check", "--import", "mypkg.quartic_block", "--only", "quartic_block", "entry_cubic",
        path=(tmp_path, site),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "quartic_block" in proc.stdout and "entry_cubic" in proc.stdout
    assert ALL_PASSED_TWICE in proc.stdout


@pytest.mark.parametrize(
    "make, named",
    [
        (lambda d: str(write(d / "broken_plugin.py", BROKEN)), ["broken_plugin.py", "boom"]),
        (lambda d: str(d / "missing_plugin.py"), ["missing_plugin.py", "no such file"]),
        (lambda d: "no_such_plugin_module", ["no_such_plugin_module", "ModuleNotFoundError"]),
        (lambda d: str(write(d / "9lives.py", "")), ["9lives.py", "identifier"]),
    ],
    ids=["raises", "missing-file", "missing-module", "bad-name"],
)
@pytest.mark.parametrize("command", [["check"], ["theory"], ["degree-sweep", "--quiet"]])
def test_a_broken_plugin_is_one_line_naming_it(tmp_path, capsys, make, named, command):
    assert main([*command, "--import", make(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("blocklab: error: plugin"), err
    assert all(word in err for word in named), err


def test_a_command_run_here_leaves_no_plugin_behind(tmp_path):
    """What the tests here rely on: a command run through `_isolated` takes its plugin with it."""
    site = distribution(
        tmp_path / "site",
        "epdemo",
        "[blocklab.blocks]\nentry_cubic = epdemo.entry_cubic\n",
        {"__init__": "", "entry_cubic": ENTRY_BLOCK},
    )
    plugin = cubic(tmp_path)
    ran = blocklab("check", "--import", str(plugin), "--only", "cubic", "entry_cubic", path=(site,))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert not {"cubic", "epdemo", "epdemo.entry_cubic"} & set(sys.modules)
    assert "cubic" not in BLOCKS and "entry_cubic" not in BLOCKS
    assert str(site) not in sys.path


def test_check_names_a_wrong_count(tmp_path):
    """(The same block with its count right passes every check: the module-name test above.)"""
    # beside one registered block, task and measure: the contract battery of every registered
    # entry runs in the suite itself (test_blocks, test_tasks, test_measures)
    bad = blocklab(
        "check", "--import", str(cubic(tmp_path / "bad", exact=False)), "--json",
        "--only", "cubic", "mlp", "teacher", "functional",
    )  # fmt: skip
    assert bad.returncode == 1, bad.stderr
    payload = json.loads(bad.stdout)
    assert payload["passed"] is False
    assert {c["name"] for c in payload["checks"]} == {"cubic", "mlp", "teacher", "functional"}
    failed = [c for c in payload["checks"] if not c["passed"]]
    assert [(c["kind"], c["name"], c["check"]) for c in failed] == [("block", "cubic", "params")]
    assert failed[0]["message"] == "count_params gives 36, the block has 35 trainable parameters"
    text = blocklab("check", "--import", str(tmp_path / "bad" / "cubic.py"), "--only", "cubic")
    assert text.returncode == 1
    assert "FAIL block cubic [params]: count_params gives 36" in text.stdout


def test_a_broken_entry_point_is_one_line_naming_it(tmp_path):
    site = distribution(
        tmp_path,
        "epbroken",
        "[blocklab.measures]\nbad_measure = epbroken.bad_measure\n",
        {"__init__": "", "bad_measure": BROKEN},
    )
    err = one_line_error(blocklab("check", "--only", "mlp", path=(site,)))
    assert "bad_measure = epbroken.bad_measure" in err and "boom at import" in err
    # entry points load on a registry's first lookup: the help never reads them
    assert blocklab("--help", path=(site,)).returncode == 0


def test_check_only_an_unknown_name_suggests(capsys):
    assert main(["check", "--only", "ploy"]) == 2
    assert "did you mean 'poly'" in capsys.readouterr().err


def test_the_module_blocks_through_the_command_line(tmp_path):
    plugin = cubic(tmp_path)
    proc = blocklab("check", "--import", str(plugin), "--only", "module", "mixing_module", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {c["name"] for c in json.loads(proc.stdout)["checks"]}
    assert names == {"module", "mixing_module"}
    # a factory of a plugin file, given to a command that measures the network it builds
    proc = blocklab(
        "seprank", "measure", "--import", str(plugin), "--block", "module(factory=cubic:make)",
        "--depth", "1", "--templates", "4", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    err = one_line_error(blocklab("seprank", "measure", "--block", "module(factory=nope:make)"))
    assert "cannot import 'nope'" in err


def stale_said(err: str, how: str) -> int:
    """The stored trials a run said were made by other code (one line per batch of trials it
    planned), each line ending in `how`."""
    found = re.findall(
        r"^blocklab: (\d+) stored trials? (?:was|were) made by other code: (.*)$", err, re.M
    )
    assert found and all(h == how for _, h in found), err
    return sum(int(n) for n, _ in found)


@pytest.mark.slow
def test_an_edited_plugin_reruns_its_trials_and_says_so(tmp_path, trials_only):
    """The stale-result scenario: edit a plugin block, rerun the same command: its trials (and
    only its) rerun, with one line saying so; --reuse-stale keeps them; runs list marks them.
    Each command ends once its trials are stored (`trials_only`): its report is not read."""
    plugin = cubic(tmp_path)
    out = tmp_path / "sweep"
    args = ["degree-sweep", "--import", str(plugin), "--baselines", "cubic", "--out", str(out)]
    args += [*SWEEP, "--workers", "1"]

    def finished() -> dict[str, float]:
        return {r["id"]: r["finished_at"] for r in Store(out).records()}

    assert blocklab(*args).returncode == 0
    first = finished()
    plugin.write_text(plugin.read_text().replace("** 3  #", "** 3 / 2  #"))

    proc = blocklab(*args, "--reuse-stale")
    assert stale_said(proc.stderr, "reusing (--reuse-stale)") == 2
    assert finished() == first
    listed = blocklab("runs", "list", "--out", str(out), "--import", str(plugin))
    assert listed.stdout.count("stale") == 2 and "(2 stale" in listed.stderr

    proc = blocklab(*args)
    assert proc.returncode == 0, proc.stderr
    assert stale_said(proc.stderr, "rerunning (--reuse-stale keeps them)") == 2
    again = finished()
    rerun = {i for i in first if again[i] != first[i]}
    cubic_ids = {r["id"] for r in Store(out).records() if r["config"]["arm"]["label"] == "cubic"}
    assert rerun == cubic_ids and len(rerun) == 2  # the d=3 trials are kept
    listed = blocklab("runs", "list", "--out", str(out), "--import", str(plugin))
    assert "stale" not in listed.stdout

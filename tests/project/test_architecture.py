"""The shape of the code, as ARCHITECTURE.md states it: imports flow one way, files stay short,
the registries it names exist, the command line's help costs no torch, and one file adds an
experiment (this module adds one, with its report, and runs it through the command line)."""

from __future__ import annotations

import ast
import graphlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import import_module, metadata
from pathlib import Path

import pytest

import blocklab
from blocklab.cli import build_parser, main
from blocklab.experiments import EXPERIMENTS, Command, Experiment
from blocklab.registry import Registry
from blocklab.reports import Report

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(blocklab.__file__).resolve().parent

# bottom to top: a module may import its own layer and those below it (ARCHITECTURE.md).
# analysis sits above the experiments: an experiment gathers and stores its trials, and every
# statistic of them is computed above it. Reports write the words over analysis; trackers log
# what the store holds and never need a report module (nor matplotlib's backend with it). The
# engine runs trials through fitting (a trial's training and fits), which never imports it; the
# bench times the fitting loops alone. The one run path (`launch`) sits above the reports it
# writes, and both its callers above it: the command line and the Python API.
LAYERS = [
    {
        "",
        "errors",
        "options",
        "registry",
        "config",
        "store",
        "theory",
        "specs",
        "numerics",
        "rundir",
    }
    | {"fingerprint", "plugins", "frames", "formatting", "sample_size", "timings"},
    {"blocks", "tasks", "measures", "jacobian"},
    {"models", "budget", "checks", "constructions"},
    {"fitting", "bench"},
    {"engine"},
    {"experiments"},
    {"analysis", "trackers"},
    {"reports"},
    {"launch"},
    {"cli", "__main__", "api"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


# an experiment's home (a package under experiments/) holds its statistics and its report, each
# in its layer, a module or a subfolder: experiments/collapse/analysis.py and
# experiments/degree_sweep/analysis/ are analysis, .../report.py and .../report/ are reports
HOME_LAYERS = {"analysis": "analysis", "report": "reports"}


def _component(module: str) -> str:
    """'blocklab.experiments.collapse' -> 'experiments'; 'blocklab' -> ''; inside an experiment's
    home, its `analysis` -> 'analysis' and its `report` -> 'reports', modules or subpackages
    ('blocklab.experiments.collapse.report', 'blocklab.experiments.degree_sweep.report.plots' ->
    'reports')."""
    parts = module.split(".")
    if len(parts) > 3 and parts[1] == "experiments" and parts[3] in HOME_LAYERS:
        return HOME_LAYERS[parts[3]]
    return parts[1] if len(parts) > 1 else ""


def _home(path: Path) -> str:
    """The component a source file belongs to: its folder (an experiment's `analysis` or
    `report` subfolder, that layer's), or its own name at the top."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return "" if parts == ("__init__",) else _component(".".join(("blocklab", *parts)))


def _imports(tree: ast.AST):
    """Every blocklab module a file imports, at the top, inside a function or under
    `if TYPE_CHECKING:`: a type hint from a layer above is an import loop waiting to happen."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "blocklab")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "blocklab":
            # `from blocklab import theory, __version__`, `from blocklab.experiments.degree_sweep
            # import report`: a name that is a module is that module, else the package
            folder = SRC.joinpath(*node.module.split(".")[1:])
            for a in node.names:
                is_module = (folder / a.name).is_dir() or (folder / f"{a.name}.py").exists()
                yield f"{node.module}.{a.name}" if is_module else node.module


def _against_layers(sources: dict[Path, str]) -> list[str]:
    """The imports of `sources` (a file's path -> its source) from a layer above the file's."""
    wrong = []
    for path, source in sources.items():
        here = _home(path)
        for module in _imports(ast.parse(source)):
            if LAYER[_component(module)] > LAYER[here]:
                wrong.append(f"{path.relative_to(SRC)} imports {module}")
    return wrong


def test_imports_flow_one_way():
    wrong = _against_layers({p: p.read_text() for p in sorted(SRC.rglob("*.py"))})
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def _command_line_imports(source: str) -> list[str]:
    """The `blocklab.cli` modules a source imports (at the top, in a function or type-only)."""
    found = _imports(ast.parse(source))
    return [m for m in found if m == "blocklab.cli" or m.startswith("blocklab.cli.")]


def test_the_python_api_runs_without_the_command_line():
    """`api.py` runs an experiment through `launch`, the run path below the command line: it
    imports nothing from `cli/`."""
    assert _command_line_imports((SRC / "api.py").read_text()) == []
    assert "from blocklab import launch" in (SRC / "api.py").read_text()


def test_the_command_line_check_fails_on_a_planted_import():
    """The check above, on an api module that still runs through the command's module."""
    planted = "def run():\n    from blocklab.cli import experiment\n"
    assert _command_line_imports(planted) == ["blocklab.cli.experiment"]
    assert _command_line_imports("import blocklab.cli.experiment\n") == ["blocklab.cli.experiment"]
    assert _command_line_imports("from blocklab import cli\n") == ["blocklab.cli"]
    assert _command_line_imports("from blocklab import launch\n") == []


def _experiment_imports(sources: dict[Path, str]) -> list[str]:
    """The imports of the experiments layer in `sources` from an experiment's analysis: its
    statistics read the rows its experiment returned, never the modules that ran them."""
    wrong = []
    for path, source in sources.items():
        if _home(path) == "analysis":
            wrong += [
                f"{path.relative_to(SRC)} imports {module}"
                for module in _imports(ast.parse(source))
                if _component(module) == "experiments"
            ]
    return wrong


def test_no_analysis_imports_an_experiment():
    homes = sorted(SRC.glob("experiments/*/analysis/*.py")) + sorted(
        SRC.glob("experiments/*/analysis.py")
    )
    assert SRC / "experiments/degree_sweep/analysis/multiplier.py" in homes
    assert SRC / "experiments/collapse/analysis.py" in homes
    sources = {p: p.read_text() for p in sorted(SRC.glob("analysis/*.py")) + homes}
    assert _experiment_imports(sources) == []


def _shared_imports_of_experiments(sources: dict[Path, str]) -> list[str]:
    """The imports of anything under `experiments/` from the shared `analysis/` and `reports/`
    folders: what they share serves every home, so no arrow points back up into one."""
    return [
        f"{path.relative_to(SRC)} imports {module}"
        for path, source in sources.items()
        if path.relative_to(SRC).parts[0] in ("analysis", "reports")
        for module in _imports(ast.parse(source))
        if module.split(".")[:2] == ["blocklab", "experiments"]
    ]


def test_the_shared_folders_import_no_experiment():
    paths = sorted(SRC.glob("analysis/*.py")) + sorted(SRC.glob("reports/*.py"))
    assert _shared_imports_of_experiments({p: p.read_text() for p in paths}) == []


def test_the_shared_folder_check_fails_on_a_planted_import():
    """A shared report that reads one experiment's ladder, and a shared statistic that reads a
    home's analysis, are named; a home's report importing its own experiment is not theirs."""
    planted = {
        SRC / "reports/markdown.py": "def f():\n    from blocklab.experiments.mad import ladder\n",
        SRC / "analysis/summary.py": "from blocklab.experiments.collapse import analysis\n",
        SRC / "experiments/mad/report/suite.py": "from blocklab.experiments.mad import ladder\n",
    }
    assert _shared_imports_of_experiments(planted) == [
        "reports/markdown.py imports blocklab.experiments.mad",
        "analysis/summary.py imports blocklab.experiments.collapse.analysis",
    ]


def test_an_experiments_home_is_read_by_its_subfolders():
    """An experiment's home: its modules in the experiments layer, its `analysis` subfolder in
    the analysis layer and its `report` subfolder in the reports layer. Planted: an experiment
    module that imports its report (function-local, or as `from PACKAGE import report`) is
    against the layers, as is its analysis importing the report; the analysis importing the
    experiment's config is not against the layers, and the check above catches it."""
    home = SRC / "experiments/degree_sweep"
    assert _home(home / "analysis/multiplier.py") == "analysis"
    assert _home(home / "report/__init__.py") == "reports"
    assert _home(home / "plan.py") == _home(home / "__init__.py") == "experiments"
    assert _component("blocklab.experiments.degree_sweep.report.plots") == "reports"
    assert _component("blocklab.experiments.degree_sweep.analysis") == "analysis"
    assert _component("blocklab.experiments.degree_sweep.config") == "experiments"
    # a home's analysis and report as modules, not folders
    collapse = SRC / "experiments/collapse"
    assert _home(collapse / "analysis.py") == "analysis"
    assert _home(collapse / "report.py") == "reports"
    assert _home(collapse / "experiment.py") == _home(collapse / "__init__.py") == "experiments"
    assert _home(SRC / "experiments/mad/width_sweep.py") == "experiments"
    assert _home(SRC / "experiments/mad/analysis/width_sweep.py") == "analysis"
    assert _component("blocklab.experiments.collapse.analysis") == "analysis"
    assert _component("blocklab.experiments.collapse.report") == "reports"
    local = "def f():\n    from blocklab.experiments.degree_sweep.report.x import y\n"
    planted = {
        home / "plan.py": local,
        home / "sizing.py": "from blocklab.experiments.degree_sweep import report\n",
        home / "analysis/pilot.py": "from blocklab.experiments.degree_sweep.report import plots\n",
        home / "analysis/cost.py": "from blocklab.experiments.degree_sweep.config import SHAPE\n",
    }
    assert _against_layers(planted) == [
        "experiments/degree_sweep/plan.py imports blocklab.experiments.degree_sweep.report.x",
        "experiments/degree_sweep/sizing.py imports blocklab.experiments.degree_sweep.report",
        "experiments/degree_sweep/analysis/pilot.py imports "
        "blocklab.experiments.degree_sweep.report.plots",
    ]
    assert _experiment_imports(planted) == [
        "experiments/degree_sweep/analysis/cost.py imports blocklab.experiments.degree_sweep.config"
    ]
    # the same in a home whose analysis and report are modules
    planted = {
        collapse / "experiment.py": "from blocklab.experiments.collapse import report\n",
        collapse / "analysis.py": "from blocklab.experiments.collapse.experiment import PURE\n",
        collapse / "report.py": "from blocklab.experiments.collapse import analysis\n",
    }
    assert _against_layers(planted) == [
        "experiments/collapse/experiment.py imports blocklab.experiments.collapse.report"
    ]
    assert _experiment_imports(planted) == [
        "experiments/collapse/analysis.py imports blocklab.experiments.collapse.experiment"
    ]


def _module(path: Path) -> str:
    """'engine/sweep.py' -> 'blocklab.engine.sweep'; a package's '__init__.py' -> the package."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(("blocklab", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def _import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Each module of `sources` (name -> source) to the modules of `sources` it imports: every
    import, at the top, inside a function or type-only; `from PACKAGE import NAME` the module
    PACKAGE.NAME where that is one, else PACKAGE. A module's import of a package it lies in is
    left out: an entry reads its family's registry so (`from blocklab.measures import MEASURES`),
    and the package defines the registry before it imports its entries."""
    graph = {}
    for name, source in sources.items():
        found = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = (f"{node.module}.{a.name}" for a in node.names)
                found |= {sub if sub in sources else node.module for sub in subs}
        graph[name] = {
            m for m in found if m in sources and m != name and not name.startswith(f"{m}.")
        }
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """The modules around one import circle of `graph`, the first repeated last; [] if none."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def test_no_module_imports_one_that_imports_it_back():
    sources = {_module(p): p.read_text() for p in SRC.rglob("*.py")}
    graph = _import_graph(sources)
    assert graph["blocklab.engine.clusters"] == {
        "blocklab.engine.executor_base",
        "blocklab.engine.processes",
        "blocklab.errors",
    }
    circle = _circle(graph)
    assert not circle, "an import circle: " + " -> ".join(circle)


def test_the_circle_check_fails_on_a_circle():
    """The check above, on an executors module one of whose functions imports the cluster
    executors, which import their base class from it: a circle through a function-local import.
    An entry that reads its package's registry, imported by the package, is none."""
    circle = {
        "blocklab.engine": "",
        "blocklab.engine.executors": "def make():\n    from blocklab.engine import clusters\n",
        "blocklab.engine.clusters": "from blocklab.engine.executors import Executor, _call\n",
    }
    assert sorted(set(_circle(_import_graph(circle)))) == [
        "blocklab.engine.clusters",
        "blocklab.engine.executors",
    ]
    registry = {
        "blocklab.measures": "from blocklab.measures.collapse import rank_collapse\n",
        "blocklab.measures.collapse": "from blocklab.measures import MEASURES\n",
    }
    assert _circle(_import_graph(registry)) == []


SHARED = ("blocklab.analysis", "blocklab.reports")  # the folders every home may use


def _owners(graph: dict[str, set[str]], module: str, seen: frozenset = frozenset()) -> set[str]:
    """Who uses `module` (an import graph's node): the homes that import it (an experiment's
    package under `blocklab.experiments`, by name), directly or through shared modules, and
    "outside" where any other module imports it (the command line, launch, a family, the
    experiments' shared private modules)."""
    owners = set()
    for user in (u for u, found in graph.items() if module in found and u not in seen):
        parts = user.split(".")
        if user.startswith(SHARED):
            owners |= _owners(graph, user, seen | {module})
        elif len(parts) > 2 and parts[1] == "experiments" and not parts[2].startswith("_"):
            owners.add(parts[2])
        else:
            owners.add("outside")
    return owners


def _one_home_only(graph: dict[str, set[str]]) -> list[str]:
    """The modules of the shared folders (`SHARED`) that one home alone uses and no module
    outside the experiments does: each belongs in that home."""
    return sorted(
        m
        for m in graph
        if m.split(".")[:2] in (s.split(".") for s in SHARED)
        and m not in SHARED
        and len(owners := _owners(graph, m)) == 1
        and "outside" not in owners
    )


def test_shared_folders_hold_only_what_is_shared():
    """A module of `analysis/` or `reports/` is used by two homes or more, or by a module outside
    the experiments (`cli/advise` reads `analysis/depth_width`, `launch` writes `reports/html`);
    what one home alone uses lives in that home."""
    sources = {_module(p): p.read_text() for p in SRC.rglob("*.py")}
    graph = _import_graph(sources)
    assert "outside" in _owners(graph, "blocklab.analysis.depth_width")
    assert _owners(graph, "blocklab.analysis.seprank") == {"seprank_degree", "seprank_depth_width"}
    assert _one_home_only(graph) == []


def test_the_home_rule_fails_on_a_module_one_home_uses():
    """The check above, on a made-up tree: a shared statistic one home's analysis alone imports,
    and a shared figure module reached by one home only through another shared module, are
    named; one two homes use, and one the command line uses beside one home, are not."""
    sources = {
        "blocklab.analysis.lonely": "",
        "blocklab.reports.figs": "",
        "blocklab.reports.wording": "from blocklab.reports import figs\n",
        "blocklab.analysis.common": "",
        "blocklab.analysis.advised": "",
        "blocklab.experiments.collapse.analysis": (
            "from blocklab.analysis import lonely\nfrom blocklab.analysis import common\n"
        ),
        "blocklab.experiments.collapse.report": "from blocklab.reports import wording\n",
        "blocklab.experiments.needle.analysis": (
            "from blocklab.analysis import common\nfrom blocklab.analysis import advised\n"
        ),
        "blocklab.cli.advise": "def f():\n    from blocklab.analysis import advised\n",
    }
    assert _one_home_only(_import_graph(sources)) == [
        "blocklab.analysis.lonely",
        "blocklab.reports.figs",
        "blocklab.reports.wording",
    ]


def test_type_only_imports_count():
    tree = ast.parse("if TYPE_CHECKING:\n    from blocklab.models import Arm\n")
    assert list(_imports(tree)) == ["blocklab.models"]


def test_every_source_file_is_in_a_layer():
    names = {_home(p) for p in SRC.rglob("*.py")}
    assert names <= set(LAYER), names - set(LAYER)


def test_no_source_file_is_over_400_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}  # fmt: skip
    assert not long, long


def test_the_registries_architecture_names_exist():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = re.findall(r"`(blocklab(?:\.\w+)+)\.([A-Z]+)`", text)
    assert len(named) >= 4
    for module, name in named:
        assert isinstance(getattr(import_module(module), name), Registry), (module, name)
    for path in re.findall(r"`((?:src/blocklab|tests|benchmarks)/[\w/]+\.py)`", text):
        assert "NAME" in path or (ROOT / path).exists(), path  # NAME: the file one adds


def test_help_imports_neither_torch_nor_matplotlib():
    """`blocklab --help` and every `blocklab SUBCOMMAND --help`, in a fresh interpreter; numpy
    too, which alone would take a third of the half second the help may take."""
    script = """
import contextlib, io, sys
from blocklab.cli import build_parser, main

def paths(parser, words=()):
    yield words
    for action in parser._subparsers._actions if parser._subparsers else ():
        for name, sub in (getattr(action, "choices", None) or {}).items():
            yield from paths(sub, (*words, name))

for words in list(paths(build_parser())):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main([*words, "--help"])
print(sorted(m for m in ("torch", "numpy", "scipy", "matplotlib") if m in sys.modules))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    try:
        expected = metadata.version("blocklab")
    except metadata.PackageNotFoundError:  # a source tree on the path, not installed
        expected = blocklab.__version__
    assert capsys.readouterr().out == f"blocklab {expected}\n"
    proc = subprocess.run(
        [sys.executable, "-m", "blocklab", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.startswith("blocklab ")


# --- one file adds an experiment: this module's toy, with its report here too ----------------


@dataclass(frozen=True)
class SquaresConfig:
    n: int = field(default=3, metadata={"help": "how many squares"})

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")

    @classmethod
    def medium(cls) -> SquaresConfig:
        return cls(n=6)

    @classmethod
    def full(cls) -> SquaresConfig:
        return cls(n=10)


def squares(cfg: SquaresConfig, store, *, resources=None, progress=True) -> list[int]:
    return [i * i for i in range(cfg.n)]


def write(out_dir, cfg: SquaresConfig, result: list[int]) -> Report:
    path = Path(out_dir) / "report.md"
    path.write_text(f"# Squares\n\n{result}\n")
    return Report(path, {"squares": result}, [f"squares: {result}"])


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(EXPERIMENTS, "_items", dict(EXPERIMENTS._items))  # undone after the test

    @EXPERIMENTS.register
    class Squares(Experiment):
        Config = SquaresConfig
        run = staticmethod(squares)
        report = __name__
        commands = (Command("squares", "the first n squares, the smallest experiment", "runs/sq"),)
        forms = {"medium": None, "full": None}
        pool = False

    return Squares


def test_one_file_adds_an_experiment(toy, tmp_path, capsys):
    assert toy.name == __name__ and EXPERIMENTS.get(__name__) is toy
    assert "the first n squares, the smallest experiment" in build_parser().format_help()
    with pytest.raises(SystemExit):
        main(["squares", "--help"])
    assert "how many squares (default: 3)" in " ".join(capsys.readouterr().out.split())

    assert main(["squares", "--n", "4", "--out", str(tmp_path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload == {
        "squares": [0, 1, 4, 9],
        "report": str(tmp_path / "report.md"),
        "config": {"n": 4},
        "page": str(tmp_path / "index.html"),
        # a report without a verdict or findings sums up in the first line it prints
        "status": {
                "verdict": False,
                "line": "squares: [0, 1, 4, 9]",
                "next": {},
                "next_cost": {
                    "core_seconds": None,
                    "reason": "no next command: nothing to change",
                },
            },
    }
    said = "# Squares\n\n**squares: [0, 1, 4, 9]**\n\n[0, 1, 4, 9]\n"
    assert (tmp_path / "report.md").read_text() == said
    assert "[0, 1, 4, 9]" in (tmp_path / "index.html").read_text()  # its page, with no trials

    for form, n in (("--medium", 6), ("--full", 10)):
        assert main(["squares", form, "--out", str(tmp_path)]) == 0
        assert capsys.readouterr().out.splitlines()[0] == f"squares: {[i * i for i in range(n)]}"
    assert main(["squares", "--medium", "--n", "2", "--out", str(tmp_path)]) == 0  # flags win
    assert capsys.readouterr().out.splitlines()[0] == "squares: [0, 1]"
    assert main(["squares", "--medium", "--full", "--out", str(tmp_path)]) == 2
    assert "not allowed with" in capsys.readouterr().err
    assert main(["squares", "--n", "0", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("blocklab: error:")


def _manifest(module: str, report: str | None = None) -> type[Experiment]:
    """A manifest class as if defined in `module`, naming `report` or none."""
    return type("Toy", (Experiment,), {"__module__": module, "report": report})


def test_an_experiment_is_named_after_its_home():
    """Each built-in manifest lives in its home's `experiment` module and is named after the
    home; elsewhere a manifest is named after its module."""
    homes = {n: EXPERIMENTS.get(n).__module__ for n in EXPERIMENTS.names()}
    assert homes == {
        n: f"blocklab.experiments.{n}.experiment"
        for n in [
            "collapse", "degree_sweep", "depth_width", "mad", "needle", "sanford_match",
            "sanford_qsa", "seprank_degree", "seprank_depth_width",
        ]
    }  # fmt: skip
    registry = Registry("experiment", home="blocklab.experiments")
    assert registry.name_of("blocklab.experiments.collapse.experiment") == "collapse"
    assert registry.name_of("blocklab.experiments.mad.report.suite") == "mad"
    assert registry.name_of("blocklab.experiments.degree_sweep") == "degree_sweep"
    assert registry.name_of("mylab.squares") == "squares"
    assert registry.name_of("squares") == "squares"
    # without a home, a home's manifest would be named after its file: every one "experiment"
    plain = Registry("experiment")
    assert plain.name_of("blocklab.experiments.collapse.experiment") == "experiment"
    assert plain.register(_manifest("blocklab.experiments.collapse.experiment")).name == (
        "experiment"
    )
    assert registry.register(_manifest("blocklab.experiments.collapse.experiment")).name == (
        "collapse"
    )


def test_import_submodules_imports_the_homes_and_skips_the_rest(tmp_path, monkeypatch):
    """A family's package imports each entry, a module or a home (a subpackage), and leaves out
    its base types (`manifest`, `base`) and private modules, which must register nothing."""
    from blocklab.registry import import_submodules

    family = tmp_path / "fam_homes"
    (family / "alpha").mkdir(parents=True)
    (family / "__init__.py").write_text("SEEN = []\n")
    (family / "alpha" / "__init__.py").write_text("from fam_homes import SEEN\nSEEN.append('a')\n")
    (family / "beta.py").write_text("from fam_homes import SEEN\nSEEN.append('b')\n")
    for skipped in ("manifest", "base", "_shared"):
        (family / f"{skipped}.py").write_text(f"raise ImportError('{skipped} imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import_submodules("fam_homes")
    assert sorted(import_module("fam_homes").SEEN) == ["a", "b"]


def test_the_report_is_found_beside_the_manifest():
    """`Experiment.report_module`: a home's `report`; a plugin's `report` beside its module, or a
    top-level module itself; a manifest's own `report` string first. Every built-in manifest
    names none and finds a module with a `write`."""
    for name in EXPERIMENTS.names():
        experiment = EXPERIMENTS.get(name)
        assert experiment.report is None, name
        assert experiment.report_module() == f"blocklab.experiments.{name}.report"
        assert callable(import_module(experiment.report_module()).write)
    assert _manifest("blocklab.experiments.mad.experiment").report_module() == (
        "blocklab.experiments.mad.report"
    )
    assert _manifest("blocklab.experiments.degree_sweep").report_module() == (
        "blocklab.experiments.degree_sweep.report"
    )
    assert _manifest("mylab.experiment").report_module() == "mylab.report"
    assert _manifest("mylab.squares.experiment").report_module() == "mylab.squares.report"
    assert _manifest("squares").report_module() == "squares"
    named = "mylab.squares_report"
    assert _manifest("mylab.experiment", named).report_module() == named
    assert _manifest("blocklab.experiments.collapse.experiment", named).report_module() == named


def test_a_plugin_without_a_report_name_reports_from_its_own_module(tmp_path, capsys, monkeypatch):
    """The toy above without `report =`: a manifest in a top-level module (this test module) is
    its own report module, and the command line runs it through to its report."""
    monkeypatch.setattr(EXPERIMENTS, "_items", dict(EXPERIMENTS._items))

    @EXPERIMENTS.register
    class Squares(Experiment):
        Config = SquaresConfig
        run = staticmethod(squares)
        commands = (Command("squares", "the first n squares", "runs/sq"),)
        pool = False

    assert Squares.report is None and Squares.report_module() == __name__ == Squares.name
    assert main(["squares", "--n", "3", "--out", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["squares"] == [0, 1, 4]


def test_a_plugin_package_reports_from_its_report_module(tmp_path, monkeypatch):
    """A manifest in a package of one's own, without `report =`, is answered by the package's
    `report` module, through the Python API with the package imported as a plugin."""
    monkeypatch.setattr(EXPERIMENTS, "_items", dict(EXPERIMENTS._items))
    package = tmp_path / "cubes_lab"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "experiment.py").write_text(
        "from dataclasses import dataclass\n"
        "from blocklab.experiments import EXPERIMENTS, Command, Experiment, Trials\n\n"
        "@dataclass(frozen=True)\nclass CubesConfig:\n    n: int = 3\n\n"
        "def run(cfg, store, *, resources=None, progress=True):\n"
        "    return Trials([{'cube': i**3} for i in range(cfg.n)], [])\n\n"
        "@EXPERIMENTS.register\nclass Cubes(Experiment):\n    Config = CubesConfig\n"
        "    run = staticmethod(run)\n"
        "    commands = (Command('cubes', 'the first n cubes', 'runs/cubes'),)\n"
        "    pool = False\n"
    )
    (package / "report.py").write_text(
        "from pathlib import Path\nfrom blocklab.reports import Report\n\n"
        "def write(out_dir, cfg, trials):\n"
        "    cubes = [r['cube'] for r in trials.rows]\n"
        "    path = Path(out_dir) / 'report.md'\n"
        "    path.write_text(f'# Cubes\\n\\n{cubes}\\n')\n"
        "    return Report(path, {'cubes': cubes}, [f'cubes: {cubes}'])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from blocklab.api import run

    payload = run("cubes", tmp_path / "out", imports=("cubes_lab.experiment",), n=4)
    assert EXPERIMENTS.get("experiment").report_module() == "cubes_lab.report"
    assert payload["cubes"] == [0, 1, 8, 27]


# the layers whose every module the map names
MAPPED = ("", "fitting", "bench", "engine", "analysis", "cli")


def _unmapped(table: str) -> list[str]:
    """Modules of the base, fitting, bench, engine, analysis and cli layers that ARCHITECTURE.md's
    layer table does not name (as `name` or `folder/name`), an experiment's analysis among them;
    registered family entries are covered by their folder's row, so they are not asked for."""
    named = set(re.findall(r"`([A-Za-z_/.]+)", table))
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        home = "" if len(parts) == 1 else parts[0]
        stem = parts[-1]
        if _home(path) == "analysis" and parts[0] == "experiments":  # in an experiment's home
            home = "/".join(parts[:-1])
        elif home not in MAPPED or len(parts) > 2:
            continue
        if stem in ("__init__", "__main__"):
            continue
        if not ({stem, f"{home}/{stem}", f"{stem}.py", f"{home}/{stem}.py"} & named):
            missing.append("/".join(parts))
    return missing


def _layer_table(text: str) -> str:
    return text.split("## Layers", 1)[1].split("\n## ", 1)[0]


def test_the_map_names_every_module_of_its_layers():
    assert _unmapped(_layer_table((ROOT / "ARCHITECTURE.md").read_text())) == []


def test_the_map_check_fails_on_a_module_left_out():
    """The check above, on a table with `timing` taken out of the fitting row, and `shared_law`
    out of the degree sweep's analysis."""
    table = _layer_table((ROOT / "ARCHITECTURE.md").read_text()).replace("`timing`", "timing")
    assert _unmapped(table) == ["fitting/timing"]
    table = table.replace("`shared_law`", "shared_law")
    assert _unmapped(table) == ["experiments/degree_sweep/analysis/shared_law", "fitting/timing"]


def _unfound(table: str) -> list[str]:
    """The backticked names of the layer table's module column that name nothing in the tree. A
    name is a module or package at the top of src/blocklab/ or in a folder its row names before it
    (`name/`, folders within folders too), or a file there (`timings.json`); `name()` is a
    function one of those folders' modules defines; a flag (`--help`) names nothing to find."""
    unfound = []
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) < 4 or cells[1].strip() in ("layer", "---"):  # the header and its rule
            continue
        bases = [SRC]
        for name in re.findall(r"`([^`]+)`", cells[2]):
            if name.endswith("/"):
                folders = [b / name for b in bases if (b / name).is_dir()]
                bases += folders
                found = bool(folders)
            elif name.endswith("()"):
                defined = re.compile(rf"^def {re.escape(name[:-2])}\(", re.M)
                found = any(defined.search(f.read_text()) for b in bases for f in b.glob("*.py"))
            elif name.startswith("--"):
                continue
            else:
                found = any(
                    (b / f"{name}.py").is_file()
                    or (b / name / "__init__.py").is_file()
                    or ("." in name and (b / name).is_file())
                    for b in bases
                )
            if not found:
                unfound.append(f"{cells[1].strip()}: {name}")
    return unfound


def test_every_name_in_the_map_is_in_the_tree():
    assert _unfound(_layer_table((ROOT / "ARCHITECTURE.md").read_text())) == []


def test_the_name_check_fails_on_a_name_not_in_the_tree():
    """The check above, on a table that names a module gone from its folder, a function as a
    module, and a function its folders do not define."""
    table = _layer_table((ROOT / "ARCHITECTURE.md").read_text())
    table = table.replace("`network`", "`fit_plan`").replace("`run()`", "`run`")
    table = table.replace("`write()`", "`draw()`")
    assert _unfound(table) == [
        "fitting: fit_plan",
        "experiments: run",
        "reports: draw()",
        "launch: run",
    ]


def _computing_writers(sources: dict[str, str]) -> set[str]:
    """The functions of the report modules (`sources`: module -> source) that compute a statistic
    while wording: those reachable from a module's `write` (or `write_report`, `to_json`) without
    passing through an `analyze`, across modules, that call a function of `blocklab.analysis`
    (imported by name, or through its module) other than the closed-form `FORMULAS` it names."""
    import importlib
    import importlib.util
    import inspect

    def formula(module, name: str) -> bool:
        return name in getattr(module, "FORMULAS", ())

    info = {}
    for mod, source in sources.items():
        tree = ast.parse(source)
        stats, amods, rnames, rmods = set(), {}, {}, {}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if node.module.split(".")[0] != "blocklab":
                continue
            if _component(node.module) == "analysis":  # analysis/, or an experiment's
                module = importlib.import_module(node.module)
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    if hasattr(module, "__path__") and importlib.util.find_spec(sub):  # a module
                        amods[a.asname or a.name] = importlib.import_module(sub)
                    elif inspect.isfunction(getattr(module, a.name, None)) and not formula(
                        module, a.name
                    ):
                        stats.add(a.asname or a.name)
            elif _component(node.module) == "reports":  # reports/, or an experiment's report/
                for a in node.names:
                    name = f"{node.module}.{a.name}"
                    if name in sources:  # a module of a report package
                        rmods[a.asname or a.name] = name
                    else:
                        rnames[a.asname or a.name] = (node.module, a.name)
        defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        # module-level names bound to a value (a table of functions dispatched by type)
        tables = {
            t.id: n.value
            for n in tree.body
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        }
        info[mod] = (stats, amods, rnames, rmods, defs, tables)

    def calls(mod: str, name: str):
        """The functions `name` reaches and whether it computes: a function named in it, called
        or not (passed on, or looked up in a module-level table such as {type: writer}), is
        reached, and an analysis function named in it computes."""
        stats, amods, rnames, rmods, defs, tables = info[mod]
        out, computes = [], False
        nodes = list(ast.walk(defs[name]))
        # its parameters and assigned names shadow the module's (`findings` the argument)
        local = {a.arg for a in ast.walk(defs[name].args) if isinstance(a, ast.arg)}
        local |= {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for node in list(nodes):
            if isinstance(node, ast.Name) and node.id in tables and node.id not in local:
                nodes += ast.walk(tables[node.id])
        for node in nodes:
            if isinstance(node, ast.Name) and node.id in local:
                continue
            if isinstance(node, ast.Name):
                computes |= node.id in stats
                target = (mod, node.id) if node.id in defs else rnames.get(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                module = amods.get(node.value.id)
                if module is not None and inspect.isfunction(getattr(module, node.attr, None)):
                    computes |= not formula(module, node.attr)
                target = (rmods[node.value.id], node.attr) if node.value.id in rmods else None
            else:
                target = None
            if target and target[0] in info and target[1] in info[target[0]][4]:
                out.append(target)
        return out, computes

    todo = [
        (m, n) for m, i in info.items() for n in ("write", "write_report", "to_json") if n in i[4]
    ]
    seen, bad = set(), set()
    while todo:
        node = todo.pop()
        if node in seen or node[1] == "analyze":
            continue
        seen.add(node)
        out, computes = calls(*node)
        if computes:
            bad.add(".".join(node))
        todo += out
    return bad


def test_report_writers_word_what_analyze_computed():
    """In the report modules (reports/ and each experiment's report/), what a `write` (or
    `write_report`, `to_json`) reaches without going through an `analyze`, across the report
    modules (figures included), calls no function of the analysis layer: the writers word a typed
    result."""
    paths = sorted(SRC.rglob("*.py"))
    sources = {_module(p): p.read_text() for p in paths if _home(p) == "reports"}
    home = "blocklab.experiments.degree_sweep.report"
    assert f"{home}.capacity" in sources and home in sources
    assert "blocklab.experiments.mad.report.suite" in sources
    assert "blocklab.experiments.collapse.report" in sources
    assert _computing_writers(sources) == set()


def test_the_writer_rule_fails_on_a_planted_statistic():
    """A figure module that computes an interval while drawing, reached from a report's write:
    found across modules; drawing what analyze computed instead passes."""
    report = (
        "from blocklab.analysis.summary import summarize\n"
        "from blocklab.reports import figs\n"
        "def analyze(cfg, trials):\n    return summarize(trials.rows)\n"
        "def write(out, cfg, trials):\n    result = analyze(cfg, trials)\n"
        "    return figs.draw(result)\n"
    )
    figs = (
        "from blocklab.analysis.summary import positive_interval\n"
        "def draw(result):\n    return positive_interval(result)\n"
    )
    planted, at = "blocklab.reports.planted", "blocklab.reports.figs"
    assert _computing_writers({planted: report, at: figs}) == {f"{at}.draw"}
    clean = figs.replace("return positive_interval(result)", "return result")
    assert _computing_writers({planted: report, at: clean}) == set()
    # the same in an experiment's home: its report's figures, a statistic of its own analysis
    home = "blocklab.experiments.degree_sweep"
    moved = report.replace("blocklab.reports import", f"{home}.report import")
    mine = f"from {home}.analysis.multiplier import fit\n"
    mine += "def draw(result):\n    return fit(result)\n"
    writers = _computing_writers({f"{home}.report.planted": moved, f"{home}.report.figs": mine})
    assert writers == {f"{home}.report.figs.draw"}
    # a writer looked up in a table by type, as a report words each design check
    table = (
        "from blocklab.analysis.summary import positive_interval\n"
        "def _band(result):\n    return positive_interval(result)\n"
        "WORDS = {list: _band}\n"
        "def draw(result):\n    return WORDS[type(result)](result)\n"
    )
    assert _computing_writers({planted: report, at: table}) == {f"{at}._band"}
    formula = "from blocklab.analysis.depth_width import n_transition\n"
    formula += "def draw(r):\n    return n_transition(r)\n"
    assert _computing_writers({planted: report, at: formula}) == set()  # a FORMULAS curve


def _code_in_init(source: str) -> list[str]:
    """What a package's `__init__.py` (`source`) defines beyond naming what its modules hold: a
    function or a class (the lazy attributes of PEP 562, `__getattr__` and `__dir__`, live only
    there), or a loop, `with` or `try`. Imports, `__all__`, a registry's creation and the call
    that fills it (`import_submodules`) are the package's naming, not code."""
    lazy = ("__getattr__", "__dir__")
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.While, ast.With)
    return [
        f"line {node.lineno}: {type(node).__name__} {getattr(node, 'name', '')}".rstrip()
        for node in ast.parse(source).body
        if isinstance(node, (*kinds, ast.Try)) and getattr(node, "name", None) not in lazy
    ]


def test_package_inits_hold_no_code():
    """Every `__init__.py` names what its package's modules hold; the code lives in modules named
    for it (`bench/throughput`, `reports/base`, `checks/battery`, a home's `experiment`)."""
    found = {
        str(p.relative_to(SRC)): _code_in_init(p.read_text())
        for p in sorted(SRC.rglob("__init__.py"))
    }
    assert {k: v for k, v in found.items() if v} == {}


def test_the_init_rule_fails_on_planted_code():
    planted = '"""A package."""\nfrom x import y\nREG = Registry("x")\nfill(__name__)\n'
    assert _code_in_init(planted) == []
    planted += "def make(name):\n    return REG.get(name)\n\nclass Base:\n    pass\n"
    assert _code_in_init(planted) == ["line 5: FunctionDef make", "line 8: ClassDef Base"]
    assert _code_in_init("def __getattr__(name):\n    return name\n") == []


def _unfound_paths(table: str) -> list[str]:
    """The backticked file and folder paths (`name.py`, `name/`) of a layer table that name
    nothing: a path from the repository's root, from src/blocklab/, or the end of one there."""
    inside = [p.relative_to(SRC).as_posix() + ("/" if p.is_dir() else "") for p in SRC.rglob("*")]
    missing = []
    for path in dict.fromkeys(re.findall(r"`([A-Za-z_./]+(?:/|\.py))`", table)):
        if (ROOT / path).exists() or (SRC / path).exists():
            continue
        if not any(p == path or p.endswith("/" + path) for p in inside):
            missing.append(path)
    return missing


def test_the_guides_map_names_every_module_and_only_what_is_there():
    """docs/guide/architecture.md, the map in words, names every module of its layers as
    ARCHITECTURE.md does, and each file or folder it names is in the tree."""
    table = _layer_table((ROOT / "docs/guide/architecture.md").read_text())
    assert _unmapped(table) == []
    assert _unfound_paths(table) == []


def test_the_guides_path_check_fails_on_a_path_not_in_the_tree():
    table = "| fitting | `fitting/`: `estimate.py`, `fit_plan.py`, `gone/`, `engine/leases.py` |"
    assert _unfound_paths(table) == ["fit_plan.py", "gone/"]

"""Every figure a test saves is checked before it is written: each visible axis has a label, and
a numeric one states its unit in parentheses (the rule is in `_plots`). Under pytest-xdist each
worker takes its share of the cores, the longest files start first, and `exclusive` keeps what
two workers must not run at once (a local Ray instance) to one of them at a time."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import io
import json
import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from _plots import check_labels
from _stops import TrialsStored, trials_only
from blocklab.experiments.degree_sweep import SHAPE

# the tests live in folders named as the code's (`fitting/`, `experiments/degree_sweep/`), and some
# read another folder's planted rows or tiny forms by module name (`from test_ladder import
# TINY`): every folder is importable from the start, whichever file is collected first
TESTS = Path(__file__).resolve().parent
for _folder in sorted({p.parent for p in TESTS.rglob("test_*.py")}):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))


def pytest_configure(config):
    """Under pytest-xdist (`-n N`), torch in each worker, and in every command a test starts
    (through OMP_NUM_THREADS), uses its share of the cores: N workers each running torch's
    default of one thread per core slow each other's small kernels down tenfold."""
    # every command, fork server and worker a test starts is a fresh interpreter, and one that
    # may write no bytecode compiles the package's modules again, a hundred times over: they
    # write it, beside the sources as Python does by default (git ignores `__pycache__`)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (cores or 1) // int(workers))))
    # and a command's default pool (`--workers` not given) as many processes as that share: two
    # test workers each starting a pool per core ran four torch processes on two cores
    os.environ.setdefault("BLOCKLAB_WORKERS", str(max(1, (cores or 1) // int(workers))))
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # and NumPy's and SciPy's BLAS, loaded before this ran with a thread per core
    threadpool_limits(limits=int(os.environ["OMP_NUM_THREADS"]), user_api="blas")


# the longest files, longest first, as measured by a full run: `--dist loadfile` hands whole files
# to the workers in the order collected, and one of these handed out last keeps one worker busy
# long after the other has finished (the rest follow in their own order, most of them short)
FIRST = (
    "test_cli.py",
    "test_executors.py",
    "test_leases.py",
    "test_continuation.py",
    "test_cli_contract.py",
    "test_capacity.py",
    "test_faults_workers.py",
    "test_sweep_executors.py",
    "test_precision.py",
    "test_run_messages.py",
    "test_plugins.py",
    "test_ensemble.py",
    "test_main_guard.py",
    "test_bench.py",
    "test_ladder.py",
    "test_cohorts.py",
    "test_converged_report.py",
    "test_page.py",
    "test_check_outcomes.py",
    "test_coverage.py",
)


def pytest_collection_modifyitems(items):
    """The files of FIRST first, in its order; every file's own tests in their order."""
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))


def pytest_collection_finish(session):
    """What is alive once the suite is collected (the libraries, the test items) lives to the
    end: frozen out of the cyclic garbage collector's view, whose collections no longer scan it,
    and which runs a tenth as often as Python's default (every 700 allocations): the tests
    allocate in bursts (figures, fits, networks) that its collections scanned over and over."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(7000, 10, 10)


@contextlib.contextmanager
def _locked(path):
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.fixture(scope="session")
def exclusive(tmp_path_factory):
    """`with exclusive(NAME):` runs its block while no other pytest-xdist worker is inside a block
    of that name: the lock is a file in the directory every worker's base temp lies in."""
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    return lambda name: _locked(root / f"{name}.lock")


@pytest.fixture(autouse=True)
def _progress_closed(monkeypatch):
    """Every progress display a test opens is closed when the test ends: an open one's ticker
    thread says "[label n/N, ...] running" into whatever stderr is current a minute after its
    last line, a later test's captured one included."""
    from blocklab.engine import progress

    opened = []
    init = progress.Progress.__init__

    def tracked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(progress.Progress, "__init__", tracked)
    yield
    for bar in opened:
        bar.close()


@dataclass(frozen=True)
class SharedRun:
    """A run several tests read: its directory (to read; `copy` it to write into it), what its
    `--json` printed and what it said on stderr."""

    out: Path
    printed: dict
    said: str

    def copy(self, to: Path) -> Path:
        shutil.copytree(self.out, to)
        return to


@pytest.fixture(scope="session")
def ladder_run(tmp_path_factory, exclusive) -> SharedRun:
    """`test_ladder.TINY`'s degree sweep (two degrees, depths 1 and 2, three seeds, second-order
    fits), run once for every test that reads it, not quiet: under pytest-xdist the first worker
    to ask runs it into the directory every worker's base temp lies in, and the others read it
    there."""
    from test_ladder import TINY

    from blocklab.cli import main

    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    out = root / "ladder_run"
    with exclusive("ladder_run"):
        if not (out / "said.txt").exists():
            printed, said = io.StringIO(), io.StringIO()
            argv = [
                "degree-sweep",
                "--out",
                str(out),
                "--json",
                *(f for f in TINY if f != "--quiet"),
            ]
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said):
                code = main(argv)
            assert code == 0, said.getvalue()
            (out / "printed.json").write_text(printed.getvalue())
            (out / "said.txt").write_text(said.getvalue())  # written last: the run is whole
    return SharedRun(
        out, json.loads((out / "printed.json").read_text()), (out / "said.txt").read_text()
    )


@pytest.fixture(name="trials_only")
def _trials_only():
    """`trials_only(call, ...)`: the call, a command that `_stops.trials_only` ends once its
    trials are stored, which it expects to end so."""

    def run(call, *args, **kwargs):
        with trials_only(), pytest.raises(TrialsStored):
            call(*args, **kwargs)

    return run


@pytest.fixture
def small_matmul_ceiling(monkeypatch):
    """`blocklab bench` measures its matmul ceiling on 256 x 256 matrices: the 2048 x 2048 default,
    measured before and after every width, is most of a small bench's time, and what a test reads
    (a positive ceiling, each width's share of it) does not depend on the size."""
    from blocklab.bench import throughput

    small = functools.partial(throughput.matmul_ceiling, n=256)
    monkeypatch.setattr(throughput, "matmul_ceiling", small)


@pytest.fixture(autouse=True)
def _figures_state_their_units(monkeypatch):
    from matplotlib.figure import Figure

    savefig = Figure.savefig

    def checked(self, fname, *args, **kwargs):
        check_labels(self, fname)
        return savefig(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", checked)


@pytest.fixture
def tiny_searched_sweep():
    """A degree sweep of 2 rates and 2 seeds at one small budget, in about a second: its seed-0
    trial at the chosen rate is also a search trial (3 trainings in all)."""
    from blocklab.experiments import degree_sweep
    from blocklab.specs import TrainConfig

    return degree_sweep.DegreeSweepConfig(
        task="poly_target",
        task_options={"n_in": 2, "rank": 1, "n_train": 64, "n_val": 32, "n_test": 32},
        degrees=("2",),
        baselines=(),
        budgets=(24,),
        seeds=2,
        lr_grid=(0.01, 0.03),
        lr_extend=0,
        train=TrainConfig(steps=4, batch_size=16, eval_points=2),
        shape=replace(SHAPE, width=2, norm="none"),
    )

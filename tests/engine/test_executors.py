"""Executors: every item comes back once, equal to running it here; dead workers raise WorkerLost.

Workers started by Ray or submitit import the work function by module name, so the fixtures put
this directory (and blocklab's) on their PYTHONPATH.
"""

import multiprocessing
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
import torch

import _executor_fns as fns
import blocklab
from blocklab.cli import main
from blocklab.engine.clusters import check_reachable
from blocklab.engine.executor_base import WorkerLost
from blocklab.engine.executors import make_executor, pool_context
from blocklab.errors import UserError

ITEMS = [3, 1, 4, 0]


def worker_path() -> str:
    here, src = Path(__file__).resolve().parents[1], Path(blocklab.__file__).parents[1]
    return os.pathsep.join([str(here), str(src), os.environ.get("PYTHONPATH", "")])


def expected() -> dict[int, float]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {i: fns.compute(item, "cpu")["value"] for i, item in enumerate(ITEMS)}
    finally:
        torch.set_num_threads(threads)


def check(pairs, items: int = len(ITEMS)) -> None:
    """Every index (of the first `items` of ITEMS) exactly once, with the value computed here,
    by one torch thread."""
    assert sorted(i for i, _ in pairs) == list(range(items))
    assert {i: r["value"] for i, r in pairs} == {i: v for i, v in expected().items() if i < items}
    assert {r["threads"] for _, r in pairs} == {1}


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line names `text` (Linux)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if text in proc.joinpath("cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def test_local_inline_restores_torch_threads():
    torch.set_num_threads(2)
    try:
        check(list(make_executor("local", 1).imap_unordered(fns.compute, ITEMS, "cpu")))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)


def test_local_pool():
    check(list(make_executor("local", 2).imap_unordered(fns.compute, ITEMS, "cpu")))


def test_pool_workers_start_in_the_environment_and_directory_of_their_pool(tmp_path, monkeypatch):
    """Workers are forked from a server the first pool started (`executors.pool_context`): a
    later pool's workers still run in the environment and directory of the moment it starts, as
    spawned ones would, not in the server's."""
    check(list(make_executor("local", 2).imap_unordered(fns.compute, ITEMS, "cpu")))
    monkeypatch.setenv("BLOCKLAB_TEST_MARK", "set after the first pool")
    monkeypatch.chdir(tmp_path)
    seen = [r for _, r in make_executor("local", 2).imap_unordered(fns.surroundings, ITEMS, "cpu")]
    assert seen == [{"mark": "set after the first pool", "cwd": str(tmp_path)}] * len(ITEMS)


def test_where_there_is_no_fork_server_the_pool_spawns_its_workers(monkeypatch):
    """A platform without one (Windows) spawns each worker (`executors.pool_context`), which
    watches the command itself for its death: the same results as forked workers give."""
    methods = multiprocessing.get_all_start_methods
    without = [m for m in methods() if m != "forkserver"]
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: without)
    assert pool_context().get_start_method() == "spawn"
    check(list(make_executor("local", 2).imap_unordered(fns.compute, ITEMS, "cpu")))


def test_local_pool_worker_killed():
    with pytest.raises(WorkerLost, match="killed by SIGKILL .killed, or out of memory"):
        list(make_executor("local", 2).imap_unordered(fns.die_on_one, ITEMS, "cpu"))


def test_a_worker_whose_start_fails_is_reported_as_that_cause(tmp_path, monkeypatch):
    """A plugin that imports in the parent but fails in a worker: the parent names the worker's
    error, not a death by memory."""
    (tmp_path / "worker_only_fails.py").write_text(
        "import multiprocessing\n"
        "if multiprocessing.parent_process() is not None:\n"
        "    raise ImportError('no such library in a worker')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    runner = make_executor("local", 2, plugins=("worker_only_fails",))
    with pytest.raises(WorkerLost, match="failed to start: UserError: plugin 'worker_only_fails' "
                       "failed to import: ImportError: no such library in a worker"):  # fmt: skip
        list(runner.imap_unordered(fns.compute, ITEMS, "cpu"))


def test_local_pool_raises_the_work_error():
    with pytest.raises(ValueError, match="item 1 is bad"):
        list(make_executor("local", 2).imap_unordered(fns.fail_on_one, [0, 1], "cpu"))


def test_local_pool_stops_when_the_consumer_fails():
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        for _ in make_executor("local", 2).imap_unordered(fns.slow_after_zero, [0, 1, 2], "cpu"):
            raise KeyboardInterrupt
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not multiprocessing.active_children()
    assert time.monotonic() - start < 30  # item 1 sleeps a minute: its worker was terminated


def test_no_items_no_work():
    for name in ("local", "ray", "slurm"):
        assert list(make_executor(name, 2).imap_unordered(fns.compute, [], "cpu")) == []


def test_unknown_executor_and_options():
    with pytest.raises(UserError, match="did you mean 'ray'"):
        make_executor("rey", 2)
    with pytest.raises(UserError, match="unknown option 'cpus' .*num_cpus"):
        make_executor("ray", 2, {"cpus": "2"})
    with pytest.raises(
        UserError, match="unknown option .address. for the local executor .known: threads."
    ):
        make_executor("local", 2, {"address": "auto"})
    with pytest.raises(UserError, match="time='soon' must be an integer"):
        make_executor("slurm", 2, {"time": "soon"})
    options = make_executor("slurm", 2, {"time": "90", "mem_gb": "1.5", "partition": "gpu"}).options
    assert options == {"time": 90, "mem_gb": 1.5, "partition": "gpu"}


@pytest.mark.parametrize(
    ("name", "module", "extra"), [("ray", "ray", "ray"), ("slurm", "submitit", "slurm")]
)
def test_missing_extra(monkeypatch, name, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(UserError, match=rf"pip install 'blocklab\[{extra}\]'"):
        list(make_executor(name, 2).imap_unordered(fns.compute, [0], "cpu"))


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: one the system just handed out and took back."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_nothing_listens_on_fails_fast():
    start = time.monotonic()
    with pytest.raises(UserError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:\d+"):
        check_reachable(f"127.0.0.1:{closed_port()}")
    with pytest.raises(UserError, match="cannot reach"):
        check_reachable(f"ray://127.0.0.1:{closed_port()}")
    check_reachable("auto")  # left to Ray
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_reachable(f"127.0.0.1:{listening.getsockname()[1]}")
    assert time.monotonic() - start < 30


def test_an_unreachable_ray_cluster_is_one_line_and_exit_2(tmp_path, capsys):
    """Through the command line, as a user meets it: before the fix ray.init retried for minutes."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray instance is already connected in this process")
    start = time.monotonic()
    argv = ["degree-sweep", "--out", str(tmp_path), "--quiet", "--budgets", "3072"]
    argv += ["--optimizer", "adam"]
    argv += ["--width", "16", "--steps", "5", "--seeds", "1", "--lr-grid", "3e-3"]
    argv += ["--lr-extend", "0", "--task-option", "n_train=64", "--executor", "ray"]
    argv += ["--executor-option", f"address=127.0.0.1:{closed_port()}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("blocklab: error: cannot reach the Ray cluster")
    assert time.monotonic() - start < 30
    assert not ray.is_initialized()


# Ray: one local instance for the module, started as the executor starts it


@pytest.fixture(scope="module")
def ray_cluster(exclusive):
    ray = pytest.importorskip("ray")
    # one local Ray instance at a time on this machine, whichever pytest-xdist worker starts it
    with exclusive("ray"), pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", worker_path())  # the workers inherit Ray's environment
        assert make_executor("ray", 2).connect()  # a local instance with two CPUs
        try:
            yield ray
        finally:
            ray.shutdown()


def test_ray(ray_cluster):
    check(list(make_executor("ray", 2).imap_unordered(fns.compute, ITEMS, "cpu")))
    assert ray_cluster.is_initialized()  # an instance it did not start is left running


def test_ray_worker_killed(ray_cluster):
    with pytest.raises(WorkerLost, match="item 1"):
        list(make_executor("ray", 2).imap_unordered(fns.die_on_one, ITEMS, "cpu"))
    with pytest.raises(ValueError, match="item 1 is bad"):
        list(make_executor("ray", 2).imap_unordered(fns.fail_on_one, [0, 1], "cpu"))


def test_ray_stops_when_the_consumer_fails(ray_cluster):
    executor = make_executor("ray", 2)
    with pytest.raises(KeyboardInterrupt):
        for _ in executor.imap_unordered(fns.slow_after_zero, [0, 1, 2], "cpu"):
            raise KeyboardInterrupt
    # both CPUs would be held for HOLD seconds had the tasks not been cancelled; the bound is
    # that wait halved, so no load on the machine (a loaded one took a minute) reads as a wait
    start = time.monotonic()
    check(list(executor.imap_unordered(fns.compute, ITEMS, "cpu")))
    assert time.monotonic() - start < fns.HOLD / 2


# submitit: its local cluster runs the jobs a Slurm array would, as processes here


@pytest.fixture
def slurm_options(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    from submitit.core.core import Job

    monkeypatch.setenv("PYTHONPATH", worker_path())
    # submitit waits 15 s for the result file of a dead job, in case a network filesystem is slow
    monkeypatch.setattr(Job, "_results_timeout_s", 0)
    return {"cluster": "local", "folder": str(tmp_path / "submitit"), "poll": "0.1"}


def test_submitit_local(slurm_options):
    # each item is a job, a fresh interpreter importing torch: three, one more than the two run
    # at once, so one waits for a free slot as the rest of a sweep's would
    executor = make_executor("slurm", 2, slurm_options)
    check(list(executor.imap_unordered(fns.compute, ITEMS[:3], "cpu")), items=3)


def test_submitit_job_killed(slurm_options):
    executor = make_executor("slurm", 2, slurm_options)
    with pytest.raises(WorkerLost, match=r"item 1\) died"):
        list(executor.imap_unordered(fns.die_on_one, ITEMS, "cpu"))
    with pytest.raises(WorkerLost, match=r"item 1\) raised"):
        list(executor.imap_unordered(fns.fail_on_one, [0, 1], "cpu"))


@pytest.mark.parametrize("ignored", [False, True], ids=["sigint", "sigint-ignored"])
def test_submitit_stops_when_the_consumer_fails(slurm_options, ignored):
    """Also when this process ignores SIGINT, as a command a shell starts in the background does:
    the jobs' controllers must not inherit that, since SIGINT is how a local job is cancelled."""
    previous = signal.getsignal(signal.SIGINT)
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _submitit_stops(slurm_options)
    finally:
        signal.signal(signal.SIGINT, previous)


def _submitit_stops(slurm_options):
    with pytest.raises(KeyboardInterrupt):
        executor = make_executor("slurm", 2, slurm_options)
        for _ in executor.imap_unordered(fns.slow_after_zero, [0, 1, 2], "cpu"):
            raise KeyboardInterrupt
    # every job's controller (`python -m submitit.local._local FOLDER`) is cancelled and exits; a
    # job's task is the controller's to stop, and submitit's local mode leaves one running when
    # the cancel lands while the controller is still starting it (a race seen on a loaded machine)
    controller = f"submitit.local._local\x00{slurm_options['folder']}"
    deadline = time.monotonic() + 15
    while processes_mentioning(controller) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_mentioning(controller)


@pytest.mark.parametrize("workers", [1, 2])
def test_local_threads_option_sets_each_workers_torch_threads(workers):
    executor = make_executor("local", workers, {"threads": "2"})
    seen = {r["threads"] for _, r in executor.imap_unordered(fns.compute, ITEMS, "cpu")}
    assert seen == {2}
    with pytest.raises(UserError, match="threads=0 must be >= 1"):
        make_executor("local", 1, {"threads": "0"})


def test_blocklab_workers_sets_the_default_pool_and_a_bad_value_is_one_line(monkeypatch, capsys):
    """`--workers` defaults to one process per core (at most 8), or to $BLOCKLAB_WORKERS where
    set; a value that is not a whole number >= 1 stops every command with one line, exit 2."""
    from blocklab.cli import main
    from blocklab.engine.executors import default_workers

    monkeypatch.delenv("BLOCKLAB_WORKERS", raising=False)
    assert default_workers() == max(1, min(os.cpu_count() or 1, 8))
    monkeypatch.setenv("BLOCKLAB_WORKERS", "3")
    assert default_workers() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("BLOCKLAB_WORKERS", bad)
        assert main(["theory"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"blocklab: error: BLOCKLAB_WORKERS must be a whole number >= 1, got {bad!r}"
        ]

"""How the processes a sweep starts live and die with it: a pool worker dies with its parent
however that one dies, signals meant for the parent (Ctrl-C, a closed terminal) stay with the
parent, and the jobs submitit starts here can be cancelled."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

from blocklab import plugins as plugin_loader
from blocklab.engine.devices import next_slot, worker_gpu
from blocklab.errors import UserError

PARENT_POLL = 1.0  # seconds between a pool worker's looks at whether its parent still lives
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def init_worker(
    parent: int,
    plugins: tuple[str, ...] = (),
    threads: int = 1,
    device: str = "cpu",
    slots=None,
    report: str | None = None,
) -> None:
    """A pool worker's start: signals left to the parent, death with it, `threads` torch
    threads, the plugins imported, and under device "cuda" on a machine with several GPUs its
    own GPU, the next in turn (`slots`, a file, numbers the workers as they start).
    A start that fails writes its cause to the file `report`, where the parent reads it
    (`start_failure`): the pool only tells the parent that a worker died."""
    try:
        _start(parent, plugins, threads, device, slots)
    except BaseException as exc:
        if report:
            with contextlib.suppress(OSError), open(report, "a", encoding="utf-8") as f:
                f.write(f"{type(exc).__name__}: {exc}".replace("\n", " ") + "\n")
        raise


def start_failure(report: str) -> str | None:
    """The first cause a worker wrote to `report` as its start failed (`init_worker`), if any."""
    with contextlib.suppress(OSError), open(report, encoding="utf-8") as f:
        return f.readline().strip() or None
    return None


def _start(parent: int, plugins: tuple[str, ...], threads: int, device: str, slots) -> None:
    import torch

    # the parent handles Ctrl-C and a closed terminal, and stops the pool
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _die_with(parent)
    torch.set_num_threads(threads)
    if device == "cuda" and slots is not None:
        gpu = worker_gpu(next_slot(slots), torch.cuda.device_count())
        if gpu is not None:  # "cuda" in this worker now means its own GPU
            torch.cuda.set_device(gpu)
    plugin_loader.load(plugins)


def _die_with(parent: int) -> None:
    """End this process when `parent` ends: at once on Linux (the kernel sends SIGKILL), and
    within PARENT_POLL seconds elsewhere, by a thread watching for a new parent."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the watch was set
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="parent").start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    os._exit(1)


@contextlib.contextmanager
def hangup_held():
    """SIGHUP held back from the processes started inside, which keep it held: a closed terminal
    signals its whole session, and the parent, not the workers or the resource tracker, must stop
    the pool (a tracker killed first leaks the pool's semaphores). This process receives a held
    signal at the end of the block."""
    if not hasattr(signal, "SIGHUP") or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextlib.contextmanager
def interruptible_children():
    """Processes started inside take SIGINT, even when this one ignores it, as a command started
    in the background by a shell does: they would inherit the ignoring, and submitit cancels a
    local job by SIGINT to its controller. Inside, SIGINT raises KeyboardInterrupt here."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


GUARD = 'if __name__ == "__main__":'


def check_main_importable() -> None:
    """Refuse, before a worker starts, a main script the workers cannot import as it should be.
    Spawned workers import the script that started them: one read on standard input cannot be
    imported (they died, reported as lost), and one that calls blocklab at its top level, outside
    the guard, would start the sweep again in every worker (the parent waited for ever). A
    UserError names the fix instead. A module run with -m, -c or an interactive session is fine."""
    import ast

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or getattr(main, "__spec__", None) is not None:
        return  # -c, a REPL, or -m: multiprocessing imports no script
    if path == "<stdin>" or not os.path.isfile(path):
        raise UserError(
            "worker processes import the script that started them, and a script read on standard "
            "input cannot be imported: save it to a file (its blocklab calls under "
            f"`{GUARD}`), or run with one worker"
        )
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return
    for node in tree.body:  # statements at the top level, outside any guard
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            continue
        if any(_calls_blocklab(n) for n in ast.walk(node)):
            raise UserError(
                f"{os.path.basename(path)} calls blocklab at its top level, and every worker "
                f"process imports it again: put the call under `{GUARD}`, or run with one worker"
            )


def _calls_blocklab(node) -> bool:
    """A call of `blocklab.run` (or `run`, imported from it): what starts a sweep's workers."""
    import ast

    return isinstance(node, ast.Call) and ast.unparse(node.func) in ("run", "blocklab.run")

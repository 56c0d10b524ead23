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

PARENT_POLL = 1.0  # seconds between a pool worker's looks at whether its parent still lives
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def init_worker(parent: int, plugins: tuple[str, ...] = (), threads: int = 1) -> None:
    import torch

    # the parent handles Ctrl-C and a closed terminal, and stops the pool
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _die_with(parent)
    torch.set_num_threads(threads)
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

"""How the processes a sweep starts live and die with it: a pool worker dies with its parent
however that one dies, signals meant for the parent (Ctrl-C, a closed terminal) stay with the
parent, the jobs submitit starts here can be cancelled, and a dead worker's cause is read
(`why_died`)."""

from __future__ import annotations

import ast
import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

from blocklab import plugins as plugin_loader
from blocklab.engine.devices import next_slot, worker_gpu
from blocklab.errors import DIED, UserError

PARENT_POLL = 1.0  # seconds between a pool worker's looks at whether its parent still lives
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def init_worker(
    parent: int,
    plugins: tuple[str, ...] = (),
    threads: int = 1,
    device: str = "cpu",
    slots=None,
    report: str | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """A pool worker's start: the parent's environment `env` (a forked worker starts with its
    fork server's), signals left to the parent, death with it, `threads` torch threads, the
    plugins imported, and under device "cuda" on a machine with several GPUs its own GPU, the
    next in turn (`slots`, a file, numbers the workers as they start).
    A start that fails writes its cause to the file `report`, where the parent reads it
    (`start_failure`): the pool only tells the parent that a worker died."""
    try:
        if env is not None and env != os.environ:
            os.environ.clear()
            os.environ.update(env)
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
    """End this process when `parent` ends: at once on Linux (the kernel sends SIGKILL when this
    process's own parent ends: `parent`, or the fork server that started it, which ends as soon
    as `parent` does), and within PARENT_POLL seconds elsewhere, by a thread watching both."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    starter = os.getppid()
    if not _lives(parent, starter):  # it died before the watch was set
        os._exit(1)
    threading.Thread(target=_watch, args=(parent, starter), daemon=True, name="parent").start()


def _lives(parent: int, starter: int) -> bool:
    """Whether `parent` lives, seen from a process that `starter` started: `parent` itself, or a
    fork server (`executors.pool_context`) on a POSIX system, where a signal 0 asks."""
    if os.getppid() != starter or starter == 1:  # the starter died: this one was handed to init
        return False
    if starter == parent:
        return True
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # lives, as another user
        return True
    return True


def _watch(parent: int, starter: int) -> None:
    while _lives(parent, starter):
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
    Pool workers import the script that started them: one read on standard input cannot be
    imported (they died, reported as lost), and one that calls blocklab at its top level, outside
    the guard, would start the sweep again in every worker (the parent waited for ever). A
    UserError names the fix instead. A module run with -m, -c or an interactive session is fine."""
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
    if starts_a_sweep(tree):
        raise UserError(
            f"{os.path.basename(path)} calls blocklab at its top level, and every worker "
            f"process imports it again: put the call under `{GUARD}`, or run with one worker"
        )


def starts_a_sweep(tree: ast.Module) -> bool:
    """Whether importing the script `tree` would call blocklab's `run` (`_ImportRun`)."""
    return _ImportRun().run_module(tree)


class _ImportRun:
    """What importing a script would run, read from its syntax tree as Python executes it: the
    statements at the top level in order, class bodies, decorators and default values, but not
    the body of a `def` or a `lambda` until a top-level statement calls that function, nor the
    body of the `__name__ == "__main__"` guard, which a worker's import skips. A call starts a
    sweep when its name resolves to blocklab's `run` through the script's imports at that point
    (`import blocklab`, `from blocklab import run as go`, `from blocklab import api`), so a
    function of the user's own named `run` is not one."""

    def __init__(self):
        self.names: dict[str, str] = {}  # a name bound at the top level -> what it is
        self.defs: dict[str, ast.AST] = {}  # top-level functions, by name
        self.followed: set[str] = set()  # functions already entered (recursion)

    def run_module(self, tree: ast.Module) -> bool:
        return any(self._statement(node) for node in tree.body)

    def _statement(self, node: ast.AST) -> bool:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self._bind_import(node)
            return False
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            runs = self._decorators(node) | self._expressions(_defaults(node.args))
            self.names[node.name] = "def"
            self.defs[node.name] = node
            return runs
        if isinstance(node, ast.ClassDef):
            runs = self._decorators(node) | self._expressions(node.bases)
            runs |= any(self._statement(n) for n in node.body)
            self.names[node.name] = "class"
            return runs
        if isinstance(node, ast.If) and _is_main_guard(node.test) is not None:
            skipped = node.body if _is_main_guard(node.test) else node.orelse
            ran = node.orelse if skipped is node.body else node.body
            return any(self._statement(n) for n in ran)
        # any other statement runs its expressions and the statements nested in it
        children = list(ast.iter_child_nodes(node))
        runs = self._expressions([n for n in children if isinstance(n, ast.expr)])
        for child in children:
            if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case, ast.withitem)):
                runs |= self._statement(child)
        for target in _assigned(node):  # a name rebound by the user is theirs from here on
            self.names[target] = "value"
        return runs

    def _decorators(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
        """A decorator is evaluated, then called with what it decorates."""
        return any(self._expressions([d]) or self._call_starts(d) for d in node.decorator_list)

    def _expressions(self, nodes) -> bool:
        """Whether evaluating these expressions starts a sweep: a lambda's body is not run."""
        for expr in nodes:
            stack = [expr]
            while stack:
                n = stack.pop()
                if isinstance(n, ast.Lambda):
                    stack.extend(_defaults(n.args))
                    continue
                if isinstance(n, ast.Call) and self._call_starts(n.func):
                    return True
                stack.extend(ast.iter_child_nodes(n))
        return False

    def _call_starts(self, func: ast.expr) -> bool:
        target = self._resolve(func)
        if target == "blocklab.run":
            return True
        if isinstance(func, ast.Name) and self.names.get(func.id) == "def":
            if func.id in self.followed:
                return False
            self.followed.add(func.id)  # calling a top-level function runs its body now
            return any(self._statement(n) for n in self.defs[func.id].body)
        return False

    def _resolve(self, func: ast.expr) -> str | None:
        if isinstance(func, ast.Name):
            return self.names.get(func.id)
        if isinstance(func, ast.Attribute):
            owner = self._resolve(func.value)
            if owner in ("blocklab", "blocklab.api") and func.attr == "run":
                return "blocklab.run"
            if owner == "blocklab" and func.attr == "api":
                return "blocklab.api"
        return None

    def _bind_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.names[alias.asname] = _module(alias.name)
                else:  # `import blocklab.api` binds `blocklab`
                    top = alias.name.split(".")[0]
                    self.names[top] = "blocklab" if top == "blocklab" else "value"
            return
        source = _module(node.module or "") if node.level == 0 else None
        for alias in node.names:
            name = alias.asname or alias.name
            if source in ("blocklab", "blocklab.api") and alias.name == "run":
                self.names[name] = "blocklab.run"
            elif source == "blocklab" and alias.name == "api":
                self.names[name] = "blocklab.api"
            else:
                self.names[name] = "value"


def _module(name: str) -> str:
    return name if name in ("blocklab", "blocklab.api") else "value"


def _defaults(args: ast.arguments) -> list[ast.expr]:
    """What a `def` or `lambda` evaluates when it is defined: its default values."""
    return [*args.defaults, *[d for d in args.kw_defaults if d is not None]]


def _is_main_guard(test: ast.expr) -> bool | None:
    """True for `__name__ == "__main__"`, False for `__name__ != "__main__"`, else None."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    sides = {ast.unparse(test.left), ast.unparse(test.comparators[0])}
    if sides != {"__name__", "'__main__'"}:
        return None
    op = test.ops[0]
    return True if isinstance(op, ast.Eq) else False if isinstance(op, ast.NotEq) else None


def _assigned(node: ast.AST) -> list[str]:
    """The names a statement binds at its own level (assignments, for targets, with ... as)."""
    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        targets = [node.optional_vars]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def why_died(report: str, processes) -> str:
    """What the parent can see of a pool worker's death: the cause a failed start wrote
    (`processes.init_worker`), else the exit of the first dead worker: a signal (SIGKILL is how
    the kernel's out-of-memory killer ends a process), or a status (an import that failed before
    the worker could start prints its traceback above)."""
    failed = start_failure(report)
    if failed:
        return f"a worker process failed to start: {failed}"
    processes = list(processes)
    for process in processes:  # stopped by `_stop` by now, the dead one first of all
        process.join(timeout=2)
    # the pool's own thread reaps its dead workers too: where it reaped one first, this join
    # finds no child and returns before that thread has stored the exit code it read
    deadline = time.monotonic() + 2
    while any(p.exitcode is None for p in processes) and time.monotonic() < deadline:
        time.sleep(0.01)
    codes = [process.exitcode for process in processes]
    # SIGTERM is how `_stop` ended the live ones: another exit is the cause
    for code in sorted((c for c in codes if c), key=lambda c: c == -signal.SIGTERM):
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else -code
            return f"a worker process was killed by {name} (killed, or out of memory)"
        return f"a worker process exited with status {code} (its output above says why)"
    return DIED

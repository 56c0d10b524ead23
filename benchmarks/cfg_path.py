"""The path of the degree sweep's config through the code: every call whose arguments hold the
config, in order, by file; then the files it entered and the moves from one file to another (a
call back into a file already left counts as a move). The config's own methods and properties
(`cfg.arms()`, `cfg.staged`) read it where it is declared, and are counted apart.

    PYTHONPATH=src python benchmarks/cfg_path.py [--optimizer adam] [--experiment NAME]
        [--command [WORD ...]]

By default it follows the very config object `run` was given, from the experiment's `run` down:
the tiny degree-sweep form (`gpu_check.TINY`) in this process, one worker, into a temporary store.
With `--command` it runs that form's whole command (`blocklab degree-sweep ... --json`; or the
words given after it, for a tree whose `gpu_check` cannot be imported) and follows every
degree-sweep config from the command line through the run path, the experiment, the analysis
and the report. `--experiment NAME` follows another registered experiment's config through its
tiny form's whole command (as `--command`). A call from a module into one of a higher layer (a
callback: the layers as `tests/project/test_architecture.py` reads them) is counted as a call up
a layer.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

import blocklab

ROOT = str(Path(blocklab.__file__).parent)
sys.path.insert(0, str(Path(__file__).parent))

# the layers as the architecture test reads them: one owner of the map
# (an older checkout's is at tests/ itself)
TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS / "project" if (TESTS / "project").is_dir() else TESTS))
from test_architecture import LAYER, _component  # noqa: E402


def layer(file: str) -> int:
    """The layer of a source file under src/blocklab ('engine/sweep.py')."""
    parts = [p for p in Path(file).with_suffix("").parts if p != "__init__"]
    return LAYER[_component(".".join(("blocklab", *parts)))]


def _profile(holds, calls, own, ups=None):
    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(ROOT):
            return
        if holds(frame.f_locals.get("self")):
            own[frame.f_code.co_qualname] = own.get(frame.f_code.co_qualname, 0) + 1
        elif any(holds(v) for v in frame.f_locals.values()):
            name = frame.f_code.co_filename[len(ROOT) + 1 :]
            calls.append((name, frame.f_code.co_qualname))
            caller = frame.f_back.f_code.co_filename if frame.f_back else ""
            if ups is not None and caller.startswith(ROOT):
                caller = caller[len(ROOT) + 1 :]
                if layer(name) > layer(caller):
                    ups.append(f"{caller} -> {name}:{frame.f_code.co_qualname}")

    return profile


def trace(optimizer: str) -> list[tuple[str, str]]:
    from blocklab import config
    from blocklab.engine.executors import Resources
    from blocklab.experiments import EXPERIMENTS
    from blocklab.store import Store

    exp = EXPERIMENTS.get("degree_sweep")
    flags = {"depths": (1, 2), "seeds": 3, "n_boot": 50, "train": {"steps": 16}}
    if optimizer == "adam":
        flags = {**flags, "lr_grid": (1e-2,), "train": {"optimizer": "adam", "steps": 16}}
    else:
        flags["train"]["warm_start"] = 50
    cfg = config.resolve(exp.Config, exp.Config(), None, flags)
    calls: list[tuple[str, str]] = []
    own: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sys.setprofile(_profile(lambda v: v is cfg, calls, own))
        try:
            exp.run(cfg, Store(Path(tmp)), resources=Resources(workers=1), progress=False)
        finally:
            sys.setprofile(None)
    print("the config's own methods: " + ", ".join(f"{k} x{n}" for k, n in own.items()))
    return calls


def trace_command(
    optimizer: str, words: list[str], ups: list[str], name: str = "degree_sweep"
) -> list[tuple[str, str]]:
    from blocklab.cli import main
    from blocklab.experiments import EXPERIMENTS

    if not words:
        from gpu_check import TINY

        forms = {k.replace("-", " "): v for k, v in TINY.items()}
        words = forms[name.replace("_", " ")]
    kind = EXPERIMENTS.get(name).Config
    argv = [*words, "--workers", "1", "--device", "cpu", "--quiet", "--json"]
    if optimizer == "adam":  # no warm start: it sets a second-order fit
        at = argv.index("--warm-start") if "--warm-start" in argv else None
        argv = argv if at is None else argv[:at] + argv[at + 2 :]
        argv += ["--optimizer", "adam", "--lr-grid", "1e-2"]
    calls: list[tuple[str, str]] = []
    own: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        sys.setprofile(_profile(lambda v: isinstance(v, kind), calls, own, ups))
        try:
            main([*argv, "--out", tmp])
        finally:
            sys.setprofile(None)
    print("the config's own methods: " + ", ".join(f"{k} x{n}" for k, n in own.items()))
    return calls


def main() -> None:
    from collections import Counter

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--optimizer", default="lm", choices=("lm", "adam"))
    p.add_argument("--experiment", default="degree_sweep", help="the experiment to follow")
    p.add_argument("--command", nargs=argparse.REMAINDER, help="follow the whole command")
    args, ups = p.parse_args(), []
    if args.experiment != "degree_sweep" and args.command is None:
        args.command = []  # another experiment: its tiny form's whole command
    if args.command is None:
        calls = trace(args.optimizer)
    else:
        calls = trace_command(args.optimizer, args.command, ups, args.experiment)
    by_file: dict[str, Counter] = {}
    for file, fn in calls:
        by_file.setdefault(file, Counter())[fn] += 1
    for file, fns in by_file.items():
        print(f"{file}: " + ", ".join(f"{fn} x{n}" for fn, n in fns.items()))
    edges = Counter((a[0], b[0]) for a, b in zip(calls, calls[1:], strict=False) if a[0] != b[0])
    for (a, b), n in edges.items():
        print(f"  {a} -> {b}: {n}")
    for up, n in Counter(ups).items():
        print(f"  up a layer: {up} x{n}")
    print(f"{len(calls)} calls with the config in {len(by_file)} file(s); "
          f"{sum(edges.values())} moves between files"
          + (f"; {len(ups)} calls up a layer" if args.command is not None else ""))  # fmt: skip


if __name__ == "__main__":
    main()

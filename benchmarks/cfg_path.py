"""The path of the degree sweep's config through the code: every call whose arguments hold the
very config object `run` was given, in order, by file; then the files it entered and the moves
from one file to another (a call back into a file already left counts as a move). The config's
own methods and properties (`cfg.arms()`, `cfg.staged`) read it where it is declared, and are
counted apart.

    PYTHONPATH=src python benchmarks/cfg_path.py [--optimizer adam]

It runs the tiny degree-sweep form (`gpu_check.TINY`) in this process, one worker, into a
temporary store.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import blocklab

ROOT = str(Path(blocklab.__file__).parent)


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

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(ROOT):
            return
        if frame.f_locals.get("self") is cfg:
            own[frame.f_code.co_qualname] = own.get(frame.f_code.co_qualname, 0) + 1
        elif any(v is cfg for v in frame.f_locals.values()):
            name = frame.f_code.co_filename[len(ROOT) + 1 :]
            calls.append((name, frame.f_code.co_qualname))

    with tempfile.TemporaryDirectory() as tmp:
        sys.setprofile(profile)
        try:
            exp.run(cfg, Store(Path(tmp)), resources=Resources(workers=1), progress=False)
        finally:
            sys.setprofile(None)
    print("the config's own methods: " + ", ".join(f"{k} x{n}" for k, n in own.items()))
    return calls


def main() -> None:
    from collections import Counter

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--optimizer", default="lm", choices=("lm", "adam"))
    calls = trace(p.parse_args().optimizer)
    by_file: dict[str, Counter] = {}
    for file, fn in calls:
        by_file.setdefault(file, Counter())[fn] += 1
    for file, fns in by_file.items():
        print(f"{file}: " + ", ".join(f"{fn} x{n}" for fn, n in fns.items()))
    edges = Counter((a[0], b[0]) for a, b in zip(calls, calls[1:], strict=False) if a[0] != b[0])
    for (a, b), n in edges.items():
        print(f"  {a} -> {b}: {n}")
    print(f"{len(calls)} calls with the config in {len(by_file)} file(s); "
          f"{sum(edges.values())} moves between files")  # fmt: skip


if __name__ == "__main__":
    main()

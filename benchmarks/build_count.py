"""How many times the networks read before a degree run's fits are built: every network built
from a trial's spec outside the trial's own run (the design checks, the fits' cost estimate and
timing, the build check), over the tiny staged run of `tests/experiments/degree_sweep/
test_preflight.py` (d=2, d=3, mlp and the control, 2 teachers x 2 seeds, one worker).

    PYTHONPATH=src python benchmarks/build_count.py

It prints each network (arm, depth, width, seed) with its builds, then the total: builds of how
many networks, and the most any one was built. With PYTHONPATH set to another checkout's src it
counts that code's builds (the counting and the run's config are this checkout's).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests/experiments/degree_sweep"))
from test_preflight import tiny_run  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        trials, built = tiny_run(Path(tmp), patch)
    assert trials.rows and not trials.failed
    for (arm, depth, width, seed), n in sorted(built.items()):
        print(f"{arm} depth {depth} width {width} seed {seed}: {n}")
    print(f"{sum(built.values())} builds of {len(built)} networks; at most {max(built.values())} "
          "of one")  # fmt: skip


if __name__ == "__main__":
    main()

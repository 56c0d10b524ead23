"""Check a machine's accelerator in one command: every training experiment's tiny form and the bench
on one device, a line each (trials done / failed, seconds), then seed 001's quick and medium
depth-width forms timed. It runs from a plain checkout, with no installation, since a GPU machine
may have no network:

    PYTHONPATH=src python benchmarks/gpu_check.py                  # --device cuda
    PYTHONPATH=src python benchmarks/gpu_check.py --device cpu --no-forms --precision bf16

Exit status 0 when every tiny form finished every trial and the bench ran; 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

import blocklab
from blocklab.cli import main

STEPS = ["--steps", "4", "--batch-size", "16", "--eval-points", "2"]
# each experiment at a few trials of a few steps: its code path on the device, in seconds
TINY = {
    "depth-width": ["depth-width", "--depths", "1", "2", "--budgets", "800", "3000", "--seeds", "2"]
    + ["--vocab", "300", "--seq-len", "8", "--n-train", "128", "--max-chars", "50000", *STEPS],
    "mad": ["mad", "--tasks", "icr", "mqar", "--blocks", "softmax_attention", "hyena", "mixer"]
    + ["--levels", "2", "--seeds", "2", "--n-train", "128", "--budget", "3000"]
    + ["--lr-grid", "3e-3", *STEPS],
    "sanford qsa": ["sanford", "qsa", "--qs", "1", "--dims", "2", "--seeds", "2"]
    + ["--seq-len", "6", "--n-train", "128", *STEPS],
    "sanford match": ["sanford", "match", "--tasks", "match2", "match3", "--widths", "6"]
    + ["--seeds", "2", "--n-train", "128", *STEPS],
    "needle": ["needle", "--seq-lens", "4", "--tau1s", "3", "--draws", "4", "--samples", "8"]
    + ["--trained-seq-lens", "8", "--seeds", "2", *STEPS],
    "collapse": ["collapse", "--depth", "4", "--width", "8", "--seq-len", "8", "--n-train", "128"]
    + ["--seeds", "2", *STEPS],
    "degree-sweep": ["degree-sweep", "--depths", "1", "2", "--seeds", "3", "--steps", "16"]
    + ["--warm-start", "50", "--n-boot", "50"],
}
BENCH = ["bench", "--widths", "32", "--members", "4", "--seconds", "0.2", "--lm-widths", "16"]
BENCH += ["--fit-depths", "2", "--split-depths", "8"]


def _quiet_main(argv: list[str]) -> int:
    """`blocklab` in this process, its output swallowed (the summary line says what counts)."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            return main(argv)
        except SystemExit as e:  # argparse's exits
            return int(e.code or 0)


def _trials(out: Path) -> tuple[int, int]:
    try:
        runs = blocklab.load_runs(out)
    except Exception:  # no store: nothing ran
        return 0, 0
    if len(runs) == 0:
        return 0, 0
    done = int((runs["status"] == "done").sum())
    return done, len(runs) - done


def check(device: str, precision: str | None, forms: bool) -> bool:
    ok = True
    extra = ["--device", device, "--workers", "1", "--quiet"]
    extra += ["--precision", precision] if precision else []
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in TINY.items():
            out = Path(tmp) / name.replace(" ", "-")
            start = time.perf_counter()
            code = _quiet_main([*argv, *extra, "--out", str(out)])
            done, failed = _trials(out)
            good = code == 0 and failed == 0 and done > 0
            ok &= good
            print(
                f"{'ok  ' if good else 'FAIL'} {name}: {done} done / {failed} failed, "
                f"{time.perf_counter() - start:.1f} s (exit {code})",
                flush=True,
            )
        start = time.perf_counter()
        code = _quiet_main([*BENCH, "--device", device])
        ok &= code == 0
        print(f"{'ok  ' if code == 0 else 'FAIL'} bench: {time.perf_counter() - start:.1f} s "
              f"(exit {code})", flush=True)  # fmt: skip
        if forms:
            for form in ([], ["--medium"]):
                out = Path(tmp) / f"dw{len(form)}"
                start = time.perf_counter()
                code = _quiet_main(["depth-width", *form, *extra, "--out", str(out)])
                done, failed = _trials(out)
                print(
                    f"depth-width {form[0] if form else 'quick'} form: {done} done / {failed} "
                    f"failed in {time.perf_counter() - start:.1f} s (exit {code})",
                    flush=True,
                )
    return ok


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--precision", choices=("auto", "fp32", "tf32", "bf16"), help="(auto)")
    p.add_argument(
        "--no-forms", dest="forms", action="store_false", help="skip the timed depth-width forms"
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    sys.exit(0 if check(args.device, args.precision, args.forms) else 1)

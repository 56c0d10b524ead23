"""Check a machine's accelerator in one command: every training experiment's tiny form and the bench
on one device, a line each (trials done / failed, seconds); every registered measure on a network
there; the host reads of an ensemble's training (on CUDA: the syncs torch reports, which may grow
with the steps by the reads and copies the design schedules, no more: `sync_line`); the ensemble
optimizer's two paths timed on the device (`optimizer_line`: which one the device takes, and
whether it is the faster there); then seed
001's quick and medium depth-width forms and the token suite's width sweep (`mad --sweep-width`,
its zoology claim's line printed) timed, with `--workers` processes sharing the device, each form
with the device's busy share while it ran (`busy.Busy`: the driver's utilization samples). It
runs from a plain checkout, with no installation, since a GPU machine may have no network:

    PYTHONPATH=src python benchmarks/gpu_check.py                  # --device cuda
    PYTHONPATH=src python benchmarks/gpu_check.py --device cpu --no-forms --precision bf16

Exit status 0 when every tiny form finished every trial, the bench ran, every measure ran and the
syncs grew no more than scheduled; 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

import blocklab
from blocklab.cli import main
from blocklab.experiments.mad.report.published import GATED_CLAIM
from blocklab.fitting.ensemble import CHUNK_COPIES
from blocklab.fitting.monitor import READ_EVERY, eval_steps
from blocklab.fitting.train import ONLINE_CHUNK
from blocklab.specs import NetShape

sys.path.insert(0, str(Path(__file__).parent))
from busy import Busy  # noqa: E402

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


def _json_main(argv: list[str]) -> tuple[int, dict]:
    """`blocklab ... --json` in this process: its exit status and the JSON it printed ({} if
    none)."""
    sink, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(err):
        try:
            code = main([*argv, "--json"])
        except SystemExit as e:
            code = int(e.code or 0)
    try:
        return code, json.loads(sink.getvalue())
    except ValueError:
        return code, {}


def zoology_line(payload: dict) -> str:
    """The width sweep's line on zoology's claim (`mad.report.width_sweep.claim`): its status and
    evidence, or that the run printed none."""
    for found in payload.get("findings") or []:
        if found.get("claim") == GATED_CLAIM:
            return f"zoology's claim: {found.get('status')} ({found.get('evidence')})"
    return "zoology's claim: not in the run's JSON"


def _trials(out: Path) -> tuple[int, int]:
    try:
        runs = blocklab.load_runs(out)
    except Exception:  # no store: nothing ran
        return 0, 0
    if len(runs) == 0:
        return 0, 0
    done = int((runs["status"] == "done").sum())
    return done, len(runs) - done


def measures(device: str) -> bool:
    """Every registered measure, with its first example, on the contract networks moved to the
    device: one line each, ok where it ran on at least one network it accepts."""
    from blocklab.checks.measures import NETS, D, T, cases, net
    from blocklab.errors import UserError

    ok = True
    for case in cases():
        ran, error = [], ""
        for kind in NETS:
            try:
                case.make().measure(net(kind).to(device), T, D, seed=3)
                ran.append(kind)
            except UserError:  # a network this measure refuses, on any device
                continue
            except Exception as exc:  # noqa: BLE001 -- reported, the check goes on
                error = f"{type(exc).__name__}: {exc}"
        good = bool(ran) and not error
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} measure {case}: ran on {', '.join(ran) or 'none'}"
              f"{' (' + error[:200] + ')' if error else ''}", flush=True)  # fmt: skip
    return ok


SYNC_STEPS = (40, 400)  # the two runs whose syncs are compared
SYNC_EVAL_POINTS = 2  # checkpoints after step 0 in each


def syncs(device: str, steps: int) -> int:
    """Host reads while a two-member ensemble trains `steps` steps with SYNC_EVAL_POINTS
    checkpoints: on CUDA the synchronizations torch warns of (`torch.cuda.set_sync_debug_mode`)."""
    from blocklab.engine import trial
    from blocklab.models import parse_arm
    from blocklab.specs import TrainConfig, TrialSpec

    cfg = TrainConfig(steps=steps, batch_size=16, eval_points=SYNC_EVAL_POINTS)
    specs = [
        TrialSpec(
            "teacher",
            {},
            parse_arm("3"),
            0,
            NetShape(2, 8, norm="layer"),
            dataclasses.replace(cfg, lr=lr),
            seed,
            None,
        )
        for seed, lr in ((0, 3e-3), (1, 1e-2))
    ]
    cuda = device.startswith("cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            trial.train_group(specs, device)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def scheduled(steps: int, eval_points: int = SYNC_EVAL_POINTS) -> tuple[int, int]:
    """The host reads and batch copies the design schedules for the ensemble of `syncs` over
    `steps` steps: a read of the pending losses at each checkpoint after step 0 and every
    READ_EVERY steps (`monitor.DeviceMonitors`), and CHUNK_COPIES copies of fresh batches per
    ONLINE_CHUNK steps (`ensemble.stacked_online`). The rest a run syncs on (its data and networks
    moved to the device, the checkpoints' evaluations) is the same for any number of steps."""
    due = set(eval_steps(steps, eval_points)) - {0}
    reads = len(due | set(range(READ_EVERY, steps + 1, READ_EVERY)))
    return reads, CHUNK_COPIES * -(-steps // ONLINE_CHUNK)


def sync_line(counts: dict[int, int], eval_points: int = SYNC_EVAL_POINTS) -> tuple[bool, str]:
    """The verdict on the syncs counted at two step counts ({steps: syncs}): they may grow by the
    reads and copies scheduled between the two (`scheduled`), no more; and the line saying so."""
    (short, n_short), (long, n_long) = sorted(counts.items())
    reads, copies = (
        b - a
        for a, b in zip(scheduled(short, eval_points), scheduled(long, eval_points), strict=True)
    )
    good = n_long - n_short <= reads + copies
    return good, (
        f"{'ok  ' if good else 'FAIL'} ensemble syncs: {n_short} in {short} steps, {n_long} in "
        f"{long} steps; scheduled growth {reads + copies} (reads {reads} every READ_EVERY = "
        f"{READ_EVERY} steps, copies {copies} per ONLINE_CHUNK = {ONLINE_CHUNK} batches)"
    )


def optimizer_line(device: str, width: int = 256, members: int = 16, steps: int = 50) -> str:
    """The ensemble optimizer's paths (`stacked_adamw.PATHS`) timed on the device, milliseconds
    per step (the fastest of three runs of `steps`), on the parameters of the bench's MLP row at
    `width` with E = `members`; gradients are fixed random numbers and every member lives."""
    from blocklab.bench import throughput
    from blocklab.fitting.ensemble import Ensemble
    from blocklab.fitting.stacked_adamw import PATHS, StackedAdamW, default_path

    cfg = dataclasses.replace(throughput.BenchConfig(), device=device)
    ms = {}
    for path in PATHS:
        ens = Ensemble([throughput._net(cfg, width, seed) for seed in range(members)])
        params = [p for p in ens.params.values() if p.requires_grad]
        opt = StackedAdamW(params, [1e-3] * members, 0.01, path=path)
        for g in opt.grads:
            g.normal_()
        live = torch.ones(members, dtype=torch.bool, device=device)
        norms = torch.ones(members, device=device)
        best = float("inf")
        for _ in range(3):
            throughput.sync(device)
            start = time.perf_counter()
            for _ in range(steps):
                opt.step(1.0, live, norms, 1.0)
            throughput.sync(device)
            best = min(best, time.perf_counter() - start)
        ms[path] = best / steps * 1e3
    taken = default_path(torch.device(device))
    fastest = min(ms, key=ms.get)
    return (
        f"{'ok  ' if taken == fastest else 'SLOW'} ensemble optimizer at width {width}, E = "
        f"{members}: " + ", ".join(f"{p} {t:.2f} ms a step" for p, t in ms.items())
        + f"; {device} takes {taken}"
    )


def check(device: str, precision: str | None, forms: bool, workers: int) -> bool:
    ok = True
    extra = ["--device", device, "--workers", "1", "--quiet"]
    extra += ["--precision", precision] if precision else []
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in TINY.items():
            out = Path(tmp) / name.replace(" ", "-")
            start = time.perf_counter()
            with Busy() as busy:
                code = _quiet_main([*argv, *extra, "--out", str(out)])
            done, failed = _trials(out)
            good = code == 0 and failed == 0 and done > 0
            ok &= good
            print(
                f"{'ok  ' if good else 'FAIL'} {name}: {done} done / {failed} failed, "
                f"{time.perf_counter() - start:.1f} s (exit {code}), {busy.words()}",
                flush=True,
            )
        start = time.perf_counter()
        code = _quiet_main([*BENCH, "--device", device])
        ok &= code == 0
        print(f"{'ok  ' if code == 0 else 'FAIL'} bench: {time.perf_counter() - start:.1f} s "
              f"(exit {code})", flush=True)  # fmt: skip
        ok &= measures(device)
        if device.startswith("cuda"):
            good, line = sync_line({steps: syncs(device, steps) for steps in SYNC_STEPS})
            ok &= good
            print(line, flush=True)
        print(optimizer_line(device), flush=True)  # measured, not a pass or fail
        if forms:
            shared = [*extra[:2], "--workers", str(workers), *extra[4:]]
            for form in ([], ["--medium"]):
                out = Path(tmp) / f"dw{len(form)}"
                start = time.perf_counter()
                with Busy() as busy:
                    code = _quiet_main(["depth-width", *form, *shared, "--out", str(out)])
                done, failed = _trials(out)
                print(
                    f"depth-width {form[0] if form else 'quick'} form, {workers} worker(s): "
                    f"{done} done / {failed} failed in {time.perf_counter() - start:.1f} s "
                    f"(exit {code}), {busy.words()}",
                    flush=True,
                )
            # the token suite's width sweep at its form's size: zoology's claim decided or not
            out = Path(tmp) / "mad-width"
            start = time.perf_counter()
            with Busy() as busy:
                code, payload = _json_main(["mad", "--sweep-width", *shared, "--out", str(out)])
            done, failed = _trials(out)
            print(
                f"mad --sweep-width, {workers} worker(s): {done} done / {failed} failed in "
                f"{time.perf_counter() - start:.1f} s (exit {code}), {busy.words()}; "
                f"{zoology_line(payload)}",
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
    p.add_argument(
        "--workers", type=int, default=4, help="processes sharing the device in the timed forms"
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    sys.exit(0 if check(args.device, args.precision, args.forms, args.workers) else 1)

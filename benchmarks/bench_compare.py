"""`blocklab bench` on the working tree against a commit, in alternating runs on one machine: every
row's speed, and a failure where any row got slower by more than its run-to-run spread.

    python benchmarks/bench_compare.py COMMIT [--also COMMIT ...] [--rounds 3] [--threads 1 2]
        [--json FILE] [-- BENCH FLAGS]

COMMIT is checked out in a temporary git worktree (removed afterwards) and run from its sources
with this interpreter (PYTHONPATH), as the working tree is. Each round runs `blocklab bench
--json` once per side and thread count, the sides in turn (their order reversed every other
round, so a machine that drifts slows each side alike). BENCH FLAGS go to every run; by default
the rows of (b) and (d), `--fit-depths --split-depths` (the fits are left out; name their depths
to time them too). `--also` adds sides, each read against COMMIT, as the tree is.

Every row that measures a speed is compared: per width, the ensemble's and the one-by-one loop's
model-steps per second, and the ensemble's speed-up over one by one; per fit depth, fits per
minute; per split depth, iterations per second. For each, over the rounds:
- ratio: the side's median over COMMIT's median;
- spread: the two sides' run-to-run spreads added, each (max - min) / median over its rounds;
- a row fails where ratio < 1 - spread: it got slower by more than its figures move between runs.
With one round there is no spread and nothing fails. The exit status is 1 where a row failed, 0
otherwise; 2 for bad input or a bench that failed. `--json` is written after every run, so a
comparison stopped part way keeps the runs it finished.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = "tree"
DEFAULT_FLAGS = ("--fit-depths", "--split-depths")


def rates(result: dict) -> dict[str, float]:
    """One bench result's speeds by row: a name for each, higher faster."""
    out = {}
    for w in result.get("widths", []):
        out[f"mlp {w['width']:>3} ensemble"] = w["ensemble_steps_per_s"]
        out[f"mlp {w['width']:>3} one by one"] = w["sequential_steps_per_s"]
        out[f"mlp {w['width']:>3} speed-up"] = w["speedup"]
    for w in result.get("lm_widths", []):
        out[f"lm  {w['width']:>3} ensemble"] = w["ensemble"]
        out[f"lm  {w['width']:>3} one by one"] = w["sequential"]
        out[f"lm  {w['width']:>3} speed-up"] = w["speedup"]
    for f in result.get("fit_depths", []):
        out[f"fit depth {f['depth']} one at a time"] = f["sequential_fits_per_min"]
        out[f"fit depth {f['depth']} batched"] = f["batched_fits_per_min"]
    for s in result.get("fit_split", []):
        ms = s["residuals_ms"] + s["jacobian_ms"] + s["normal_ms"] + s["solve_ms"]
        out[f"split P={s['params']} iterations/s"] = 1e3 / ms
    return out


def spread(values: list[float]) -> float:
    """Run-to-run spread: (max - min) / median; 0 for one run."""
    return (max(values) - min(values)) / statistics.median(values)


def compare(side: list[dict[str, float]], base: list[dict[str, float]]) -> list[dict]:
    """Each row of a side against the base, over rounds (one dict of `rates` per round)."""
    rows = []
    for name in base[0]:
        if not all(name in r for r in side + base):
            continue
        mine, theirs = [r[name] for r in side], [r[name] for r in base]
        ratio = statistics.median(mine) / statistics.median(theirs)
        band = spread(mine) + spread(theirs)
        rows.append(
            {
                "row": name,
                "base": statistics.median(theirs),
                "side": statistics.median(mine),
                "ratio": ratio,
                "spread": band,
                "slower": len(mine) > 1 and ratio < 1 - band,
            }
        )
    return rows


@contextlib.contextmanager
def checkout(commit: str) -> Iterator[Path]:
    """The commit's tree in a temporary git worktree."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), commit],
            check=True,
            capture_output=True,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False
            )


def bench(src: Path, threads: int, flags: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src / "src")}
    cmd = [sys.executable, "-m", "blocklab", "bench", "--json", "--threads", str(threads), *flags]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"{src}: {' '.join(cmd[2:])} exited {done.returncode}: {last}")
    return json.loads(done.stdout)


def run(
    sides: dict[str, Path], threads: list[int], rounds: int, flags: list[str], save=None
) -> dict:
    """Every side's bench results, by thread count, in rounds; `save(results)` after each run, so
    an interrupted comparison keeps every run it finished."""
    order = list(sides)
    results = {t: {s: [] for s in sides} for t in threads}
    for r in range(rounds):
        for t in threads:
            for s in order if r % 2 == 0 else order[::-1]:
                print(f"round {r + 1}/{rounds}, {t} thread(s): {s}", file=sys.stderr, flush=True)
                results[t][s].append(bench(sides[s], t, flags))
                if save is not None:
                    save(results)
    return results


def report(results: dict, base: str, machine: str) -> tuple[list[str], bool]:
    lines, failed = [machine], False
    for t, by_side in results.items():
        first = by_side[base][0]
        ceiling = statistics.median(r["matmul_ceiling_gflops"] for r in by_side[base])
        lines += ["", f"{t} thread(s); matmul ceiling {ceiling:.0f} GFLOP/s ({first['device']})"]
        base_rates = [rates(r) for r in by_side[base]]
        for side, runs in by_side.items():
            if side == base:
                continue
            lines.append(f"{side} against {base}, medians of {len(runs)} runs:")
            lines.append(f"  {'row':<28} {base:>10} {side:>10}  ratio  spread")
            for row in compare([rates(r) for r in runs], base_rates):
                failed |= row["slower"]
                mark = "SLOWER" if row["slower"] else ""
                lines.append(
                    f"  {row['row']:<28} {row['base']:>10.2f} {row['side']:>10.2f}  "
                    f"{row['ratio']:.3f}  {row['spread']:.3f}  {mark}"
                )
    return lines, failed


def _machine() -> str:
    flags = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    simd = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    return f"{os.cpu_count()} cores; SIMD flags: {' '.join(simd) or 'none found'}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else list(DEFAULT_FLAGS)
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("commit", help="the commit the working tree is compared against")
    p.add_argument("--also", nargs="*", default=[], help="more commits, each against COMMIT")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (3)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads (1 2)")
    p.add_argument("--json", type=Path, help="write every run's bench result here")
    args = p.parse_args(own)
    if args.rounds < 1 or min(args.threads) < 1:
        p.error("--rounds and --threads take positive integers")
    with contextlib.ExitStack() as stack:
        sides = {TREE: ROOT}
        for commit in [args.commit, *args.also]:
            try:
                sides[commit] = stack.enter_context(checkout(commit))
            except subprocess.CalledProcessError:
                print(f"error: cannot check out {commit!r}", file=sys.stderr)
                return 2

        def save(results: dict) -> None:
            args.json.write_text(json.dumps({"flags": extra, "results": results}, indent=1))

        try:
            results = run(sides, args.threads, args.rounds, extra, save if args.json else None)
        except RuntimeError as e:  # a side's bench failed: its reason, in one line
            print(f"error: {e}", file=sys.stderr)
            return 2
    lines, failed = report(results, args.commit, _machine())
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    # a stopped comparison still removes its worktrees: the exit runs the context's cleanup
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())

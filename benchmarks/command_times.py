"""Time experiment commands and record the times `--help` states: the package's timings file,
`src/blocklab/timings.json` (read by `blocklab.cli.timings`).

    python benchmarks/command_times.py "seprank degree" collapse [--form full] [--checkout DIR]
    python benchmarks/command_times.py --dry-run         # every command: what would run

Each command runs its quick defaults (or, with `--form NAME`, that named form) once, into a
fresh run directory, with progress off and `BLOCKLAB_WORKERS` unset (so `--workers` takes its
default), in the interpreter and source of the checkout `--checkout` (this repository by
default). An entry records the command line, the wall time, the machine (CPU model, cores,
vector-extension flags of `lscpu`, the 1-minute load before the run, and the CPU-seconds other
work took while it ran: a run waits first until other work is quiet), the checkout's commit and
whether its source had uncommitted changes, the date, the torch version, and the fingerprint of
the config the command resolved to (`blocklab.cli.timings.config_fingerprint`), which a test
compares with the config's now. A command that fails is not recorded. Entries of commands not
timed here stay as they are, among them those kept from a results log (their `source` names it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIMD = ("avx", "fma", "amx", "sse4")  # the lscpu flags kept: the vector extensions
ABOUT = (
    "Measured wall times of blocklab commands, the one source of the times their --help states. "
    "Written by benchmarks/command_times.py (or kept from the results log an entry's source "
    "names); tests/cli/test_timings.py holds every entry to its command's current config."
)
PROBE = """
import json, sys
import torch
from blocklab.cli.timings import fingerprint_now
found = fingerprint_now(sys.argv[1], sys.argv[2])
print(json.dumps({"fingerprint": found, "torch": torch.__version__}))
"""


def machine() -> dict:
    """The CPU model, its cores and its vector-extension flags (`lscpu`)."""
    fields = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    for line in out.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    flags = sorted(f for f in fields.get("Flags", "").split() if f.startswith(SIMD))
    return {"cpu": fields.get("Model name", ""), "cores": os.cpu_count() or 1, "flags": flags}


def busy_seconds() -> float:
    """CPU-seconds the whole machine has spent busy since boot (`/proc/stat`; 0 elsewhere)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_for_quiet(share: float, longest: float) -> float:
    """Wait (at most `longest` seconds) until other work takes under `share` of the cores over
    a 3-second look; returns the share last seen."""
    cores, start, seen = os.cpu_count() or 1, time.monotonic(), 1.0
    while True:
        before = busy_seconds()
        time.sleep(3)
        seen = (busy_seconds() - before) / (3 * cores)
        if seen < share or time.monotonic() - start > longest:
            return seen
        print(f"  others use {seen:.0%} of the cores: waiting", file=sys.stderr, flush=True)


def git(checkout: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(checkout), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def time_one(python: str, checkout: Path, words: str, form: str, env: dict) -> dict:
    """One timed run of `words` at `form` and what it ran: the entry the file records."""
    probe = subprocess.run(
        [python, "-c", PROBE, words, form], capture_output=True, text=True, env=env, check=True
    )
    found = json.loads(probe.stdout)
    flags = [f"--{form.replace('_', '-')}"] if form else []
    with tempfile.TemporaryDirectory(prefix="blocklab-time-") as tmp:
        argv = [*words.split(), *flags, "--out", str(Path(tmp) / "run"), "--quiet"]
        load = os.getloadavg()[0]
        busy, ours = busy_seconds(), children_seconds()
        start = time.perf_counter()
        done = subprocess.run(
            [python, "-m", "blocklab", *argv], env=env, cwd=tmp, capture_output=True, text=True
        )
        seconds = time.perf_counter() - start
        # CPU-seconds others took during the run: the machine's busy time less the command's
        others = max(0.0, busy_seconds() - busy - (children_seconds() - ours))
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"`blocklab {words}` exited {done.returncode}: {tail}")
    argv[argv.index("--out") + 1] = "RUN_DIR"  # a fresh directory each time
    return {
        "command": words,
        "form": form,
        "argv": ["blocklab", *argv],
        "seconds": round(seconds, 2),
        "config_fingerprint": found["fingerprint"],
        "machine": {**machine(), "load_before": round(load, 2)},
        "others_cpu_seconds": round(others, 1),  # other work on the machine while it ran
        "commit": git(checkout, "rev-parse", "--short", "HEAD"),
        "uncommitted_source": bool(git(checkout, "status", "--porcelain", "--", "src")),
        "date": datetime.date.today().isoformat(),
        "torch": found["torch"],
        "source": "benchmarks/command_times.py",
    }


def all_commands(python: str, env: dict) -> list[str]:
    code = (
        "from blocklab.experiments import EXPERIMENTS\n"
        "for n in EXPERIMENTS.names():\n"
        "    for c in EXPERIMENTS.get(n).commands: print(c.words)"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, check=True)
    return out.stdout.split("\n")[:-1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("commands", nargs="*", help="command words, e.g. 'seprank degree' (all)")
    p.add_argument("--form", default="", help="a named form to time instead of the defaults")
    p.add_argument("--checkout", type=Path, default=ROOT, help="the checkout to time (this one)")
    p.add_argument("--python", help="its interpreter (default: CHECKOUT/.venv/bin/python)")
    p.add_argument("--file", type=Path, help="default: CHECKOUT/src/blocklab/timings.json")
    p.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    p.add_argument(
        "--quiet-share",
        type=float,
        default=0.25,
        help="before each run, wait until other work takes under this share of the cores (0.25)",
    )
    p.add_argument("--wait", type=float, default=600, help="seconds to wait so at most (600)")
    args = p.parse_args()
    checkout = args.checkout.resolve()
    venv = checkout / ".venv" / "bin" / "python"
    python = args.python or (str(venv) if venv.exists() else sys.executable)
    path = args.file or checkout / "src" / "blocklab" / "timings.json"
    env = {k: v for k, v in os.environ.items() if k != "BLOCKLAB_WORKERS"}
    env["PYTHONPATH"] = str(checkout / "src")
    words = args.commands or all_commands(python, env)
    if args.dry_run:
        for w in words:
            print(f"blocklab {w}" + (f" --{args.form.replace('_', '-')}" if args.form else ""))
        return 0
    data = json.loads(path.read_text()) if path.exists() else {"entries": []}
    for w in words:
        wait_for_quiet(args.quiet_share, args.wait)
        entry = time_one(python, checkout, w, args.form, env)
        print(f"{entry['seconds']:8.2f} s  {' '.join(entry['argv'])}", flush=True)
        kept = [e for e in data["entries"] if (e["command"], e["form"]) != (w, args.form)]
        data["entries"] = sorted([*kept, entry], key=lambda e: (e["command"], e["form"]))
        data = {"about": ABOUT, "entries": data["entries"]}
        path.write_text(json.dumps(data, indent=1) + "\n")  # after each: a stop keeps the rest
    return 0


if __name__ == "__main__":
    sys.exit(main())

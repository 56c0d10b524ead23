"""Time experiment commands and the documentation's examples, and record the times `--help`
states and the examples' tests ask for: the package's timings file, `src/blocklab/timings.json`
(read by `blocklab.cli.timings`).

    python benchmarks/command_times.py "seprank degree" collapse [--form full] [--checkout DIR]
    python benchmarks/command_times.py --examples [--only PATTERN] [--missing]  # the docs' examples
    python benchmarks/command_times.py --dry-run [--examples]         # what would run

Each command runs its quick defaults (or, with `--form NAME`, that named form) once, into a
fresh run directory, with progress off and `BLOCKLAB_WORKERS` unset (so `--workers` takes its
default), in the interpreter and source of the checkout `--checkout` (this repository by
default). `--examples` times what the examples of README.md and the guide's pages ask for
(`blocklab.cli.examples.targets`: each example, or the smaller command its page names as
standing for it) whose key matches `--only` (a regular expression), with `--missing` only those
the file holds no time for: each as written, from a fresh folder in which `examples/` is the
checkout's, an experiment's command with `--quiet`, a Python block as a script; one that is a
command's defaults or form is timed as that command. A `report` or `runs` example
reads the run `blocklab demo` writes, made first in its folder and not timed (`setup`).

The checkout's source must be committed (nothing changed under src/, benchmarks/,
pyproject.toml or constraints.txt but the timings file itself), so that each entry's commit is
the code it timed; else the script refuses in one line (exit 2). An entry records the command
line, the wall time, the machine (CPU model, cores, vector-extension flags of `lscpu`, the
1-minute load average before the run, its mean over the run and after it, the run's own
processes among it, and the CPU-seconds other work took while it ran, the command's pool
workers counted as the command's: a run waits first until other work is quiet, at most `--wait`
seconds), the checkout's commit, the date, the torch version, and the fingerprint of the config
the command resolved to (`blocklab.cli.timings.config_fingerprint`), which a test compares with
the config's now. A command that fails is not recorded (the others still are; exit 1). Entries
not timed here stay as they are, among them those kept from a results log (their `source` names
it).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIMD = ("avx", "fma", "amx", "sse4")  # the lscpu flags kept: the vector extensions
ABOUT = (
    "Measured wall times of blocklab commands and of the examples the documentation gives, the "
    "one source of the times --help states. Written by benchmarks/command_times.py (or kept from "
    "the results log an entry's source names); tests/cli/test_timings.py holds every entry to "
    "its command's current config and every example of the docs to an entry."
)
# what must be committed before a time is recorded: the code that runs, and how it is timed
SOURCE = ("src", "benchmarks", "pyproject.toml", "constraints.txt")
FILE = "src/blocklab/timings.json"  # written here, so never counted as a change
# the commands that read a run directory: the run they read, made first and not timed
SETUP = {"report": ["demo", "--quiet"], "runs": ["demo", "--quiet"]}
PROBE = """
import json, sys
import torch
from blocklab.cli.timings import fingerprint_now
found = fingerprint_now(sys.argv[1], sys.argv[2])
print(json.dumps({"fingerprint": found, "torch": torch.__version__}))
"""
# what the docs' examples ask to be timed (`examples.targets`: an example, or the stand-in its
# page names) whose key matches a pattern, and with `missing` that no entry holds yet, each with
# the command and form its key is, if any, and (but for a dry run) its config's fingerprint
EXAMPLES = """
import json, re, sys
from blocklab.cli import examples, timings
from blocklab.experiments import EXPERIMENTS
pattern, path = sys.argv[1], sys.argv[4]
dry, missing = sys.argv[2] == "dry", sys.argv[3] == "missing"
held = {examples.entry_key(e) for e in timings.entries(path)}
forms = {}
for name in EXPERIMENTS.names():
    found = EXPERIMENTS.get(name)
    for c in found.commands:
        for form in ("", *found.forms):
            forms[examples.command_key(c.words, form)] = [c.words, form]
out = []
for ex in examples.targets(examples.find()):
    if not re.search(pattern, ex.key) or (missing and ex.key in held):
        continue
    one = {"key": ex.key, "where": ex.where(), "argv": ex.argv and list(ex.argv)}
    one |= {"code": ex.code, "command": forms.get(ex.key)}
    if not dry and one["command"] is None:
        try:
            one["fingerprint"] = examples.fingerprint(ex)
        except Exception as exc:  # a file it names is not here, say: that example fails alone
            one["error"] = f"{type(exc).__name__}: {exc}"
    out.append(one)
print(json.dumps(out))
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


def adopt_orphans() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux's
    PR_SET_CHILD_SUBREAPER): a command's pool workers outlive its own process by a moment, and
    their CPU time counts as the command's (`children_seconds`) only once `reap` has waited for
    them; else it would count as other work's. False where the system has no such call."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap(longest: float = 60.0) -> None:
    """Wait for the orphans this process adopted to end, at most `longest` seconds."""
    end = time.monotonic() + longest
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


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


def uncommitted(checkout: Path) -> list[str]:
    """The tracked files of the checkout's source changed since its commit (`SOURCE`), the
    timings file left out."""
    out = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "-uno", "--", *SOURCE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line[3:] for line in out.splitlines() if line[3:] != FILE]


def load_sampler() -> tuple[threading.Event, list[float]]:
    """The 1-minute load average once a second until the event is set, into the list."""
    stop, seen = threading.Event(), []

    def sample() -> None:
        while not stop.wait(1.0):
            seen.append(os.getloadavg()[0])

    threading.Thread(target=sample, daemon=True).start()
    return stop, seen


def timed(cmd: list[str], cwd: Path, env: dict) -> tuple[subprocess.CompletedProcess, dict]:
    """Run `cmd` once in `cwd`: what it did, and its wall time, the load and others' work."""
    reap()  # what an earlier command (a setup) left: not this one's
    before = os.getloadavg()[0]
    busy, ours = busy_seconds(), children_seconds()
    stop, seen = load_sampler()
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    stop.set()
    busy, after = busy_seconds() - busy, os.getloadavg()[0]
    reap()  # the command's pool workers, whose CPU time is the command's
    # CPU-seconds others took during the run: the machine's busy time less the command's
    others = max(0.0, busy - (children_seconds() - ours))
    loads = {
        "load_before": round(before, 2),
        "load_mean": round(sum(seen) / len(seen), 2) if seen else round(after, 2),
        "load_after": round(after, 2),
    }
    return done, {"seconds": round(seconds, 2), "loads": loads, "others": round(others, 1)}


def failed(what: str, done: subprocess.CompletedProcess) -> RuntimeError:
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return RuntimeError(f"`{what}` exited {done.returncode}: {tail}")


def entry(checkout: Path, measured: dict, torch: str, fingerprint: str | None) -> dict:
    """What every entry the script writes records of a run (`timed`)."""
    return {
        "seconds": measured["seconds"],
        "config_fingerprint": fingerprint,
        "machine": {**machine(), **measured["loads"]},
        "others_cpu_seconds": measured["others"],  # other work on the machine while it ran
        "commit": git(checkout, "rev-parse", "--short", "HEAD"),
        "date": datetime.date.today().isoformat(),
        "torch": torch,
        "source": "benchmarks/command_times.py",
    }


def time_one(python: str, checkout: Path, words: str, form: str, env: dict) -> dict:
    """One timed run of `words` at `form` and what it ran: the entry the file records."""
    probe = subprocess.run(
        [python, "-c", PROBE, words, form], capture_output=True, text=True, env=env, check=True
    )
    found = json.loads(probe.stdout)
    flags = [f"--{form.replace('_', '-')}"] if form else []
    with tempfile.TemporaryDirectory(prefix="blocklab-time-") as tmp:
        argv = [*words.split(), *flags, "--out", str(Path(tmp) / "run"), "--quiet"]
        done, measured = timed([python, "-m", "blocklab", *argv], Path(tmp), env)
    if done.returncode != 0:
        raise failed(f"blocklab {words}", done)
    argv[argv.index("--out") + 1] = "RUN_DIR"  # a fresh directory each time
    ran = {"command": words, "form": form, "argv": ["blocklab", *argv]}
    return {**ran, **entry(checkout, measured, found["torch"], found["fingerprint"])}


def workspace(checkout: Path, root: Path) -> Path:
    """A fresh folder in which `examples/` is the checkout's, as the docs' commands see it."""
    root.mkdir(parents=True)
    (root / "examples").symlink_to(checkout / "examples")
    return root


def time_example(
    python: str, checkout: Path, ex: dict, torch: str, env: dict, tmp: Path, made: dict
) -> dict:
    """One timed run of the docs' example `ex` (a dict of the EXAMPLES probe) as written; a
    command that reads a run directory runs in the folder where `made` keeps that run."""
    argv = ex["argv"]
    setup = SETUP.get(argv[0]) if argv else None
    if setup is not None:
        where = made.get(tuple(setup))
        if where is None:
            where = workspace(checkout, tmp / f"setup-{len(made)}")
            done = subprocess.run(
                [python, "-m", "blocklab", *setup],
                env=env,
                cwd=where,
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise failed(f"blocklab {' '.join(setup)}", done)
            made[tuple(setup)] = where
    else:
        where = workspace(checkout, tmp / f"example-{len(list(tmp.iterdir()))}")
    if argv is None:  # a Python block, run as a script
        (where / "example.py").write_text(ex["code"] + "\n")
        ran = ["python", "example.py"]
        cmd = [python, "example.py"]
    else:
        ran = ["blocklab", *argv, *(["--quiet"] if ex["fingerprint"] else [])]
        cmd = [python, "-m", "blocklab", *ran[1:]]
    done, measured = timed(cmd, where, env)
    if done.returncode != 0:
        raise failed(ex["key"].splitlines()[0], done)
    shown = {"example": ex["key"], "argv": ran}
    if setup is not None:
        shown["setup"] = ["blocklab " + " ".join(setup)]
    return {**shown, **entry(checkout, measured, torch, ex.get("fingerprint"))}


def all_commands(python: str, env: dict) -> list[str]:
    code = (
        "from blocklab.experiments import EXPERIMENTS\n"
        "for n in EXPERIMENTS.names():\n"
        "    for c in EXPERIMENTS.get(n).commands: print(c.words)"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, check=True)
    return out.stdout.split("\n")[:-1]


def examples(python: str, env: dict, pattern: str, dry: bool, missing: bool, path: Path):
    given = [pattern, "dry" if dry else "time", "missing" if missing else "all", str(path)]
    probe = subprocess.run(
        [python, "-c", EXAMPLES, *given],
        capture_output=True,
        text=True,
        env=env,
        cwd=env["PYTHONPATH"],
    )
    if probe.returncode != 0:
        raise SystemExit(f"reading the docs' examples failed: {probe.stderr.strip()[-400:]}")
    return json.loads(probe.stdout)


def torch_version(python: str, env: dict) -> str:
    code = "import torch; print(torch.__version__)"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, env=env).stdout


def key(e: dict) -> tuple[str, str]:
    return ("", e["example"]) if "example" in e else (e["command"], e["form"])


def record(path: Path, data: dict, new: dict) -> dict:
    """The file with `new` in place of the entry of its key; written at once (a stop keeps the
    rest)."""
    kept = [e for e in data["entries"] if key(e) != key(new)]
    data = {"about": ABOUT, "entries": sorted([*kept, new], key=key)}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("commands", nargs="*", help="command words, e.g. 'seprank degree' (all)")
    p.add_argument("--form", default="", help="a named form to time instead of the defaults")
    p.add_argument("--examples", action="store_true", help="time the docs' examples instead")
    p.add_argument("--only", default="", help="with --examples: those whose key matches this")
    p.add_argument("--missing", action="store_true", help="with --examples: those with no entry")
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
    path = args.file or checkout / FILE
    env = {k: v for k, v in os.environ.items() if k != "BLOCKLAB_WORKERS"}
    env["PYTHONPATH"] = str(checkout / "src")
    changed = [] if args.dry_run else uncommitted(checkout)
    if changed:
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        print(
            f"command_times.py: {checkout} has uncommitted changes ({changed[0]}{more}): commit "
            "them first, so that each time names the code it timed",
            file=sys.stderr,
        )
        return 2
    if args.examples:
        todo = examples(python, env, args.only, args.dry_run, args.missing, path)
        if args.dry_run:
            for ex in todo:
                print(f"{ex['where']}: {ex['key'].splitlines()[0]}")
            return 0
    else:
        words = args.commands or all_commands(python, env)
        if args.dry_run:
            for w in words:
                print(f"blocklab {w}" + (f" --{args.form.replace('_', '-')}" if args.form else ""))
            return 0
    data = json.loads(path.read_text()) if path.exists() else {"entries": []}
    failures = 0
    if not args.examples:
        todo = [{"command": [w, args.form]} for w in words]
    adopt_orphans()
    torch = torch_version(python, env).strip()
    with tempfile.TemporaryDirectory(prefix="blocklab-examples-") as tmp:
        made: dict = {}
        for ex in todo:
            wait_for_quiet(args.quiet_share, args.wait)
            try:
                if "error" in ex:
                    raise RuntimeError(f"{ex['where']}: its config: {ex['error']}")
                if ex["command"] is not None:
                    new = time_one(python, checkout, *ex["command"], env)
                else:
                    new = time_example(python, checkout, ex, torch, env, Path(tmp), made)
            except RuntimeError as exc:
                print(f"failed: {exc}", file=sys.stderr, flush=True)
                failures += 1
                continue
            shown = new["example"].splitlines()[0] if "example" in new else " ".join(new["argv"])
            load = new["machine"]["load_mean"]
            print(f"{new['seconds']:8.2f} s  load {load:5.2f}  {shown}", flush=True)
            data = record(path, data, new)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

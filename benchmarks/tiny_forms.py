"""Every training experiment's tiny form (`gpu_check.TINY`), run and kept for comparison: the
same outputs from two versions of the code, or the lines where they differ.

    PYTHONPATH=src python benchmarks/tiny_forms.py run DIR [--src OTHER/src] [--workers N]
    PYTHONPATH=src python benchmarks/tiny_forms.py resume DIR COPY [--reuse-stale]
    python benchmarks/tiny_forms.py compare DIR_A DIR_B

`run` runs each form on the CPU with one worker (or a pool of `--workers`) into DIR/NAME (with
`--src`, the code of another checkout) and keeps its `--json`. `resume` copies DIR's runs to COPY
and runs each form there again with this code: the trials it trained again (a stored trial the code
no longer finds by its id, or whose code it no longer counts as current) out of those stored; with
`--reuse-stale`, the commands' flag that keeps trials made by other code. `compare` compares two
such directories: each form's JSON (less the keys that time the run, and with the run directory's
path made relative), its `report.md`, its figures byte for byte, and its stored rows (trial id,
status and every metric). Exit status 0 when all agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gpu_check import TINY  # noqa: E402

# keys whose values time the run or name where it ran, not what it computed
VOLATILE = ("seconds", "elapsed", "wall", "time", "cost", "provenance", "fingerprint", "commit")
VOLATILE += ("finished_at",)
# report.md's lines that say what the run took or which commit ran it
TIMED = (b"- git_", b"- Trial time")


def run(out: Path, src: Path | None, extra: tuple[str, ...] = (), workers: int = 1) -> None:
    env = dict(os.environ, PYTHONPATH=str((src or Path("src")).resolve()))
    env.pop("BLOCKLAB_WORKERS", None)
    for name, argv in TINY.items():
        form = out / name.replace(" ", "-")
        cmd = [sys.executable, "-m", "blocklab", *argv, "--device", "cpu"]
        cmd += ["--workers", str(workers), "--quiet", "--json", "--out", str(form), *extra]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        (out / f"{form.name}.json").write_text(done.stdout)
        print(f"{name}: exit {done.returncode}", flush=True)


def _finished(form: Path) -> dict[str, float]:
    import sqlite3

    with sqlite3.connect(form / "blocklab.sqlite") as db:
        return dict(db.execute("SELECT id, finished_at FROM trials"))


def resume(out: Path, copy: Path, stale: bool) -> bool:
    import shutil

    shutil.copytree(out, copy)
    run(copy, None, ("--reuse-stale",) if stale else ())
    clean = True
    for name in TINY:
        stem = name.replace(" ", "-")
        before, after = _finished(out / stem), _finished(copy / stem)
        again = sum(after[k] != before.get(k) for k in after)
        clean &= again == 0
        print(f"{name}: {again} of {len(before)} stored trials trained again")
    return clean


def _plain(value, root: str):
    """The JSON with the timing keys dropped and the run directory's path made relative."""
    if isinstance(value, dict):
        return {
            k: _plain(v, root)
            for k, v in value.items()
            if not any(word in k.lower() for word in VOLATILE)
        }
    if isinstance(value, list):
        return [_plain(v, root) for v in value]
    if isinstance(value, str):
        return value.replace(root, "RUN")
    return value


def _rows(form: Path) -> list[str]:
    import blocklab

    def plain(value):  # nested records (a ladder's rungs) time their runs too
        if isinstance(value, str) and value[:1] in "[{":
            try:
                value = json.loads(value)
            except ValueError:
                return value
        if isinstance(value, (list, dict)):
            return json.dumps(_plain(value, str(form)), sort_keys=True)
        return value

    runs = blocklab.load_runs(form)
    keep = [c for c in runs.columns if not any(word in c.lower() for word in VOLATILE)]
    runs = runs[keep].sort_values("id").map(plain)
    return runs.to_csv(index=False).splitlines()


def _files(form: Path) -> dict[str, str]:
    """The hash of report.md (its run directory's path made relative) and of each figure."""
    out = {}
    for path in sorted(form.rglob("*")):
        if path.suffix in (".png", ".svg", ".pdf") or path.name == "report.md":
            data = path.read_bytes()
            if path.name == "report.md":  # its run directory, and the commit that ran it
                data = data.replace(str(form).encode(), b"RUN")
                data = b"\n".join(x for x in data.split(b"\n") if not x.startswith(TIMED))
            out[str(path.relative_to(form))] = hashlib.sha256(data).hexdigest()
    return out


def compare(a: Path, b: Path) -> bool:
    same = True
    for name in TINY:
        stem = name.replace(" ", "-")
        differ = []
        ja = _plain(json.loads((a / f"{stem}.json").read_text()), str(a / stem))
        jb = _plain(json.loads((b / f"{stem}.json").read_text()), str(b / stem))
        if ja != jb:
            differ.append("json")
        if _files(a / stem) != _files(b / stem):
            fa, fb = _files(a / stem), _files(b / stem)
            differ += [k for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
        ra, rb = _rows(a / stem), _rows(b / stem)
        if ra != rb:
            changed = sum(x != y for x, y in zip(ra, rb, strict=False))
            differ.append(f"rows ({changed} of {len(ra)} differ)")
        same &= not differ
        said = f": {', '.join(differ)}" if differ else ""
        figures = len(_files(a / stem)) - 1
        word = "same" if not differ else "DIFFER"
        print(f"{word} {name}: {len(ra) - 1} rows; json, report.md, {figures} figure(s){said}")
    return same


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--src", type=Path, help="another checkout's src/ (default: ./src)")
    r.add_argument("--workers", type=int, default=1, help="a pool of this many processes (1)")
    again = sub.add_parser("resume")
    again.add_argument("out", type=Path)
    again.add_argument("copy", type=Path)
    again.add_argument(
        "--reuse-stale", action="store_true", help="reuse trials made by other code (its flag)"
    )
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = p.parse_args()
    if args.what == "run":
        args.out.mkdir(parents=True, exist_ok=True)
        run(args.out, args.src, workers=args.workers)
    elif args.what == "resume":
        sys.exit(0 if resume(args.out, args.copy, args.reuse_stale) else 1)
    else:
        sys.exit(0 if compare(args.a, args.b) else 1)

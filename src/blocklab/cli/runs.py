"""`blocklab runs`: list, show and export the trials (and measured points) a run directory holds."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from blocklab.errors import UserError
from blocklab.store import DB_NAME, Store


def add_parser(sub) -> None:
    p = sub.add_parser("runs", help="list, show and export stored trials")
    p.add_argument(
        "action",
        nargs="?",
        default="list",
        choices=("list", "show", "export"),
        help="list: one line per trial (the default); show ID: one trial's config, metrics "
        "and provenance; export FILE: the load_runs table as CSV or Parquet",
    )
    p.add_argument("id", nargs="?", help="trial id (show), or the .csv or .parquet file (export)")
    p.add_argument("--out", default="runs/demo", help="directory holding blocklab.sqlite")
    p.add_argument("--experiment", help="only this experiment's trials")
    p.add_argument(
        "--status",
        choices=("done", "diverged", "failed"),
        help="only the trials that ended so (list and export)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print JSON on stdout: list, the trials with their metrics; show, the whole record",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.out)
    if path.is_file():
        raise UserError(
            f"--out {path} is a file: --out names a run directory (the one a sweep wrote)"
        )
    if not (path / DB_NAME).exists():
        raise UserError(f"no store at {path} (run a sweep with --out {path} first)")
    store = Store(path / DB_NAME, read_only=True)  # listing changes nothing, and works read-only
    if args.action == "show":
        if not args.id:
            raise UserError("runs show needs a trial id (see `blocklab runs list`)")
        rec = store.get(args.id)
        if rec is None:
            raise UserError(f"no trial {args.id!r} in {store.path}")
        print(json.dumps(rec, indent=2) if args.json else _show(rec))
        return 0
    records = store.records(experiment=args.experiment)
    if args.experiment and not records:
        held = sorted({r["experiment"] for r in store.records()})
        raise UserError(
            f"no trials of experiment {args.experiment!r} in {store.path} "
            f"(it holds: {', '.join(held) or 'none'})"
        )
    if args.status:
        records = [r for r in records if r["status"] == args.status]
    if args.action == "export":
        if not args.id:
            raise UserError(
                "runs export needs a file, e.g. `blocklab runs export trials.csv` (or .parquet)"
            )
        from blocklab.frames import export, frame

        try:
            export(frame(records), args.id)
        except OSError as exc:
            raise UserError(f"cannot write {args.id}: {exc.strerror}") from None
        print(f"wrote {len(records)} trials to {args.id}")
        return 0
    code = _currency(records)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        **{k: r[k] for k in ("id", "experiment", "status", "seed")},
                        "teacher": _teacher(r),
                        "metrics": r["metrics"],
                        "fingerprint": _fingerprint(r),
                        "stale": code[r["id"]][0] == STALE,
                        "not_imported": list(code[r["id"]][1]),
                    }
                    for r in records
                ],
                indent=2,
            )
        )
        return 0
    # the rows alone on stdout, for a pipe; their column names before them on stderr, like the
    # count after them
    width = max((len(r["id"]) for r in records), default=len("id"))
    header = _line(["id", "experiment", "status", "fingerprint", "code", "trial"], width)
    print(header, file=sys.stderr, flush=True)
    described = _told_apart(records)
    for r in records:
        fields = [r["id"], r["experiment"], r["status"], _fingerprint(r) or "-"]
        fields += [code[r["id"]][0], described[r["id"]]]
        print(_line(fields, width))
    sys.stdout.flush()  # the rows before the count, where both streams go to one place
    print(f"{len(records)} trials in {store.path}{_code_note(code, path)}", file=sys.stderr)
    return 0


def _line(fields: list[str], width: int) -> str:
    """One line of `runs list`: id, experiment, status, the code's fingerprint, whether the code
    here now made the trial (blank), or not (`STALE`, `NOT_IMPORTED`), and what the trial is,
    in columns (the id's width: the longest id's)."""
    ident, experiment, status, code, state, trial = fields
    return f"{ident:<{width}}  {experiment:<13} {status:<8} {code:<16} {state:<12} {trial}"


def _fingerprint(rec: dict[str, Any]) -> str | None:
    """The hash of the code that made a stored trial (`blocklab.fingerprint`)."""
    return (rec.get("provenance") or {}).get("code", {}).get("fingerprint")


# a trial's code beside the code here now, as `runs list` words it: made by other code of
# modules this process has loaded, or by a plugin it has not imported (so nothing to compare)
STALE = "stale"
NOT_IMPORTED = "not imported"


def _currency(records: list[dict[str, Any]]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Per trial: "" where the code here now made it, `NOT_IMPORTED` with the plugins it names
    that this process has not imported, else `STALE` (one comparison per distinct code
    record)."""
    from blocklab.fingerprint import is_current, not_imported

    seen: dict[str, tuple[str, tuple[str, ...]]] = {}
    out = {}
    for r in records:
        recorded = (r.get("provenance") or {}).get("code")
        key = json.dumps(recorded, sort_keys=True)
        if key not in seen:
            missing = () if is_current(recorded) else tuple(not_imported(recorded))
            state = "" if is_current(recorded) else NOT_IMPORTED if missing else STALE
            seen[key] = (state, missing)
        out[r["id"]] = seen[key]
    return out


def _code_note(code: dict[str, tuple[str, tuple[str, ...]]], out: Path) -> str:
    """What the count line adds: how many trials are stale, and how many were made by plugins
    this command did not import, named, with the `--import` that loads them (the run's
    command's, where run.json records it)."""
    stale = sum(state == STALE for state, _ in code.values())
    missing = sorted({m for state, mods in code.values() if state == NOT_IMPORTED for m in mods})
    notes = [f"{stale} stale: made by code other than this"] if stale else []
    if missing:
        n = sum(state == NOT_IMPORTED for state, _ in code.values())
        given = _imports_given(out)
        files = [given[m] for m in missing if m in given]
        how = (
            " ".join(f"--import {shlex.quote(f)}" for f in files)
            if len(files) == len(missing)
            else "--import FILE (the plugin's .py file or module)"
        )
        plugin = "plugin" if len(missing) == 1 else "plugins"
        notes.append(
            f"{n} not imported: made by {plugin} {', '.join(missing)}, which this command did "
            f"not import; pass {how} to compare their code"
        )
    return f" ({'; '.join(notes)})" if notes else ""


def _imports_given(out: Path) -> dict[str, str]:
    """The plugins the run's command imported (`--import` in run.json's command), by the
    module each becomes: a file's stem, or the module name given."""
    from blocklab.plugins import is_path
    from blocklab.rundir import RunDir

    command = RunDir(out).record().get("command") or ""
    try:
        words = shlex.split(command)
    except ValueError:  # a call of `blocklab.api.run`, not a command line
        return {}
    specs = [b for a, b in zip(words, words[1:], strict=False) if a == "--import"]
    specs += [w.removeprefix("--import=") for w in words if w.startswith("--import=")]
    return {(Path(s).stem if is_path(s) else s): s for s in specs}


def _teacher(rec: dict[str, Any]) -> int | None:
    """The teacher a trial fits (the task's data seed: the degree sweep's teacher index); None
    where the task's data follow the trial's seed."""
    return (rec.get("config") or {}).get("data_seed")


def _describe(rec: dict[str, Any]) -> str:
    """One line of what a stored record is: trained trials and measured points alike."""
    c, m = rec["config"], rec["metrics"]
    parts = [c.get("task"), c.get("arm", {}).get("label") or c.get("block")]
    parts += [f"{k}={c[k]}" for k in ("budget", "depth", "width") if c.get(k) is not None]
    train = c.get("train", {})
    if train.get("lr") is not None:
        parts.append(f"lr={train['lr']}")
    if train.get("optimizer") not in (None, "adam"):  # a second-order fit, or its referee
        parts.append(f"fit={train['optimizer']}")
    if c.get("ladder"):
        parts.append("ladder=" + "/".join(map(str, c["ladder"])))
    # every field that tells two trials of one cell apart: the teacher (the task's data seed),
    # the rounding, the seed
    if _teacher(rec) is not None:
        parts.append(f"teacher={_teacher(rec)}")
    if c.get("rounding"):
        parts.append(f"rounding={c['rounding']}")
    parts.append(f"seed={rec['seed']}")
    if m.get("test_metric") is not None:
        parts.append(f"{m.get('metric', 'metric')}={m['test_metric']:.4g}")
    parts += [f"{k}={m[k]}" for k in ("exact_rank", "float_rank") if m.get(k) is not None]
    return " ".join(str(x) for x in parts if x)


def _told_apart(records: list[dict[str, Any]]) -> dict[str, str]:
    """Per record, its line (`_describe`), and where several records share one, each followed
    by the config values that differ between them: no two rows of the list read the same."""
    lines = {r["id"]: _describe(r) for r in records}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(lines[r["id"]], []).append(r)
    for same in (g for g in groups.values() if len(g) > 1):
        flat = [dict(_flat(r["config"])) for r in same]
        keys = sorted({k for f in flat for k in f if len({json.dumps(g.get(k)) for g in flat}) > 1})
        for r, f in zip(same, flat, strict=True):
            shown = " ".join(f"{k}={json.dumps(f.get(k))}" for k in keys)
            lines[r["id"]] += f" {shown or 'experiment=' + r['experiment']}"
    return lines


def _flat(config: dict[str, Any], prefix: str = ""):
    """(dotted key, value) of every leaf of a nested config."""
    for k, v in config.items():
        if isinstance(v, dict) and v:
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _show(rec: dict[str, Any]) -> str:
    """One trial: its id, experiment, status and seed, then its config, metrics and provenance
    as JSON indented two spaces, a value to a line."""
    lines = [f"{k}: {rec[k]}" for k in ("id", "experiment", "status", "seed")]
    for k in ("config", "metrics", "provenance"):
        lines.append(f"{k}: " + json.dumps(rec[k], indent=2, sort_keys=True))
    if rec.get("error"):
        lines.append("error: " + rec["error"])
    return "\n".join(lines)

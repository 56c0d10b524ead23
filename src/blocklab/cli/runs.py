"""`blocklab runs`: list, show and export the trials (and measured points) a run directory holds."""

from __future__ import annotations

import argparse
import json
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
    current = _currency(records)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        **{k: r[k] for k in ("id", "experiment", "status", "seed", "metrics")},
                        "fingerprint": _fingerprint(r),
                        "stale": not current[r["id"]],
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
    header = _line(["id", "experiment", "status", "fingerprint", "stale", "trial"], width)
    print(header, file=sys.stderr, flush=True)
    described = _told_apart(records)
    for r in records:
        fields = [r["id"], r["experiment"], r["status"], _fingerprint(r) or "-"]
        fields += ["" if current[r["id"]] else "stale", described[r["id"]]]
        print(_line(fields, width))
    sys.stdout.flush()  # the rows before the count, where both streams go to one place
    stale = sum(not ok for ok in current.values())
    note = f" ({stale} stale: made by code other than this)" if stale else ""
    print(f"{len(records)} trials in {store.path}{note}", file=sys.stderr)
    return 0


def _line(fields: list[str], width: int) -> str:
    """One line of `runs list`: id, experiment, status, the code's fingerprint, whether the
    trial is stale, and what the trial is, in columns (the id's width: the longest id's)."""
    ident, experiment, status, code, stale, trial = fields
    return f"{ident:<{width}}  {experiment:<13} {status:<8} {code:<16} {stale:<5} {trial}"


def _fingerprint(rec: dict[str, Any]) -> str | None:
    """The hash of the code that made a stored trial (`blocklab.fingerprint`)."""
    return (rec.get("provenance") or {}).get("code", {}).get("fingerprint")


def _currency(records: list[dict[str, Any]]) -> dict[str, bool]:
    """Per trial: whether the code here now is the code that made it (one comparison per
    distinct code record)."""
    from blocklab.fingerprint import is_current

    seen: dict[str, bool] = {}
    out = {}
    for r in records:
        recorded = (r.get("provenance") or {}).get("code")
        key = json.dumps(recorded, sort_keys=True)
        if key not in seen:
            seen[key] = is_current(recorded)
        out[r["id"]] = seen[key]
    return out


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
    if c.get("data_seed") is not None:
        parts.append(f"teacher={c['data_seed']}")
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
    lines = [f"{k}: {rec[k]}" for k in ("id", "experiment", "status", "seed")]
    lines.append("config: " + json.dumps(rec["config"], sort_keys=True))
    lines.append("metrics: " + json.dumps(rec["metrics"], sort_keys=True))
    lines.append("provenance: " + json.dumps(rec["provenance"], sort_keys=True))
    if rec.get("error"):
        lines.append("error: " + rec["error"])
    return "\n".join(lines)

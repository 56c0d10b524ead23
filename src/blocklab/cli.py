"""The `blocklab` command. Bad input: one line on stderr, exit 2, no traceback."""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from pathlib import Path
from typing import Any

from blocklab import cli_bench
from blocklab import config as cfgmod
from blocklab.errors import UserError
from blocklab.executors import EXECUTORS
from blocklab.experiments import degree_sweep
from blocklab.models import parse_degree
from blocklab.options import parse_pairs, split_list
from blocklab.store import DB_NAME, Store
from blocklab.sweep import (
    ENSEMBLE,
    Interrupted,
    Resources,
    WorkerDied,
    default_workers,
    device_name,
    provenance,
)


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse prints usage too; one line is the contract
        raise UserError(f"{self.prog}: {message}")


def _common_run_flags(
    p: argparse.ArgumentParser, out: str, task_options: bool = True, pool: bool = True
) -> None:
    """The flags of every experiment; `pool` adds where trained trials run (`sweep.Resources`)."""
    p.add_argument("--config", help="TOML file with config keys (flags override it)")
    if task_options:  # the attention experiments set their tasks' options themselves
        p.add_argument(
            "--task-option",
            action="append",
            metavar="KEY=VALUE",
            help="task option, repeatable (e.g. --task-option n_in=8)",
        )
    p.add_argument("--out", default=out, help=f"output directory: store, report, plots ({out})")
    if pool:
        p.add_argument("--workers", type=int, default=default_workers(), help="processes")
        p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
        p.add_argument(
            "--ensemble",
            type=int,
            default=ENSEMBLE,
            help=f"most trials of one architecture trained together ({ENSEMBLE}; 1: each alone)",
        )
        p.add_argument(
            "--executor",
            default="local",
            help=f"where the trials run: {', '.join(EXECUTORS)} (local: a process pool)",
        )
        p.add_argument(
            "--executor-option",
            action="append",
            metavar="KEY=VALUE",
            help="executor option, repeatable (ray: address=HOST:PORT; slurm: partition=P, "
            "time=MINUTES, folder=DIR, ...)",
        )
    p.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _resources(args: argparse.Namespace) -> Resources:
    """Where the trials run, from the pool flags; the slurm executor keeps its job files in the
    run directory unless told otherwise."""
    options = parse_pairs(args.executor_option or [], "executor")
    if args.executor == "slurm":
        options.setdefault("folder", str(Path(args.out) / "slurm"))
    return Resources(args.workers, args.device, args.ensemble, args.executor, options)


def _experiment_parser(sub, name: str, what: str, cls: type, out: str, pool: bool = True) -> None:
    """A seed experiment's subcommand: quick by default, `--full`, every config key a flag."""
    p = sub.add_parser(name, help=what)
    _common_run_flags(p, out, task_options=False, pool=pool)
    p.add_argument("--full", action="store_true", help="the full form (quick by default)")
    cfgmod.add_flags(p, cls)


def cmd_degree_sweep(args: argparse.Namespace) -> int:
    """`demo` and `degree-sweep`: the same experiment; the demo is its defaults, into runs/demo.
    The verdict is printed only when the run passes its design checks."""
    from blocklab import report
    from blocklab.analysis import capacity, stats

    flags = cfgmod.overrides(args, degree_sweep.DegreeSweepConfig, skip=("lr",))
    if args.task_option:
        flags["task_options"] = parse_pairs(args.task_option, "task")
    cfg = cfgmod.resolve(
        degree_sweep.DegreeSweepConfig, degree_sweep.DegreeSweepConfig(), args.config, flags
    )
    out, store = _open_run(args)
    result = degree_sweep.run(cfg, store, resources=_resources(args), progress=not args.quiet)
    if not result.rows:
        raise UserError("no trial finished; see `blocklab runs --out DIR list --status failed`")
    paired = stats.compare(result.rows, alpha=cfg.alpha)
    cap = capacity.analyze(
        result.rows,
        result.lr_choice,
        list(cfg.budgets),
        tol=cfg.plateau_tol,
        n_boot=cfg.n_boot,
        paired=paired,
        width=cfg.width if cfg.mode == "width" else None,
    )
    config_dict = _jsonable(cfg)
    path = report.write_report(
        out,
        result.rows,
        title="Degree sweep",
        config=config_dict,
        provenance=provenance(),
        alpha=cfg.alpha,
        capacity=cap,
    )
    if args.json:
        payload = report.to_json(result.rows, alpha=cfg.alpha)
        payload.update(cap.to_json())
        payload.update(
            lr_choice=result.lr_choice, failed=result.failed, report=str(path), config=config_dict
        )
        print(json.dumps(report.plain(payload), indent=2))
        return 0
    print(report.table(stats.summarize(result.rows)))
    checks, verdict = report.check_lines(cap)
    print("\ndesign checks:")
    print("\n".join(checks))
    if cap.fit.efficiency:
        caveat = "" if cap.passed else " -- measured, but not a verdict: a design check failed"
        print(
            "\nparameters needed relative to d=3 (95% bootstrap interval; predicted h(3)/h(d))"
            + caveat
            + ":"
        )
        for line in capacity.efficiency_claims(cap.fit, cap.degrees):
            print(f"- {line}")
    print(f"\nverdict: {verdict}")
    for f in result.failed:
        print(f"failed: {f['trial']}: {f['error'].splitlines()[0]}")
    print(f"\nreport: {path}")
    return 0


def _open_run(args: argparse.Namespace) -> tuple[Path, Store]:
    """Check the run flags, open the store and make sure the report can be written."""
    device_name(getattr(args, "device", "cpu"))  # a bad or missing device fails here
    out = Path(args.out)
    store = Store(out)
    _check_writable(out)
    return out, store


def _experiment_config(args: argparse.Namespace, cls: type) -> Any:
    """Defaults (the quick form, or the full form with --full) < TOML < flags."""
    defaults = cls.full() if args.full else cls()
    return cfgmod.resolve(cls, defaults, args.config, cfgmod.overrides(args, cls))


def _run_trained(args: argparse.Namespace, cls: type, run: Any) -> tuple[Any, Path, Any]:
    """Config, store and run of an experiment that trains; a run with no finished trial is an
    error that points at the failures."""
    cfg = _experiment_config(args, cls)
    out, store = _open_run(args)
    result = run(cfg, store, resources=_resources(args), progress=not args.quiet)
    if not result.rows:
        raise UserError("no trial finished; see `blocklab runs --out DIR list --status failed`")
    return cfg, out, result


def cmd_sanford(args: argparse.Namespace) -> int:
    from blocklab import report_attention as ra
    from blocklab.experiments import sanford
    from blocklab.tasks import make_task

    cls = sanford.QsaConfig if args.which == "qsa" else sanford.MatchConfig
    run = sanford.run_qsa if args.which == "qsa" else sanford.run_match
    cfg, out, result = _run_trained(args, cls, run)
    config = ra.config_json(cfg)
    if args.which == "qsa":
        path = ra.sanford_qsa(out, result, config, provenance())
    else:
        balance = {}
        for t in cfg.tasks:
            info = make_task(t, seq_len=cfg.seq_len, n_train=cfg.n_train).make(0).info
            balance[t] = {"modulus": info["modulus"], "balance": info["balance"]}
        path = ra.sanford_match(out, result, config, provenance(), balance)
    return _print_findings(args, result, path, config)


def cmd_needle(args: argparse.Namespace) -> int:
    from blocklab import report_attention as ra
    from blocklab.experiments import needle

    cfg = _experiment_config(args, needle.NeedleConfig)
    out, store = _open_run(args)
    result = needle.run(cfg, store, resources=_resources(args), progress=not args.quiet)
    config = ra.config_json(cfg)
    path = ra.needle(out, result, config, provenance())
    return _print_findings(args, result, path, config)


def cmd_seprank(args: argparse.Namespace) -> int:
    """`seprank measure`: one network's grid rank; `seprank depth-width` and `seprank degree`:
    seed 001's bounds and seed 000's degree claim (experiments/seprank*.py)."""
    from blocklab import report_attention as ra
    from blocklab import report_seprank
    from blocklab.experiments import _seprank as seprank
    from blocklab.experiments import seprank_degree, seprank_depth_width
    from blocklab.report import plain

    if args.which == "measure":
        result = seprank.measure_network(
            args.block,
            args.depth,
            args.width,
            args.positions,
            args.dim,
            templates=args.templates,
            partition=args.partition,
            position=args.position,
            entry=args.entry,
            rtol=args.rtol,
            seed=args.seed,
            eps=args.eps,
            exact=args.exact,
            norm=args.norm,
            residual=args.residual,
            max_points=args.max_points,
        )
        print(json.dumps(plain(result), indent=2) if args.json else seprank.format_measure(result))
        return 0
    depth_width = args.which == "depth-width"
    experiment = seprank_depth_width if depth_width else seprank_degree
    cls = experiment.DepthWidthConfig if depth_width else experiment.DegreeConfig
    cfg = _experiment_config(args, cls)
    out, store = _open_run(args)
    run = experiment.run_depth_width if depth_width else experiment.run_degree
    result = run(cfg, store, progress=not args.quiet)
    config = ra.config_json(cfg)
    report = report_seprank.depth_width if depth_width else report_seprank.degree
    return _print_findings(args, result, report(out, result, config, provenance()), config)


def cmd_collapse(args: argparse.Namespace) -> int:
    """Seed 003's rank collapse; the JSON adds the path shares and the bound to the findings."""
    from blocklab import report_attention as ra
    from blocklab import report_collapse
    from blocklab.experiments import collapse

    cfg, out, result = _run_trained(args, collapse.CollapseConfig, collapse.run)
    config = ra.config_json(cfg)
    path = report_collapse.write_report(out, result, config, provenance())
    extra = {"accuracy": result.accuracy, "paths": result.paths, "bound": result.bound}
    return _print_findings(args, result, path, config, **extra)


def cmd_depth_width(args: argparse.Namespace) -> int:
    """Seed 001's transformer sweep; writes fit.json (for `advise --fit`) when it finds a fit."""
    from blocklab import report_attention as ra
    from blocklab import report_depth_width
    from blocklab.experiments import depth_width

    cfg, out, result = _run_trained(args, depth_width.DepthWidthConfig, depth_width.run)
    fit_path = out / FIT_FILE
    if result.fit is not None:
        fit_path.write_text(json.dumps(result.fit.to_dict(), indent=2) + "\n")
    elif fit_path.exists():
        fit_path.unlink()  # a fit from an earlier, different run must not pass for this one's
    config = ra.config_json(cfg)
    path = report_depth_width.write_report(out, result, config, provenance())
    fit = result.fit.to_dict() if result.fit else None
    return _print_findings(args, result, path, config, fit=fit, fit_error=result.fit_error)


FIT_FILE = "fit.json"


def cmd_advise(args: argparse.Namespace) -> int:
    """Depth and width for a budget from a transition fit (the paper's eq. 11 by default)."""
    from blocklab.analysis import depth_width as dw

    if args.params is None and args.depth is None:
        raise UserError("give --params N (a budget) or --depth L (a transition size), or both")
    fit = _load_fit(args.fit) if args.fit else dw.PAPER_FIT
    payload: dict[str, Any] = {"fit": fit.to_dict()}
    lines = [
        f"fit: {fit.source}: a = {fit.a:.4g} +- {fit.sigma_a:.2g}, b = {fit.b:.4g} +- "
        f"{fit.sigma_b:.2g} (depths {min(fit.depths):g}-{max(fit.depths):g})"
    ]
    if args.params is not None:
        advice = dw.advise(_count(args.params), fit)
        payload["advice"] = advice.to_dict()
        lo, hi = advice.depth_range
        near = f"depths {lo}-{hi} are" if lo < hi else "no other depth is"
        lines += [
            f"budget N = {advice.n_params:.4g} non-embedding parameters (N = 12 L dx^2)",
            f"depth L = {advice.depth} (L* = {advice.depth_exact:.2f} +- "
            f"{advice.depth_sigma:.2f}; {near} within the fit's 1-sigma)",
            f"width dx = {advice.width:.0f} +- {advice.width_sigma:.0f} (sqrt(N / (12 L)))",
        ]
        if advice.extrapolated:
            lines.append("extrapolated: L* lies outside the depths the fit was measured at")
    if args.depth is not None:
        if args.depth < 1:
            raise UserError(f"--depth must be >= 1, got {args.depth}")
        n, dn = dw.n_transition(args.depth, fit)
        payload["transition"] = {"depth": args.depth, "n_params": n, "error": dn}
        lines.append(
            f"N_transition({args.depth}) = {n:.4g} +- {dn:.2g} ({100 * dn / n:.1f}%, eq. 10): "
            f"the size at which depth {args.depth} is optimal"
        )
    print(json.dumps(payload, indent=2) if args.json else "\n".join(lines))
    return 0


def _load_fit(where: str):
    from blocklab.analysis import depth_width as dw

    path = Path(where)
    if path.is_dir():
        path = path / FIT_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"no fit at {path}: `blocklab depth-width --out DIR` writes DIR/{FIT_FILE} "
            "when its runs give two or more transitions"
        ) from None
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the fit {path}: {exc}") from None
    return dw.Fit.from_dict(data)


SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def _count(text: str) -> float:
    """'1.3e9', '1_300_000_000', '1.3B', '175b', '1T', '760M', '30k' -> a number."""
    s = text.strip().replace("_", "").replace(",", "")
    scale = SUFFIXES.get(s[-1:].lower(), 1.0) if s else 1.0
    try:
        value = float(s[:-1] if scale != 1.0 else s) * scale
    except ValueError:
        raise UserError(
            f"--params: {text!r} is not a number (e.g. 1.3e9, 1.3B, 175B, 1T)"
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"--params must be a positive number, got {text!r}")
    return value


def _print_findings(args, result, path: Path, config: dict[str, Any], **extra: Any) -> int:
    """The findings as lines, or with --json everything (plus `extra`) as one object."""
    from blocklab.report import plain

    if args.json:
        payload = {
            "findings": result.findings,
            "summaries": result.summaries,
            **extra,
            "failed": result.failed,
            "report": str(path),
            "config": config,
        }
        print(json.dumps(plain(payload), indent=2))
        return 0
    for f in result.findings:
        where = " ".join(str(f[k]) for k in ("part", "setting", "task") if k in f)
        where += "".join(f" {k}={f[k]}" for k in ("q", "width", "model") if k in f)
        verdict = f" -> {f['verdict']}" if "verdict" in f else ""
        print(f"{where.strip()}: predicted {f['predicted']}; measured {f['measured']}{verdict}")
    for f in result.failed:
        print(f"failed: {f['trial']}: {f['error'].splitlines()[0]}")
    print(f"\nreport: {path}")
    return 0


def _check_writable(out: Path) -> None:
    probe = out / ".write-test"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"output directory {out} is not writable: {exc.strerror}") from None


def _jsonable(obj: Any) -> Any:
    import dataclasses

    return json.loads(json.dumps(dataclasses.asdict(obj), default=str))


def cmd_runs(args: argparse.Namespace) -> int:
    path = Path(args.out)
    if not (path / DB_NAME).exists() and not path.is_file():
        raise UserError(f"no store at {path} (run a sweep with --out {path} first)")
    store = Store(path)
    if args.action == "show":
        if not args.id:
            raise UserError("runs show needs a trial id (see `blocklab runs list`)")
        rec = store.get(args.id)
        if rec is None:
            raise UserError(f"no trial {args.id!r} in {store.path}")
        print(json.dumps(rec, indent=2) if args.json else _show(rec))
        return 0
    records = store.records(experiment=args.experiment)
    if args.status:
        records = [r for r in records if r["status"] == args.status]
    if args.action == "export":
        if not args.id:
            raise UserError("runs export needs a CSV path, e.g. `blocklab runs export trials.csv`")
        try:
            n = store.export_csv(args.id, records)
        except OSError as exc:
            raise UserError(f"cannot write {args.id}: {exc.strerror}") from None
        print(f"wrote {n} trials to {args.id}")
        return 0
    if args.json:
        print(
            json.dumps(
                [
                    {k: r[k] for k in ("id", "experiment", "status", "seed", "metrics")}
                    for r in records
                ],
                indent=2,
            )
        )
        return 0
    for r in records:
        print(f"{r['id']}  {r['experiment']:<13} {r['status']:<8} {_describe(r)}")
    print(f"{len(records)} trials in {store.path}", file=sys.stderr)
    return 0


def _describe(rec: dict[str, Any]) -> str:
    """One line of what a stored record is: trained trials and measured points alike."""
    c, m = rec["config"], rec["metrics"]
    parts = [c.get("task"), c.get("arm", {}).get("label") or c.get("block")]
    parts += [f"{k}={c[k]}" for k in ("budget", "depth", "width") if c.get(k) is not None]
    if c.get("train", {}).get("lr") is not None:
        parts.append(f"lr={c['train']['lr']}")
    parts.append(f"seed={rec['seed']}")
    if m.get("test_metric") is not None:
        parts.append(f"{m.get('metric', 'metric')}={m['test_metric']:.4g}")
    parts += [f"{k}={m[k]}" for k in ("exact_rank", "float_rank") if m.get(k) is not None]
    return " ".join(str(x) for x in parts if x)


def _show(rec: dict[str, Any]) -> str:
    lines = [f"{k}: {rec[k]}" for k in ("id", "experiment", "status", "seed")]
    lines.append("config: " + json.dumps(rec["config"], sort_keys=True))
    lines.append("metrics: " + json.dumps(rec["metrics"], sort_keys=True))
    lines.append("provenance: " + json.dumps(rec["provenance"], sort_keys=True))
    if rec.get("error"):
        lines.append("error: " + rec["error"])
    return "\n".join(lines)


def cmd_theory(args: argparse.Namespace) -> int:
    from blocklab import theory

    degrees = [parse_degree(d) for d in split_list(",".join(args.degrees))]
    rows = [
        {
            "degree": d,
            "h": theory.h(d),
            "layers": theory.layers_at_budget(d, args.budget, args.width**2),
            "log10_degree_proxy": theory.degree_proxy_log10(d, args.budget, args.width**2),
        }
        for d in degrees
    ]
    dx, heads, depths = args.dx, args.heads, args.depths
    if heads < 1:
        raise UserError(f"--heads must be at least 1, got {heads}")
    if min(depths) < 1:
        raise UserError(f"--depths must be at least 1, got {min(depths)}")
    if dx <= heads:
        raise UserError(
            f"--dx must exceed --heads (seed 001 takes log3(dx - H)), got {dx} <= {heads}"
        )
    bounds = []
    for depth in depths:
        lower, upper = theory.sep_rank_bounds(depth, dx, heads)
        regime = theory.sep_rank_regime(depth, dx)
        bounds.append({"depth": depth, "regime": regime, "log3_lower": lower, "log3_upper": upper})
    deepest = max(depths)
    paths = {
        "depth": deepest,
        "heads": heads,
        "rows": [
            {"length": k, "skips": deepest - k, "count": count, "share": share}
            for k, (count, share) in enumerate(
                zip(
                    theory.path_counts(deepest, heads),
                    theory.path_shares(deepest, heads),
                    strict=True,
                )
            )
        ],
    }
    threshold = theory.depth_threshold(dx)
    if args.json:
        out = {"budget": args.budget, "width": args.width, "rows": rows, "dx": dx, "heads": heads}
        out.update(depths=depths, threshold=threshold, bounds=bounds, paths=paths)
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"h(d) = ln d / d (seed 000 eq. 5), maximal at d = e; degree proxy (d^(1/d))^(B/N_dx) "
        f"(eq. 17) at B = {args.budget}, N_dx = {args.width}^2"
    )
    print(f"{'d':>8} {'h(d)':>8} {'layers':>8} {'log10 proxy':>12}")
    for r in rows:
        print(
            f"{r['degree']:>8.4g} {r['h']:>8.4f} {r['layers']:>8.2f} "
            f"{r['log10_degree_proxy']:>12.3f}"
        )
    print(
        f"\nlog3 separation rank bounds, linearized self-attention of width dx = {dx}, "
        f"H = {heads} (seed 001 Theorems 1-2, eq. 7-8)"
    )
    print(f"depth threshold log3 dx = {threshold:.3f}: Theorem 1 below it, Theorem 2 above")
    print(f"{'L':>8} {'regime':>10} {'log3 lower':>12} {'log3 upper':>12}")
    for b in bounds:
        print(
            f"{b['depth']:>8} {b['regime']:>10} {b['log3_lower']:>12.3f} {b['log3_upper']:>12.3f}"
        )
    if any(b["log3_lower"] < 0 for b in bounds):
        print("(a negative lower value is a trivial bound: sep >= 1)")
    if any(b["regime"] == "threshold" for b in bounds):
        print("(threshold: neither theorem holds; the envelope of both is shown, not a bound)")
    print(
        f"\npaths at L = {deepest}, H = {heads}: (H+1)^L = {(heads + 1) ** deepest} "
        f"(seed 003 Theorem 2.1, skips as dummy heads)"
    )
    print("share through k attention layers and L - k skips: C(L, k) H^k / (H+1)^L")
    print(f"{'k':>8} {'skips':>8} {'count':>12} {'share':>10}")
    for r in paths["rows"]:
        print(f"{r['length']:>8} {r['skips']:>8} {r['count']:>12} {r['share']:>10.4g}")
    return 0


def build_parser() -> Parser:
    parser = Parser(prog="blocklab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    demo = sub.add_parser("demo", help="the main job: seed 000's degree experiment, in minutes")
    sweep_p = sub.add_parser("degree-sweep", help="degree-d networks at equal parameter budgets")
    for p, out in ((demo, "runs/demo"), (sweep_p, "runs/degree-sweep")):
        _common_run_flags(p, out)
        cfgmod.add_flags(p, degree_sweep.DegreeSweepConfig, skip=("lr",))

    runs = sub.add_parser("runs", help="list, show and export stored trials")
    runs.add_argument("action", nargs="?", default="list", choices=("list", "show", "export"))
    runs.add_argument("id", nargs="?", help="trial id (show) or CSV path (export)")
    runs.add_argument("--out", default="runs/demo", help="directory holding blocklab.sqlite")
    runs.add_argument("--experiment", help="only this experiment's trials")
    runs.add_argument("--status", choices=("done", "diverged", "failed"))
    runs.add_argument("--json", action="store_true")

    from blocklab.experiments import sanford

    san = sub.add_parser("sanford", help="seed 002: qSA and Match2/Match3 separations")
    san_sub = san.add_subparsers(dest="which", required=True, parser_class=Parser)
    for which, cls, what in (
        ("qsa", sanford.QsaConfig, "one attention layer vs embedding dimension, several q"),
        ("match", sanford.MatchConfig, "standard vs tensor attention on Match2 and Match3"),
    ):
        _experiment_parser(san_sub, which, what, cls, f"runs/sanford-{which}")

    from blocklab.experiments import needle

    what = "seed 004: softmax vs linear attention on the needle task"
    _experiment_parser(sub, "needle", what, needle.NeedleConfig, "runs/needle")

    from blocklab.experiments import seprank_degree, seprank_depth_width
    from blocklab.measures.seprank import MAX_POINTS, RTOL

    sr = sub.add_parser("seprank", help="separation rank by grid tensors (seeds 000 and 001)")
    sr_sub = sr.add_subparsers(dest="which", required=True, parser_class=Parser)
    me = sr_sub.add_parser("measure", help="the grid rank of one network")
    me.add_argument(
        "--block",
        default="linearized_attention",
        help="a block or a degree: linearized_attention, softmax_attention(heads=2), 3, e, mlp",
    )
    me.add_argument("--depth", type=int, default=2, help="layers (2)")
    me.add_argument("--width", type=int, default=4, help="width dx (4)")
    me.add_argument("--positions", type=int, default=2, help="positions N, the variables (2)")
    me.add_argument(
        "--dim", type=int, help="inputs per position (default: the width for token mixers, else 1)"
    )
    me.add_argument("--templates", type=int, help="M per position (default: M^N <= 65,536)")
    me.add_argument("--partition", default="half", help="half, interleaved, random[:SEED]")
    me.add_argument("--position", type=int, default=-1, help="output position read (-1)")
    me.add_argument("--entry", type=int, default=0, help="output entry read (0)")
    me.add_argument("--rtol", type=float, default=RTOL, help="relative tolerance")
    me.add_argument("--seed", type=int, default=0, help="weights and templates (0)")
    me.add_argument("--eps", type=float, help="also print the epsilon-rank at this eps")
    me.add_argument("--exact", action="store_true", help="also the exact rank over F_p")
    me.add_argument("--norm", default="none", help="none, layer or rms (none)")
    me.add_argument("--residual", action=argparse.BooleanOptionalAction, default=False)
    me.add_argument("--max-points", type=int, default=MAX_POINTS, help="grid limit")
    me.add_argument("--json", action="store_true", help="print the result as JSON")
    for which, cls, what in (
        ("depth-width", seprank_depth_width.DepthWidthConfig, "seed 001: rank vs depth and width"),
        ("degree", seprank_degree.DegreeConfig, "seed 000: rank of degree-d networks vs depth"),
    ):
        # one process on the CPU: the exact rank is CPU arithmetic, and each point takes seconds
        _experiment_parser(sr_sub, which, what, cls, f"runs/seprank-{which}", pool=False)

    from blocklab.experiments import collapse

    what = "seed 003: rank collapse through depth (Dong et al.)"
    _experiment_parser(sub, "collapse", what, collapse.CollapseConfig, "runs/collapse")

    from blocklab.experiments import depth_width

    what = "seed 001: transformer LMs over depths and budgets, transitions and their fit"
    _experiment_parser(sub, "depth-width", what, depth_width.DepthWidthConfig, "runs/depth-width")

    adv = sub.add_parser("advise", help="optimal depth and width for a budget (seed 001's fit)")
    adv.add_argument("--params", help="non-embedding budget N = 12 L dx^2 (1.3e9, 175B, 1T)")
    adv.add_argument("--depth", type=int, help="print N_transition(L) with its error")
    adv.add_argument("--fit", help="a depth-width run directory (its fit.json) or a fit file")
    adv.add_argument("--json", action="store_true")

    cli_bench.add_parser(sub)

    th = sub.add_parser(
        "theory", help="h(d) and the degree proxy (seed 000), seed 001's bounds, seed 003's paths"
    )
    th.add_argument("--degrees", nargs="+", default=["2", "e", "3", "4", "5"])
    th.add_argument("--budget", type=int, default=24576)
    th.add_argument("--width", type=int, default=32)
    th.add_argument(
        "--depths", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6], help="depths L (seed 001/003)"
    )
    th.add_argument("--dx", type=int, default=64, help="width dx for seed 001's bounds (64)")
    th.add_argument("--heads", type=int, default=1, help="attention heads H per layer (1)")
    th.add_argument("--json", action="store_true")
    return parser


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _sigterm)  # a kill stops like Ctrl-C: finished trials are kept
    try:
        args = build_parser().parse_args(argv)
        if args.command in ("demo", "degree-sweep"):
            return cmd_degree_sweep(args)
        if args.command == "needle":
            return cmd_needle(args)
        if args.command == "seprank":
            return cmd_seprank(args)
        if args.command == "collapse":
            return cmd_collapse(args)
        if args.command == "sanford":
            return cmd_sanford(args)
        if args.command == "depth-width":
            return cmd_depth_width(args)
        if args.command == "advise":
            return cmd_advise(args)
        if args.command == "runs":
            return cmd_runs(args)
        if args.command == "bench":
            return cli_bench.cmd_bench(args)
        return cmd_theory(args)
    except UserError as exc:
        print(f"blocklab: error: {exc}", file=sys.stderr)
        return 2
    except WorkerDied as exc:
        print(f"blocklab: {exc}; rerun the same command to resume", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"blocklab: {exc}; rerun the same command to resume", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("blocklab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

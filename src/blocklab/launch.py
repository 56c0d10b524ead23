"""The one run path of every registered experiment, below the command line and the Python API:
`cli/experiment.py` turns a command's flags into `run`'s inputs and prints what it returns,
`api.run` turns keywords into the same inputs and returns its JSON. `run` loads the plugins,
finds the experiment, resolves its config (`resolve`), sizes it where the experiment's sizing
hook does (`sized`), and runs it (`execute`: it opens the store, runs the trials, has the report
module analyze and write them, writes the page and returns the report and the JSON `--json`
prints), then names the arms whose trials raised. Importing it imports no torch: the help
reaches it."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blocklab import config as cfgmod
from blocklab import plugins
from blocklab import trackers as tracker_mod
from blocklab.engine.executors import Resources
from blocklab.engine.progress import Progress
from blocklab.errors import Interrupted, UserError
from blocklab.experiments import EXPERIMENTS, Command, Experiment
from blocklab.store import DB_NAME, Store


@dataclass(frozen=True)
class Ran:
    """What `run` returns: the experiment, its config as it ran (sized where a target resolution
    sized it), with `plan_only` the plan (`engine.pricing.Plan`: what the run would fit, keep or
    continue, and its cost), the run size, and once the trials ran (not `plan_only`) the report,
    the JSON `--json` prints, a line per arm some of whose trials raised (`failure_lines`) and
    whether every trial of some arm raised (`lost`: the run failed, as the command exits 1)."""

    experiment: type[Experiment]
    cfg: Any
    plan: Any = None
    size: Any = None  # the run size a target resolution asked for (`Experiment.sizing`)
    report: Any = None
    payload: dict[str, Any] | None = None
    failures: list[str] = field(default_factory=list)
    lost: bool = False


def run(
    words: str,
    given: Callable[[type[Experiment]], dict[str, Any]],
    *,
    command: Callable[[str | Path], str],
    resources: Callable[[tuple[str, ...]], Resources],
    form: str | None = None,
    config_file: str | Path | None = None,
    imports: Iterable[str] = (),
    out: str | Path | None = None,
    reuse: str = "current",
    trackers: tuple[str, ...] | list[str] = (),
    progress: bool = True,
    device: str = "cpu",
    plan_only: bool = False,
    planned: Callable[[Ran], None] | None = None,
) -> Ran:
    """Run the experiment the command `words` calls ("degree-sweep", "sanford match"), for the
    command line and `blocklab.api.run` alike: load the plugins (`imports`, then those the TOML
    `config_file` names: the config's names may be theirs), resolve the config (the defaults or
    `form` < the TOML file < `given(experiment)`, the keys given, nested as the config nests
    them), size it by its `target_resolution`, with `plan_only` price it (`priced`: what it would
    fit and what that costs) and stop there (`planned` hears the size or the plan first), run
    it into `out` (None: the command's directory) with `command(out)` as run.json records the
    call and `resources(plugins loaded)` where the trials run, and name the arms
    whose trials raised."""
    toml = str(config_file) if config_file else None
    loaded = plugins.load([*imports, *cfgmod.imports(toml)])
    experiment, called = find(words)
    _has_form(experiment, words, form)  # before the keys given are read: a form fails first
    keys = given(experiment)
    cfg = resolve(experiment, words, form, toml, keys)
    out = called.out if out is None else out
    # `target_resolution` sizes the run's teachers unless they were given (`Experiment.sizing`)
    pinned = "teachers" in keys or in_toml(toml, "teachers")
    if plan_only and experiment.price is None:
        raise UserError(f"{words} has no plan to print: it prices no run before it runs")
    cfg, size = sized(experiment, cfg, out, pinned)
    plan = priced(experiment, cfg, out, size) if plan_only else None
    ran = Ran(experiment, cfg, plan, size)
    if (plan is not None or size is not None) and planned is not None:
        planned(ran)
    if plan_only:
        return ran
    report, payload = execute(
        experiment,
        cfg,
        out,
        reuse=reuse,
        resources=resources(loaded) if experiment.pool or experiment.workers else None,
        trackers=trackers,
        command=command(out),
        progress=progress,
        device=device if experiment.pool else "cpu",
    )
    failures, lost = failure_lines(payload), lost_an_arm(payload)
    return dataclasses.replace(ran, report=report, payload=payload, failures=failures, lost=lost)


def find(words: str) -> tuple[type[Experiment], Command]:
    """The experiment and its command that `words` ("demo", "sanford match") call; an unknown
    command fails with the nearest one, or the list."""
    commands = {
        c.words: (EXPERIMENTS.get(name), c)
        for name in EXPERIMENTS.names()
        for c in EXPERIMENTS.get(name).commands
    }
    if words not in commands:
        close = difflib.get_close_matches(words, commands, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; one of: {', '.join(commands)}"
        raise UserError(f"no experiment command {words!r}{hint}")
    return commands[words]


def resolve(
    experiment: type[Experiment],
    words: str,
    form: str | None,
    config_file: str | Path | None,
    given: dict[str, Any],
) -> Any:
    """The config a run of the command `words` is given: its defaults (the quick form, `form`,
    or the form the command runs: `blocklab demo`) < the TOML file < `given`, nested as the
    config nests them."""
    _has_form(experiment, words, form)
    defaults = experiment.defaults(words, form)
    toml = str(config_file) if config_file else None
    return cfgmod.resolve(experiment.Config, defaults, toml, given, what=words)


def _has_form(experiment: type[Experiment], words: str, form: str | None) -> None:
    if form is not None and form not in experiment.forms:
        raise UserError(f"{words} has no {form!r} form")


def execute(
    experiment: type[Experiment],
    cfg: Any,
    out: str | Path,
    *,
    reuse: str = "current",
    resources: Resources | None = None,
    trackers: tuple[str, ...] | list[str] = (),
    command: str = "",
    progress: bool = True,
    device: str = "cpu",
) -> tuple[Any, dict[str, Any]]:
    """The run path's second half (`run`'s), once the config is resolved and sized: open the run
    directory, run the trials, write the report and the page; return the report and the JSON
    `--json` prints (the report's, with `report`, `config`, `page` and `status`, and where
    trials raised `failed_arms`: each arm some of whose trials raised, `_failed_arms`)."""
    from blocklab.formatting import config_json, plain

    names = list(dict.fromkeys(trackers))
    for name in names:
        tracker_mod.require(name)  # before anything runs or is written
    out, store = _open_run(out, reuse, device)
    try:
        report, page, failed_arms = _run_and_report(
            experiment, cfg, command, progress, out, store, resources, names
        )
    except KeyboardInterrupt:
        # a stop outside a sweep's trials (between two sweeps, in the analysis) keeps what the
        # command stored as well: the same words as one inside them
        raise Interrupted(store.kept()) from None
    finally:
        store.close()  # the last connection to close folds the WAL back into the store file
    payload = {**report.json, "report": str(report.path), "config": config_json(cfg)}
    if failed_arms:  # only then: a run's JSON keeps its keys
        payload["failed_arms"] = failed_arms
    return report, plain({**payload, "page": str(page), "status": report.status.as_json()})


def _run_and_report(
    experiment, cfg, command: str, progress: bool, out: Path, store, resources, names
):
    """Run the trials (each logged to the trackers as it is stored), write the report and the
    page, hand the trackers the summary; return the report, the page's path and the arms some
    of whose trials raised (`_failed_arms`)."""
    from blocklab.formatting import config_json
    from blocklab.reports import html, markdown

    _write_run_file(out, experiment.name, command, config_json(cfg))
    opened = [
        tracker_mod.open_tracker(name, out, experiment.name, command, config_json(cfg))
        for name in names
    ]
    store.listeners += [t.trial for t in opened]  # each trial logged as it is stored
    bar = Display(progress, out)  # one display for every sweep the command runs
    try:
        trials = experiment.run(cfg, store, resources=resources, progress=bar)
        # the report module analyzes the trials (summaries, tests, fits, findings) and writes;
        # the display says so, and shows what the analysis counts (`progress.current`): a
        # context, not an argument, so every report keeps `write(out_dir, cfg, trials)`
        rows = getattr(trials, "rows", None)  # `Trials`, or what the experiment's report reads
        # trials, not rows: a depth ladder's trial is a row per rung
        with bar.analysing(len({r.get("id") for r in rows}) if rows is not None else None):
            report = importlib.import_module(experiment.report_module()).write(out, cfg, trials)
    except BaseException:
        bar.close()
        for tracker in opened:
            tracker.abort()
        raise
    _write_run_file(out, experiment.name, command, config_json(cfg), report.status)
    markdown.put_status(report.path, report.status)
    records = store.records()
    page = html.write(out, records)
    for tracker in opened:
        tracker.finish(records, report.path, report.json)
    return report, page, _failed_arms(trials, records)


class Display(Progress):
    """The run's display, which also notes in run.json how many trials a phase not yet
    begun will plan (`Progress.expect`): an interrupted run's index counts them as planned."""

    def __init__(self, enabled: bool, out: Path):
        from blocklab.rundir import RunDir

        super().__init__(enabled=enabled)
        self.run_dir = RunDir(out)

    def expect(self, n: int) -> None:
        super().expect(n)
        self.run_dir.note_expected(self.expected)


def _failed_arms(trials, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm with trials that raised (`Trials.failed`): the arm, how many of its trials
    raised, of how many, and the first error's first line, in the order the arms first failed.
    An arm all of whose trials raised is missing from the report's tables."""
    arm_of = {r["id"]: r.get("config", {}).get("arm", {}).get("label") for r in records}
    lost: dict[str, dict[str, Any]] = {}
    # an experiment's run may return what its own report reads instead of `Trials`
    failed, rows = getattr(trials, "failed", []), getattr(trials, "rows", [])
    for f in failed:
        # a trial never stored (not run) is named by its description: task, budget, arm, ...
        words = f["trial"].split()
        arm = arm_of.get(f["id"]) or (words[2] if len(words) > 2 else f["trial"])
        entry = lost.setdefault(arm, {"arm": arm, "failed": 0, "error": ""})
        entry["failed"] += 1
        entry["error"] = entry["error"] or (f["error"].splitlines() or [""])[0]
    for entry in lost.values():
        done = {r.get("id") for r in rows if r.get("arm") == entry["arm"]}
        entry["trials"] = entry["failed"] + len(done)
    return list(lost.values())


def _write_run_file(
    out: Path, experiment: str, command: str, config: dict[str, Any], status=None
) -> None:
    """The run's record of how it was made (`rundir.RunDir.write_record`), with its status line
    once the report is written."""
    from blocklab.rundir import RunDir

    RunDir(out).write_record(experiment, command, config, status.as_json() if status else None)


def _open_run(out: str | Path, reuse: str, device: str) -> tuple[Path, Store]:
    """Check the run flags and the output directory, then open the store in it: a check that
    fails leaves nothing behind. --out always names a directory, whatever its name."""
    from blocklab.engine.devices import device_name
    from blocklab.rundir import RunDir

    device_name(device)  # a bad or missing device fails here
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(
            f"--out {out} is a file: --out names a run directory (store, report, plots)"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        # a probe of this process's own: two sweeps sharing a run directory start at once
        with tempfile.TemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UserError(f"output directory {out} is not writable: {exc.strerror}") from None
    store = Store(out / DB_NAME, reuse=reuse)
    # each sweep's plan noted in run.json: an interrupted run reads `incomplete: k of n planned
    # ran` in the index
    store.on_expect.append(RunDir(out).note_planned)
    return out, store


def sized(experiment: type[Experiment], cfg: Any, out, pinned: bool):
    """(config, run size): the config sized by its `target_resolution` (the manifest's sizing
    hook, `Experiment.sizing`), or as it was with no size where nothing is sized."""
    resolution = getattr(cfg, "target_resolution", None)
    if experiment.sizing is None or resolution is None:
        return cfg, None
    return experiment.sizing.size(cfg, out, pinned)


def priced(experiment: type[Experiment], cfg: Any, out, size=None):
    """The plan of running `cfg` into `out` (the manifest's price hook, `Experiment.price`),
    with the run size's keys where a target resolution sized it."""
    plan = experiment.price(cfg, out)
    if size is None:
        return plan
    keys = {k: v for k, v in size.json().items() if k not in ("core_seconds", "gpu_seconds")}
    return dataclasses.replace(plan, extra={**plan.extra, **keys})


def in_toml(path, key: str) -> bool:
    """Whether the TOML file at `path` (None: no file) sets `key`."""
    return bool(path) and key in cfgmod.load_toml(str(path))


def failure_lines(payload: dict[str, Any]) -> list[str]:
    """A line per arm some of whose trials raised: how many, and the first error."""
    return [
        f"{a['arm']}: {a['failed']} of {a['trials']} trials failed; the first: {a['error']}"
        for a in payload.get("failed_arms", [])
    ]


def lost_an_arm(payload: dict[str, Any]) -> bool:
    """Whether every trial of some arm raised: the report compares without it."""
    return any(a["failed"] == a["trials"] for a in payload.get("failed_arms", []))

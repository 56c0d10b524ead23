"""Experiments, one home each: a frozen config in, stored trials out.

An experiment's home is a package here, `experiments/NAME/`, that holds its run, its analysis and
its report, each in its layer:

- `experiment.py` declares its config (a frozen dataclass whose defaults are the quick form, with
  classmethods `medium()` and `full()` where there are larger forms), a `run(cfg, store, *,
  resources=None, progress=True)` that plans its trials, runs and stores them and returns what
  they measured (`progress` is a flag, or the command's one display, `engine.progress.Progress`,
  that every sweep of the run adds its trials to), and a manifest: a subclass of `Experiment`
  (`manifest`), decorated with `@EXPERIMENTS.register`, naming the config, the run and the
  command words, and where a run is sized to a resolution before it runs, its sizing hook
  (`Sizing`). The registry names it after its home, so `experiments/collapse/` is `collapse`.
- `analysis.py` (or `analysis/`, once it grows) computes from the rows, in the analysis layer.
- `report.py` (or `report/`) words and draws it, in the reports layer: its `analyze(cfg, trials)`
  calls the analysis and `write(out_dir, cfg, trials)` analyzes and writes. The report is found
  by convention, the home's `report` (`Experiment.report_module`); a plugin's manifest may name
  its own (`report = "my_plugin.report"`), and one without is answered by the `report` module of
  its package, or, in a top-level module, by that module itself.
- `__init__.py` says what the experiment is and re-exports its config, run and manifest.

Private modules here (`_trials`, `_seprank`, `_pricing`) hold what several experiments share;
what only one uses lives in its home, and so does its statistics: the shared `blocklab.analysis`
and `blocklab.reports` hold only what two homes, or a module outside the experiments, use.

An experiment gathers; it does not conclude. `run` returns `Trials`: one flat row per finished
trial, the trials that raised, and (in a subclass) facts the run measured or computed that are
not statistics of the rows, such as the chosen learning rates or the corpus. Everything computed
from the rows (summaries over seeds, tests, fits, findings) is the report's `analyze`, built on
the analysis layer, which sits above the experiments.

An experiment module imports what needs torch or numpy inside the functions that run, so the
command line reads every config without them and `blocklab --help` answers at once (a test holds
every experiment to it).
"""

from __future__ import annotations

from blocklab.experiments.manifest import (
    EXPERIMENTS_PACKAGE,
    Command,
    Experiment,
    Sizing,
    Trials,
)
from blocklab.registry import Registry, import_submodules

__all__ = ["EXPERIMENTS", "Command", "Experiment", "Sizing", "Trials"]

# a manifest in a home is named after the home (`blocklab.experiments.collapse.experiment`:
# `collapse`), one elsewhere after its module
EXPERIMENTS: Registry[type[Experiment]] = Registry("experiment", home=EXPERIMENTS_PACKAGE)
import_submodules(__name__)

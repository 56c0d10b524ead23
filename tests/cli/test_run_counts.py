"""What a run that stopped early says it ran: the runs index counts the trials (or measured
points) its command planned, later phases included, against those that finished; and
`blocklab runs` lists no two stored trials on the same line."""

from __future__ import annotations

from blocklab import rundir
from blocklab.cli import main
from blocklab.experiments import seprank_degree as dg
from blocklab.launch import Display
from blocklab.store import Store


def record(trial_id: str, config: dict, seed: int = 0) -> dict:
    return {
        "id": trial_id,
        "experiment": "degree-sweep",
        "status": "done",
        "seed": seed,
        "config": config,
        "metrics": {"test_metric": 0.5, "metric": "mse"},
        "provenance": {},
        "finished_at": 1000.0,
    }


def test_a_stopped_run_counts_the_points_that_never_started(tmp_path, monkeypatch):
    """seprank degree stopped at its 5th point: the later degrees never started, and the index
    still counts every planned point against the 4 that ran."""
    args = ["seprank", "degree", "--degrees", "2", "3", "--width", "2", "--templates", "40"]
    args += ["--seeds", "2", "--workers", "1", "--quiet", "--out", str(tmp_path)]
    put, seen = Store.put, []

    def stopping_put(self, rec):
        seen.append(rec["id"])
        if len(seen) == 5:
            raise KeyboardInterrupt
        put(self, rec)

    monkeypatch.setattr(Store, "put", stopping_put)
    assert main(args) == 130
    monkeypatch.undo()
    cfg = dg.DegreeConfig(degrees=("2", "3"), width=2, templates=40, seeds=2)
    planned = sum(len(dg.degree_depths(d, cfg)) for d in (2.0, 3.0)) * cfg.seeds
    run = rundir.RunDir(tmp_path)
    assert len(run.planned()) == planned
    records = Store(tmp_path, read_only=True).records()
    assert run.state(records) == f"incomplete: 4 of {planned} planned ran"


def test_a_phase_not_begun_counts_as_planned(tmp_path):
    store = Store(tmp_path)
    store.put(record("x0", {"budget": 1}))
    store.close()
    run = rundir.RunDir(tmp_path)
    run.write_record("degree_sweep", "blocklab degree-sweep", {})
    run.note_planned(["x0", "x1", "x2"])
    display = Display(False, tmp_path)  # the command's display notes what it expects
    display.expect(12)  # the seeds after a learning-rate search
    records = Store(tmp_path, read_only=True).records()
    assert run.state(records) == (
        "incomplete: 1 of 15 planned ran (about 12 of them in a phase that never began)"
    )
    display.expect(-12)  # the phase began: its sweep plans its own trials
    assert run.state(records) == "incomplete: 1 of 3 planned ran"


def test_runs_list_tells_every_trial_apart(tmp_path, capsys):
    """Trials of one cell that differ in teacher, fit or any other config value read apart."""
    base = {"task": "teacher", "arm": {"label": "d=4"}, "budget": 288, "depth": 8, "width": 3}
    base["train"] = {"lr": 0.01, "optimizer": "lm", "steps": 512}
    store = Store(tmp_path)
    store.put(record("a", {**base, "data_seed": 0}))
    store.put(record("b", {**base, "data_seed": 1}))
    store.put(
        record("c", {**base, "data_seed": 0, "train": {**base["train"], "optimizer": "lbfgs"}})
    )
    store.put(record("d", {**base, "data_seed": 0, "train": {**base["train"], "steps": 1024}}))
    store.close()
    assert main(["runs", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    trials = [line.split(None, 1)[1] for line in lines]  # all but the id
    assert len(trials) == 4 and len(set(trials)) == 4, trials
    assert "teacher=1" in trials[1] and "fit=lbfgs" in trials[2]
    assert "train.steps=512" in trials[0] and "train.steps=1024" in trials[3]

"""benchmarks/gpu_check.py, the one command that checks an accelerator: it covers every training
experiment (its run on a device is a timing, not a test: docs/scale.md)."""

from __future__ import annotations

from _scripts import load
from blocklab.experiments import EXPERIMENTS


def _load():
    return load("gpu_check")


def test_it_runs_every_training_experiments_tiny_form():
    check = _load()
    commands = {c.words for name in EXPERIMENTS.names() for c in EXPERIMENTS.get(name).commands} - {
        "demo"
    }  # the demo is the degree sweep in its demo form: the sweep's tiny form covers it
    trained = {w for w in commands if not w.startswith("seprank")}  # seprank trains nothing
    assert trained == set(check.TINY)
    args = check.parse(["--device", "cpu", "--no-forms", "--precision", "bf16"])
    assert (args.device, args.forms, args.precision) == ("cpu", False, "bf16")
    assert check.parse([]).device == "cuda"


def test_the_sync_check_passes_the_scheduled_growth_and_fails_a_sync_per_step():
    """The syncs may grow with the steps by the reads and copies the design schedules, computed
    from its constants (READ_EVERY, ONLINE_CHUNK), and no more: a sync per step fails."""
    from blocklab.fitting.monitor import READ_EVERY
    from blocklab.fitting.train import ONLINE_CHUNK

    check = _load()
    short, long = check.SYNC_STEPS
    reads = [check.scheduled(s)[0] for s in (short, long)]
    copies = [check.scheduled(s)[1] for s in (short, long)]
    # a read at each checkpoint after step 0 (the same in both) and every READ_EVERY steps
    assert reads[1] - reads[0] == long // READ_EVERY - short // READ_EVERY
    assert copies == [check.CHUNK_COPIES * -(-s // ONLINE_CHUNK) for s in (short, long)]
    growth = reads[1] - reads[0] + copies[1] - copies[0]
    good, line = check.sync_line({short: 35, long: 35 + growth})
    assert good and line.startswith("ok   ensemble syncs: 35 in 40 steps")
    assert f"scheduled growth {growth} (reads {reads[1] - reads[0]} every READ_EVERY" in line
    assert check.sync_line({short: 35, long: 52})[0]  # the H200's count, before the copies pinned
    bad, line = check.sync_line({short: 35, long: 35 + (long - short)})  # one per step
    assert not bad and line.startswith("FAIL ensemble syncs")


def test_the_width_sweeps_line_reads_zoologys_claim_or_says_it_found_none():
    from blocklab.experiments.mad.report.published import GATED_CLAIM

    check = _load()
    found = {"findings": [{"claim": "other"}, {"claim": GATED_CLAIM, "status": "agrees",
                                               "evidence": "width 16 for 4 pairs"}]}  # fmt: skip
    assert check.zoology_line(found) == "zoology's claim: agrees (width 16 for 4 pairs)"
    assert check.zoology_line({}) == "zoology's claim: not in the run's JSON"


def test_the_optimizer_line_times_both_paths_and_names_the_devices():
    check = _load()
    line = check.optimizer_line("cpu", width=8, members=2, steps=2)
    assert "skip " in line and "mask " in line and line.endswith("cpu takes skip")
    assert line.startswith(("ok  ", "SLOW"))  # a timing: which, this test cannot promise

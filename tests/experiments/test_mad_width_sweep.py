"""`blocklab mad --sweep-width`: zoology's MQAR width sweep. The smallest solving width and the
claim read from rows whose answers are known, the settings MQAR admits, and the command end to
end with its JSON."""

from __future__ import annotations

import json

import pytest

from blocklab.cli import main
from blocklab.experiments import mad
from blocklab.experiments.mad import width_sweep as sweep
from blocklab.experiments.mad.analysis import width_sweep as ws


def _rows(table):
    """Rows from {(block, width, pairs, seq_len): [accuracy per seed]}."""
    return [
        {"block": b, "width": w, "pairs": p, "seq_len": t, "seed": s, "status": "done",
         "test_metric": acc}
        for (b, w, p, t), accs in table.items()
        for s, acc in enumerate(accs)
    ]  # fmt: skip


def _sweep(solves):
    """A sweep at widths 16, 32, 64 and 4, 8 pairs of 32 tokens where block b solves pairs p
    from width solves[b][p] (None: at no width)."""
    table = {}
    for block, at in solves.items():
        for pairs, first in at.items():
            for width in (16, 32, 64):
                ok = first is not None and width >= first
                table[(block, width, pairs, 32)] = [0.99, 0.97, 0.98] if ok else [0.3, 0.4, 0.2]
    return _rows(table)


ZOOLOGY_LIKE = {
    "softmax_attention": {4: 16, 8: 16},
    "hyena": {4: 16, 8: 64},
    "h3": {4: 32, 8: None},
}


def test_the_smallest_solving_width_and_its_growth_with_the_pairs():
    table = ws.cells(_sweep(ZOOLOGY_LIKE))
    minimal = {(m["block"], m["pairs"]): m["width"] for m in ws.min_solving_widths(table, 0.9)}
    assert minimal[("hyena", 4)] == 16 and minimal[("hyena", 8)] == 64
    assert minimal[("h3", 8)] is None
    grown = {g.block: g for g in ws.growth(ws.min_solving_widths(table, 0.9))}
    assert grown["hyena"].grows and grown["h3"].grows  # unsolved at 8 pairs counts as growing
    assert grown["softmax_attention"].grows is False
    cell = next(c for c in table if (c["block"], c["width"], c["pairs"]) == ("hyena", 16, 4))
    assert cell["n"] == 3 and 0 <= cell["ci_low"] <= cell["mean"] <= cell["ci_high"] <= 1


@pytest.mark.parametrize(
    ("solves", "status"),
    [
        (ZOOLOGY_LIKE, "agrees"),
        # attention needs more width for more pairs too: the claim does not hold
        ({**ZOOLOGY_LIKE, "softmax_attention": {4: 16, 8: 32}}, "disagrees"),
        # a gated convolution that needs no more width: does not hold
        ({**ZOOLOGY_LIKE, "hyena": {4: 16, 8: 16}}, "disagrees"),
        # attention solves nothing: the sweep does not show the claim
        ({**ZOOLOGY_LIKE, "softmax_attention": {4: None, 8: None}}, "disagrees"),
        # no gated convolution ran: nothing to test
        ({"softmax_attention": {4: 16, 8: 16}}, "not tested here"),
    ],
)
def test_zoologys_claim_is_read_from_the_smallest_widths(solves, status):
    grown = ws.growth(ws.min_solving_widths(ws.cells(_sweep(solves)), 0.9))
    assert ws.zoology_claim(grown, list(solves))[0] == status


def test_one_pair_count_tests_nothing():
    rows = [r for r in _sweep(ZOOLOGY_LIKE) if r["pairs"] == 4]
    grown = ws.growth(ws.min_solving_widths(ws.cells(rows), 0.9))
    assert ws.zoology_claim(grown, list(ZOOLOGY_LIKE)) == (
        "not tested here",
        "the sweep needs two pair counts or more at a sequence length",
    )


def test_the_sweep_plans_the_settings_mqar_admits_easiest_first():
    cfg = mad.MadConfig(mode="width-sweep", sweep_pairs=(8, 4, 16), sweep_seq_lens=(32, 64))
    # 16 pairs need 64 tokens (4 pairs per 16 tokens)
    assert sweep.settings(cfg) == [(4, 32), (8, 32), (4, 64), (8, 64), (16, 64)]
    assert mad.MadConfig.sweep_width().mode == "width-sweep"


def test_the_suite_refuses_the_sweeps_keys_and_the_sweep_the_suites(capsys):
    assert main(["mad", "--widths", "8", "16", "--out", "x"]) == 2
    assert "width sweep" in capsys.readouterr().err
    assert main(["mad", "--sweep-width", "--budget", "5000", "--out", "x"]) == 2


def test_the_width_sweep_end_to_end(tmp_path, capsys):
    args = ["mad", "--sweep-width", "--blocks", "softmax_attention", "h3", "--widths", "8", "16"]
    args += ["--sweep-pairs", "2", "4", "--sweep-seq-lens", "16", "--seeds", "2", "--steps", "20"]
    args += ["--lr-grid", "0.003", "0.01", "--workers", "1", "--out", str(tmp_path), "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert {c["width"] for c in out["width_sweep"]} == {8, 16}
    assert set(out["width_sweep"][0]) == {"block", "width", "pairs", "seq_len", "mean", "ci_low",
                                          "ci_high", "n"}  # fmt: skip
    assert set(out["min_solving_width"][0]) == {"block", "pairs", "seq_len", "width"}
    gated = next(f for f in out["published"] if f["claim"].startswith("gated convolutions"))
    assert gated["status"] in ("agrees", "disagrees")
    assert {"scores", "results", "paired", "correlation", "lr_choice", "trial_time"} <= set(out)
    # the time per block and width: 2 blocks x 2 widths x 2 settings x 2 seeds, and the rates
    # the search tried beside the chosen ones
    t = out["trial_time"]
    others = sum(len(c["tried"]) - 1 for c in out["lr_choice"].values())
    assert t["trainings"] == 16 + others and set(t["by_width"]) == {"8", "16"}
    assert sum(t["by_width"].values()) == pytest.approx(t["total"])
    assert (
        f"Trial time (the trainings' own seconds, summed over processes): {t['total']:.0f} s"
        in (tmp_path / "report.md").read_text()
    )
    # the suite's summary keys, the setting as its level (easiest first), and the sweep's
    assert {"block", "task", "level", "width", "pairs", "seq_len"} <= set(out["summaries"][0])
    assert {(s["pairs"], s["level"]) for s in out["summaries"]} == {(2, 0), (4, 1)}
    assert set(out["plateau"]) == {"softmax_attention", "h3"}  # the blocks as written
    assert all(p["trials"] == 8 for p in out["plateau"].values())  # 2 widths x 2 settings x 2
    line = out["status"]["line"]
    assert line.startswith("FINDINGS: ") and "zoology's gated-convolution claim: " in line
    learning = {(c["block"], c["width"], c["pairs"]): c for c in out["learning"]}
    assert len(learning) == 8 and all(c["trials"] == 2 for c in learning.values())
    assert ("AT CHANCE" in line) == any(c["at_chance"] for c in learning.values())
    assert (tmp_path / "mad_width_sweep.png").exists()

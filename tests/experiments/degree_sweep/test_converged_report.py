"""The degree sweep's report of second-order fits, on synthetic rows: the checks' words, the fit
columns of the loss table, the referee's section, the loss-against-iterations figure, the JSON's
`optimizer` and `referee`, and the terminal's converged line; Adam runs keep their report."""

from __future__ import annotations

import json
import types
from dataclasses import replace

import pytest
from test_capacity_fits import BUDGETS, fit_rows, referee_rows

from blocklab.experiments.degree_sweep import SHAPE, DegreeSweepConfig, DegreeSweepTrials
from blocklab.experiments.degree_sweep import report as degree_report
from blocklab.formatting import plain
from blocklab.specs import TrainConfig


@pytest.fixture(autouse=True)
def scaling_status(monkeypatch):
    """These tests plant the scaling model's checks and read the status they give: the matched
    answer, which leads wherever arms meet (`test_matched` plants its checks), is off here."""
    from blocklab.experiments.degree_sweep.analysis import matched

    monkeypatch.setattr(matched, "applies", lambda rows: False)



def config(optimizer="lm"):
    train = TrainConfig(optimizer=optimizer, steps=64, batch_size=256, schedule="wsd")
    return DegreeSweepConfig(
        degrees=("2", "3", "4"),
        budgets=BUDGETS,
        seeds=3,
        n_boot=50,
        ladder="off",
        train=train,
        shape=replace(SHAPE, width=8),
    )


def write(tmp_path, trials, optimizer="lm"):
    report = degree_report.write(tmp_path, config(optimizer), trials)
    payload = json.loads(json.dumps(plain(report.json)))  # what --json prints: strict JSON
    return report.path.read_text(), payload, report.text


def _is_png(path):
    return path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A sweep of Levenberg-Marquardt fits with its L-BFGS referees, reported."""
    from blocklab.experiments.degree_sweep.analysis import matched

    out = tmp_path_factory.mktemp("fits")
    rows = fit_rows()
    with pytest.MonkeyPatch.context() as patch:  # as `scaling_status`, for the whole module
        patch.setattr(matched, "applies", lambda rows: False)
        return out, *write(out, DegreeSweepTrials(rows, [], {}, referee_rows(rows, ratio=1.02)))


def test_fits_report_their_curves_table_and_referee(fitted):
    out, text, _, _ = fitted
    assert _is_png(out / "fit_curves.png") and "](fit_curves.png)" in text
    header = next(line for line in text.splitlines() if line.startswith("| arm | budget | params"))
    for column in ("train loss", "median restart", "certified", "restart spread"):
        assert f"| {column} |" in header
    assert "plateaued" not in header
    referee = text[text.index("## Referee") :]
    assert "| arm | budget | lm train | converged | lbfgs train | converged | gap |" in referee
    assert "| 2.0% |" in referee
    assert "median of 2.0% and at most 2.0%" in referee


def test_fits_json_names_the_optimizer_and_the_referee(fitted):
    _, _, payload, _ = fitted
    assert payload["optimizer"] == "lm"
    checks = {c["name"]: c for c in payload["design_checks"]}
    assert {"converged", "generalization"} <= set(checks)
    assert not {"plateau", "lr_not_at_edge"} & set(checks)
    assert (
        "the last doubling of a fit's iterations lowered its training loss"
        in (checks["converged"]["detail"])
    )
    cells = payload["referee"]["cells"]
    assert len(cells) == 16 and {c["referee"] for c in cells} == {"lbfgs"}
    assert payload["referee"]["median_gap"] == pytest.approx(0.02)
    budget = payload["arms"]["d=3"]["budgets"]["1000"]
    assert budget["converged_fraction"] == 1.0 and budget["restart_spread"] == pytest.approx(0.01)


def test_fits_print_one_converged_line_after_the_checks(fitted):
    _, _, _, lines = fitted
    said = "converged fits: 48 of 48 (their last doubling of the iterations gained <= "
    at = next(i for i, line in enumerate(lines) if line.startswith(said))
    assert lines[at].endswith("; a fit stops at a gain < 0.03)")
    assert lines[at - 1].startswith("- ") and "resolution" in lines[at - 1]


def test_failed_fit_checks_say_what_to_change(tmp_path):
    rows = fit_rows(unconverged=10, overfit=("d=2", 1000))
    text, payload, _ = write(tmp_path, DegreeSweepTrials(rows, [], {}))
    checks = {c["name"]: c for c in payload["design_checks"]}
    assert not checks["converged"]["passed"] and "fit longer (--steps)" in text
    assert "d=2 at 1000 (1.5x" in checks["generalization"]["detail"]
    assert "grow N (--data-ratio, --max-examples) or shrink P" in checks["generalization"]["detail"]
    assert payload["verdict"] is None


def test_two_seeds_are_too_few_for_a_verdict(tmp_path):
    rows = fit_rows(seeds=2)
    text, payload, _ = write(tmp_path, DegreeSweepTrials(rows, [], {}))
    checks = {c["name"]: c for c in payload["design_checks"]}
    failed = [name for name, c in checks.items() if c["outcome"] == "failed"]
    assert failed == ["replicates"] and payload["verdict"] is None
    # 32 of 32 converged: a Wilson band of 32 trials reaches below 90% (it clears it from 35)
    assert checks["converged"]["outcome"] == "edge" and checks["converged"]["band"][0] < 0.9
    assert "d=3 at 1000 (2)" in checks["replicates"]["detail"] and "and 12 more" in text
    assert "raise --seeds or --teachers" in checks["replicates"]["detail"]
    ok = {
        c["name"]: c
        for c in write(tmp_path, DegreeSweepTrials(fit_rows(), [], {}))[1]["design_checks"]
    }
    assert ok["replicates"]["passed"] and "(3)" in ok["replicates"]["detail"]


def test_trials_without_referees_report_without_them(tmp_path):
    """Callers that build the trials without referees (rows, failed, lr_choice) still report."""
    trials = types.SimpleNamespace(rows=fit_rows(seeds=2), failed=[], lr_choice={})
    assert degree_report.analyze(config(), trials).referee == []
    text, payload, _ = write(tmp_path, trials)
    assert payload["referee"] is None and "## Referee" not in text
    assert _is_png(tmp_path / "fit_curves.png")


def test_adam_runs_keep_their_report(tmp_path):
    rows = fit_rows(seeds=2, optimizer="adam")
    for r in rows:
        r.update(train_loss=None, converged=None, restart_train_losses=[], restart_spread=None)
    text, payload, lines = write(tmp_path, DegreeSweepTrials(rows, [], {}), optimizer="adam")
    assert payload["optimizer"] == "adam" and payload["referee"] is None
    assert {"plateau", "lr_not_at_edge"} <= {c["name"] for c in payload["design_checks"]}
    assert not (tmp_path / "fit_curves.png").exists() and "## Referee" not in text
    assert "| plateaued |" in text and "| median restart |" not in text
    assert not any(line.startswith("converged fits") for line in lines)
